"""The distributions as an operator installs them: wheels built from this
checkout, installed into a fresh virtualenv with no ``.pth`` and no
``PYTHONPATH`` pointing back here. One service pulls only what it needs; the
whole system's commands are there and import.

In the suite, each wheel must carry every file of its package tree and name
what it needs; the fresh virtualenv gets the wheels unpacked and, of the
dependencies, exactly those their metadata resolves to (linked from this
checkout's virtualenv, none other visible), so that a module missing from a
wheel, an undeclared dependency or a stray path back here fails an import.
``make distributions`` also installs them with pip, dependencies and all, and
runs the whole system from that virtualenv: the embedded stack signs the
example packet."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from quire.testing.quirecli import ROOT, read_until

pytestmark = pytest.mark.stack

PROJECTS = ["gen", "libs/core", "libs/evidence", "libs/ops", "libs/testing"] + sorted(
    f"services/{path.name}" for path in (ROOT / "services").iterdir() if path.is_dir()
)
SERVICES = ("admission", "validator", "assembler", "signer", "audit")
SIGNER = {"quire-api", "quire-core", "quire-evidence", "quire-signer"}
OPS = {"quire-api", "quire-core", "quire-evidence", "quire-ops"}
"""The operator tools: a client of the services' APIs, with no service."""
SYSTEM = {
    "quire",
    "quire-api",
    "quire-core",
    "quire-evidence",
    "quire-ops",
    "quire-gateway",
    *(f"quire-{service}" for service in SERVICES),
}
"""The whole system, and no test helpers (quire-testing)."""
UV = str(Path(sys.executable).with_name("uv"))
"""uv, which ``make venv`` installs beside the interpreter."""
COMMANDS = ("quire", "quire-gateway", *(f"quire-{service}" for service in SERVICES))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for project in PROJECTS:  # setuptools' staging area keeps files a checkout no longer has
        shutil.rmtree(ROOT / project / "build", ignore_errors=True)
    # The pinned setuptools is in the virtualenv (dev extras): building with it
    # directly spares ten throwaway build environments. uv calls the same
    # setuptools build hooks as `pip wheel` (`make wheels`), in half the time.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for project in (*PROJECTS, "."):
        subprocess.run(
            [UV, "build", "--quiet", "--wheel", "--no-build-isolation", "--python"]
            + [sys.executable, "--out-dir", str(out), project],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out


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


def _fresh_venv(folder: Path, *, with_pip: bool) -> Path:
    """A fresh virtualenv, outside the checkout, with none of its paths."""
    command = [sys.executable, "-m", "venv", str(folder)]
    subprocess.run(command if with_pip else [*command, "--without-pip"], check=True, timeout=120)
    return folder


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


def _site(venv: Path, cwd: Path) -> Path:
    return Path(
        _python(venv, "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd).strip()
    )


def _quire_distributions(venv: Path, cwd: Path) -> set[str]:
    listed = _python(
        venv,
        "import json, importlib.metadata as m; "
        "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))",
        cwd,
    )
    return {name for name in json.loads(listed) if name.startswith("quire")}


# -- what the wheels carry and declare ---------------------------------------


def _wheel_metadata(wheels: Path) -> dict[str, tuple[Path, Message]]:
    """Each built wheel by its (canonical) distribution name, with its METADATA."""
    found = {}
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            message = Parser().parsestr(archive.read(name).decode())
        found[canonicalize_name(message["Name"])] = (wheel, message)
    return found


def _closure(built: dict[str, tuple[Path, Message]], *names: str) -> set[str]:
    """Every distribution that installing ``names`` brings in, as pip resolves
    them: Quire's from the built wheels' metadata, the others' from what this
    virtualenv has installed (at versions the requirements accept)."""
    todo = [(canonicalize_name(name), frozenset[str]()) for name in names]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name in built:
            requires = built[name][1].get_all("Requires-Dist") or []
        else:
            requires = metadata.distribution(name).requires or []
        for text in requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in {"", *extras}
            ):
                continue
            needed = canonicalize_name(requirement.name)
            if needed not in built:
                installed = metadata.version(needed)
                assert requirement.specifier.contains(installed, prereleases=True), (
                    f"{name} needs {requirement}; this virtualenv has {installed}"
                )
            todo.append((needed, frozenset(requirement.extras)))
    return {name for name, _extras in seen}


def _tracked_files(project: str) -> set[str]:
    """The files of a project's package tree (``quire/``) that git tracks and
    the checkout has, relative to the project."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", f"{project}/quire"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return {
        Path(path).relative_to(project).as_posix()
        for path in listed.split("\0")
        if path and (ROOT / path).is_file()
    }


def test_each_wheel_carries_every_file_of_its_package_tree_and_no_path_file(
    wheels: Path,
) -> None:
    built = _wheel_metadata(wheels)
    assert set(built) == {*SYSTEM, "quire-testing"}, sorted(built)
    for project in PROJECTS:
        declared = tomllib.loads((ROOT / project / "pyproject.toml").read_text())
        name = canonicalize_name(declared["project"]["name"])
        with zipfile.ZipFile(built[name][0]) as archive:
            carried = set(archive.namelist())
        missing = _tracked_files(project) - carried
        assert not missing, f"{name}'s wheel lacks {sorted(missing)}"
        assert not [n for n in carried if n.endswith(".pth")], f"{name} ships a .pth"
        assert not [n for n in carried if "/" not in n and n.endswith(".py")], (
            f"{name} ships a top-level module outside the quire namespace"
        )


def test_the_wheels_name_what_each_installation_needs(wheels: Path) -> None:
    built = _wheel_metadata(wheels)
    quire = {name for name in _closure(built, "quire-signer") if name.startswith("quire")}
    assert quire == SIGNER, "one service pulls only what it needs"
    quire = {name for name in _closure(built, "quire-ops") if name.startswith("quire")}
    assert quire == OPS, "the operator tools pull no service"
    quire = {name for name in _closure(built, "quire") if name.startswith("quire")}
    assert quire == SYSTEM, "the whole system, and no test helpers"
    for service in ("quire-validator", "quire-admission"):
        assert "pyhanko" not in _closure(built, service), (
            f"{service} checks no packet signature: no PDF-signature library"
        )
    commands = {
        line.split("=")[0].strip()
        for name in quire
        for line in _entry_points(built[name][0]).splitlines()
        if "=" in line
    }
    assert set(COMMANDS) <= commands, "every service's command, the gateway's and quire"


def _entry_points(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        listed = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        return archive.read(listed[0]).decode() if listed else ""


# -- installed: the wheels unpacked, their resolved dependencies linked ------


def _install_unpacked(site: Path, built: dict[str, tuple[Path, Message]], *names: str) -> None:
    """What pip would install for ``names``: Quire's wheels unpacked (pure
    Python, nothing but ``site-packages`` in them), every other distribution
    they resolve to linked file by file from this virtualenv."""
    for name in sorted(_closure(built, *names)):
        if name in built:
            with zipfile.ZipFile(built[name][0]) as archive:
                assert not [n for n in archive.namelist() if ".data/" in n], name
                archive.extractall(site)
            continue
        distribution = metadata.distribution(name)
        for file in distribution.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # scripts, and bytecode the fresh interpreter makes itself
            source = Path(str(distribution.locate_file(file)))
            target = site / file
            if source.is_file() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source)


IMPORTED_FROM = (
    "import json, sys\n"
    "print(json.dumps(sorted({getattr(m, '__file__', None) or '' for m in list(sys.modules.values())})))"
)
"""Prints the file of every module the fresh interpreter imported."""


def _no_path_back(site: Path, printed: str) -> None:
    files = [f for f in json.loads(printed.splitlines()[-1]) if f]
    from_here = [f for f in files if Path(f).is_relative_to(ROOT)]
    assert not from_here, f"imported from the checkout or its virtualenv: {from_here[:5]}"
    for pth in site.glob("*.pth"):
        assert str(ROOT) not in pth.read_text(), f"{pth.name} points back at the checkout"


def test_one_service_imports_with_only_what_it_needs_and_the_whole_systems_commands_load(
    wheels: Path, tmp_path: Path
) -> None:
    built = _wheel_metadata(wheels)
    venv = _fresh_venv(tmp_path / "venv", with_pip=False)
    site = _site(venv, tmp_path)

    _install_unpacked(site, built, "quire-signer")
    assert _quire_distributions(venv, tmp_path) == SIGNER
    printed = _python(
        venv,
        "import quire, quire.signer.main, quire.signer.work, quire.signer.v1.signer_service_pb2\n"
        "import importlib.metadata, importlib.util\n"
        "assert importlib.util.find_spec('quire.cli') is None, 'no operator tools'\n"
        "assert importlib.util.find_spec('quire.admission.jobs') is None, 'no other service'\n"
        "(command,) = importlib.metadata.entry_points(group='console_scripts', name='quire-signer')\n"
        "assert callable(command.load()), 'the service command'\n"
        "print('\\n'.join(quire.__path__))\n" + IMPORTED_FROM,
        tmp_path,
    )
    paths = printed.splitlines()[:-1]
    assert paths and all(Path(p).is_relative_to(site) for p in paths), paths
    _no_path_back(site, printed)

    _install_unpacked(site, built, "quire")
    assert _quire_distributions(venv, tmp_path) == SYSTEM, "the whole system, no test helpers"
    printed = _python(
        venv,
        "import importlib.metadata\n"
        f"for name in {list(COMMANDS)!r}:\n"
        "    (command,) = importlib.metadata.entry_points(group='console_scripts', name=name)\n"
        "    assert callable(command.load()), name\n" + IMPORTED_FROM,
        tmp_path,
    )
    _no_path_back(site, printed)


def _modules_of(wheel: Path) -> list[str]:
    """Every module a wheel ships, by its dotted name."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith("quire/") and n.endswith(".py")]
    return sorted(n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in names)


def test_the_operator_tools_install_and_import_without_any_service(
    wheels: Path, tmp_path: Path
) -> None:
    """quire-ops alone: every module of it imports, no service is there, and
    ``quire check`` over a stopped stack asks the services' own export,
    which says plainly that they are not installed (it reads no table)."""
    built = _wheel_metadata(wheels)
    venv = _fresh_venv(tmp_path / "venv", with_pip=False)
    site = _site(venv, tmp_path)
    _install_unpacked(site, built, "quire-ops")
    assert _quire_distributions(venv, tmp_path) == OPS
    modules = _modules_of(built["quire-ops"][0])
    assert "quire.invariants" in modules and "quire.stack.supervisor" in modules
    printed = _python(
        venv,
        "import importlib, importlib.util\n"
        f"for name in {modules!r}:\n"
        "    if name != 'quire.stack.zygote':  # the stack's own process: it runs, not imports\n"
        "        importlib.import_module(name)\n"
        f"for service in {list(SERVICES)!r}:\n"
        "    assert importlib.util.find_spec(f'quire.{service}.main') is None, service\n"
        "    assert importlib.util.find_spec(f'quire.{service}.v1') is not None, service\n"
        "assert importlib.util.find_spec('quire.gateway') is None, 'gateway'\n" + IMPORTED_FROM,
        tmp_path,
    )
    _no_path_back(site, printed)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "quire.cli.main"]
        + ["check", "--data-dir", str(data_dir), "--stopped"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 6, done.stdout + done.stderr  # UNREACHABLE
    assert "quire-admission is not installed" in done.stderr, done.stderr
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "quire.cli.main", "up", "--data-dir", str(data_dir)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # USAGE: nothing was started
    assert "quire-admission" in done.stderr and "pip install quire" in done.stderr
    assert not (data_dir / "stack.lock").exists(), "no stack was started"


# -- make distributions: installed by pip, and the whole system run ----------


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


@pytest.mark.only_in("distributions")
def test_one_service_installs_from_its_wheel_with_only_what_it_needs_then_the_whole_system_runs(
    wheels: Path, tmp_path: Path
) -> None:
    venv = _fresh_venv(tmp_path / "venv", with_pip=True)
    site = _site(venv, tmp_path)

    _install(venv, wheels, "quire-signer")
    assert _quire_distributions(venv, tmp_path) == SIGNER
    assert (venv / "bin" / "quire-signer").exists(), "the service's own command"
    paths = _python(
        venv,
        "import quire, quire.signer.main, quire.signer.work, quire.signer.v1.signer_service_pb2\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('quire.cli') is None, 'no operator tools'\n"
        "assert importlib.util.find_spec('quire.admission.jobs') is None, 'no other service'\n"
        "print('\\n'.join(quire.__path__))",
        tmp_path,
    )
    assert all(Path(p).is_relative_to(site) for p in paths.split()), paths
    for pth in site.glob("*.pth"):
        assert str(ROOT) not in pth.read_text(), f"{pth.name} points back at the checkout"

    _install(venv, wheels, "quire")
    assert _quire_distributions(venv, tmp_path) == SYSTEM, "the whole system, and no test helpers"
    for command in COMMANDS:
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
