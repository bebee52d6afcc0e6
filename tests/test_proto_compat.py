"""The protos' lint and wire-compatibility check (``make protos-lint``).

``buf breaking`` must refuse the changes that break a client already built
against a release: a removed field, a field number reused for another field,
a field's type changed. Each is made deliberately in a temporary copy of
``protos/`` (with its ``buf.yaml``, so the rules are the real ones) and
compared to a baseline cut from the same copy before the change, so the
failure is the change's own and not some unrelated edit in flight. The real
protos are checked against the committed baseline, as ``make test`` does.
The rules are written in protos/VERSIONING.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
BASELINE = PROTOS / "released" / "quire-v1.json"
INSTALL_SCRIPT = ROOT / "tools" / "install-buf.sh"
BUF = ROOT / ".venv" / "buf" / "node_modules" / ".bin" / "buf"
JOB_PROTO = Path("quire") / "type" / "job.proto"


def _pinned_version() -> str:
    found = re.search(r"^BUF_VERSION=(\S+)$", INSTALL_SCRIPT.read_text(), re.MULTILINE)
    assert found, f"{INSTALL_SCRIPT} pins no BUF_VERSION"
    return found.group(1)


@pytest.fixture(scope="module")
def buf() -> Path:
    if not BUF.exists():
        pytest.fail(
            f"buf is not installed at {BUF.relative_to(ROOT)}: run `make venv` and then "
            "`sh tools/install-buf.sh` (or `make protos-lint`, which does both)"
        )
    version = _run(BUF, "--version", cwd=ROOT).stdout.strip()
    assert version == _pinned_version(), (
        f"buf {version} is installed, tools/install-buf.sh pins {_pinned_version()}: "
        "run `sh tools/install-buf.sh`"
    )
    return BUF


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.fixture
def copy(tmp_path: Path, buf: Path) -> Path:
    """A copy of protos/ and, beside it, a baseline cut from it unchanged
    with the same flags as ``make protos-release``."""
    copied = tmp_path / "protos"
    shutil.copytree(PROTOS, copied, ignore=shutil.ignore_patterns("released"))
    cut = _run(
        buf,
        "build",
        copied,
        "--exclude-source-info",
        "-o",
        tmp_path / "baseline.json",
        cwd=tmp_path,
    )
    assert cut.returncode == 0, cut.stderr
    return copied


def _breaking(buf: Path, protos: Path, against: Path) -> subprocess.CompletedProcess[str]:
    return _run(buf, "breaking", protos, "--against", against, cwd=protos.parent)


def _edit_message(protos: Path, message: str, old: str, new: str) -> None:
    """Replaces one line of ``message``'s body in quire/type/job.proto;
    fails loudly if the line is gone, rather than test nothing."""
    path = protos / JOB_PROTO
    text = path.read_text()
    block = re.search(rf"^message {message} \{{\n(.*?)^\}}", text, re.MULTILINE | re.DOTALL)
    assert block, f"no message {message} in {JOB_PROTO}"
    body = block.group(1)
    assert body.count(old + "\n") == 1, f"{message} no longer has the line {old.strip()!r}"
    edited = body.replace(old + "\n", new + "\n" if new else "")
    path.write_text(text[: block.start(1)] + edited + text[block.end(1) :])


def test_the_real_protos_keep_compatible_with_the_released_baseline(buf: Path) -> None:
    result = _breaking(buf, PROTOS, BASELINE)
    assert result.returncode == 0, (
        "protos/ break compatibility with protos/released/quire-v1.json:\n"
        f"{result.stdout}{result.stderr}"
        "If these changes are intended and allowed (protos/VERSIONING.md), "
        "cut a new baseline with `make protos-release`."
    )


def test_an_unchanged_copy_passes(buf: Path, copy: Path) -> None:
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_a_new_field_under_a_new_number_passes(buf: Path, copy: Path) -> None:
    _edit_message(
        copy,
        "ManifestItem",
        "  string sha256 = 3;",
        "  string sha256 = 3;\n  // Added after the release.\n  string display_name = 5;",
    )
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_removed_field_fails_and_is_named(buf: Path, copy: Path) -> None:
    _edit_message(copy, "ManifestItem", "  string sha256 = 3;", "")
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode != 0
    assert 'field "3" with name "sha256" on message "ManifestItem" was deleted' in result.stdout


def test_a_removed_field_fails_even_with_its_number_and_name_reserved(
    buf: Path, copy: Path
) -> None:
    # Reserving keeps the wire safe, but the generated code loses the
    # attribute: within v1 a field is deprecated, never removed.
    _edit_message(
        copy, "ManifestItem", "  string sha256 = 3;", '  reserved 3;\n  reserved "sha256";'
    )
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode != 0
    assert '"sha256" on message "ManifestItem" was deleted' in result.stdout


def test_a_reused_field_number_fails(buf: Path, copy: Path) -> None:
    _edit_message(copy, "ManifestItem", "  string sha256 = 3;", "  int64 size_bytes = 3;")
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode != 0
    assert 'Field "3" on message "ManifestItem" changed name from "sha256" to "size_bytes"' in (
        result.stdout
    )
    assert 'on message "ManifestItem" changed type from "string" to "int64"' in result.stdout


def test_a_changed_type_fails(buf: Path, copy: Path) -> None:
    _edit_message(copy, "ManifestItem", "  int32 position = 1;", "  string position = 1;")
    result = _breaking(buf, copy, copy.parent / "baseline.json")
    assert result.returncode != 0
    assert (
        'Field "1" with name "position" on message "ManifestItem" '
        'changed type from "int32" to "string"'
    ) in result.stdout


def test_buf_lint_passes_on_the_real_protos(buf: Path) -> None:
    result = _run(buf, "lint", PROTOS, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_lint_refuses_a_field_not_in_lower_snake_case(buf: Path, copy: Path) -> None:
    _edit_message(
        copy,
        "ManifestItem",
        "  string sha256 = 3;",
        "  string sha256 = 3;\n  string displayName = 5;",
    )
    result = _run(buf, "lint", copy, cwd=copy.parent)
    assert result.returncode != 0
    assert "displayName" in result.stdout


def test_make_test_runs_the_check_first() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test_target = re.search(r"^test:(.*)$", makefile, re.MULTILINE)
    assert test_target and "protos-lint" in test_target.group(1).split()
    recipe = re.search(r"^protos-lint:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "no protos-lint target"
    assert "lint protos" in recipe.group(1)
    assert "breaking protos --against $(PROTOS_BASELINE)" in recipe.group(1)
    assert "PROTOS_BASELINE := protos/released/quire-v1.json" in makefile
