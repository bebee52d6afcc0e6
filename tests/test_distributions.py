"""The distributions as an operator installs them: wheels built from this
checkout, installed into a fresh virtualenv with no ``.pth`` and no
``PYTHONPATH`` pointing back here. One service pulls only what it needs; the
whole system runs the embedded stack and signs the example packet."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from quire.testing.quirecli import ROOT, read_until

pytestmark = pytest.mark.stack

PROJECTS = ["gen", "libs/core", "libs/ops", "libs/testing"] + sorted(
    f"services/{path.name}" for path in (ROOT / "services").iterdir() if path.is_dir()
)
SERVICES = ("admission", "validator", "assembler", "signer", "audit")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for project in PROJECTS:  # setuptools' staging area keeps files a checkout no longer has
        shutil.rmtree(ROOT / project / "build", ignore_errors=True)
    # The pinned setuptools is in the virtualenv (dev extras): building with it
    # directly spares ten throwaway build environments.
    _pip(
        sys.executable,
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
        *(f"./{p}" for p in PROJECTS),
        ".",
    )
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv, outside the checkout, with none of its paths."""
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=120)
    return folder


def _pip(python: str | Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-m", "pip", *args[:1], "--quiet", *args[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _install(venv: Path, wheels: Path, *names: str) -> None:
    _pip(
        venv / "bin" / "python",
        "install",
        "-c",
        str(ROOT / "constraints.txt"),
        "--find-links",
        str(wheels),
        *names,
    )


def _python(venv: Path, code: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _quire_distributions(venv: Path, cwd: Path) -> set[str]:
    listed = _python(
        venv,
        "import json, importlib.metadata as m; "
        "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))",
        cwd,
    )
    return {name for name in json.loads(listed) if name.startswith("quire")}


def test_one_service_installs_from_its_wheel_with_only_what_it_needs_then_the_whole_system_runs(
    wheels: Path, venv: Path, tmp_path: Path
) -> None:
    site = Path(
        _python(venv, "import sysconfig; print(sysconfig.get_paths()['purelib'])", tmp_path).strip()
    )

    _install(venv, wheels, "quire-signer")
    assert _quire_distributions(venv, tmp_path) == {"quire-api", "quire-core", "quire-signer"}
    assert (venv / "bin" / "quire-signer").exists(), "the service's own command"
    paths = _python(
        venv,
        "import quire, quire.signer.main, quire.signer.work, quire.signer.v1.signer_service_pb2\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('quire.cli') is None, 'no operator tools'\n"
        "assert importlib.util.find_spec('quire.admission.intake') is None, 'no other service'\n"
        "print('\\n'.join(quire.__path__))",
        tmp_path,
    )
    assert all(Path(p).is_relative_to(site) for p in paths.split()), paths
    for pth in site.glob("*.pth"):
        assert str(ROOT) not in pth.read_text(), f"{pth.name} points back at the checkout"

    _install(venv, wheels, "quire")
    assert _quire_distributions(venv, tmp_path) == {
        "quire",
        "quire-api",
        "quire-core",
        "quire-ops",
        "quire-gateway",
        *(f"quire-{service}" for service in SERVICES),
    }, "the whole system, and no test helpers"
    for command in ("quire", "quire-gateway", *(f"quire-{service}" for service in SERVICES)):
        assert (venv / "bin" / command).exists(), command

    data_dir = tmp_path / "data"
    up = subprocess.Popen(
        [
            str(venv / "bin" / "quire"),
            "up",
            "--data-dir",
            str(data_dir),
            "--example",
            str(ROOT / "examples" / "lease-renewal"),
        ],
        cwd=tmp_path,
        env=dict(
            {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, QUIRE_DRAIN_SECONDS="5"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        printed = read_until(up, "serving; press Ctrl-C to stop", timeout=180)
        assert "(verified)" in printed, printed
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
    assert up.returncode == 0
