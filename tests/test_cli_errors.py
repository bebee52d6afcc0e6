"""What the stack says when it refuses reaches the person at the terminal:
every field violation (path and description), the reason code, and the
retry delay, on stderr; the same as data with ``--json``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import pytest

from quire.cli.errors import failure_of
from quire.cli.exitcodes import ExitCode
from quire.errors import FieldViolation, InvalidInput, Overloaded
from quire.grpcstatus import status_for
from quire.reasons import ReasonCode
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT, run_quire

pytestmark = pytest.mark.stack


def _manifest(folder: Path) -> Path:
    for name in ("a", "b", "c"):
        write_text_pdf(folder / f"{name}.pdf", [f"document {name}"])
    manifest = folder / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "documents": [
                    {"document_id": "cover", "file": "a.pdf", "position": 1},
                    {"document_id": "cover", "file": "b.pdf", "position": 1},
                    {"document_id": "terms", "file": "c.pdf", "position": 5},
                ],
                "ruleset": "nope@9",
                "render_profile": "glossy",
            }
        )
    )
    return manifest


def test_an_invalid_manifest_names_each_violation(stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = _manifest(tmp_path)
    shown = run_quire(stack.data_dir, "submit", "--manifest", str(manifest))
    assert shown.returncode == ExitCode.REFUSED, shown.stderr
    assert "INVALID_MANIFEST" in shown.stderr
    expected = [
        ("manifest.items[1].position", "DUPLICATE_POSITION"),
        ("manifest.items[2].position", "POSITIONS_NOT_CONTIGUOUS"),
        ("manifest.items[1].document_id", "DUPLICATE_DOCUMENT_ID"),
        ("manifest.ruleset", "UNKNOWN_RULESET"),
        ("manifest.render_profile", "UNKNOWN_PROFILE"),
    ]
    lines = shown.stderr.splitlines()
    for field, reason in expected:
        assert any(line.startswith(f"  {field}: ") and f"({reason})" in line for line in lines), (
            field,
            shown.stderr,
        )

    as_json = run_quire(stack.data_dir, "--json", "submit", "--manifest", str(manifest))
    error = json.loads(as_json.stdout)["error"]
    assert error["reason"] == "INVALID_MANIFEST"
    listed = {(v["field"], v["reason"]) for v in error["field_violations"]}
    assert set(expected) <= listed
    assert all(v["description"] for v in error["field_violations"])


class _Refused(grpc.aio.AioRpcError):
    """A received status carrying ``error``'s details, as a client sees it."""

    def __init__(self, error: Exception) -> None:
        status = status_for(error, "quire.test")
        code = next(c for c in grpc.StatusCode if c.value[0] == status.code)
        super().__init__(
            code,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())),
            details=status.message,
        )


def test_a_retry_delay_and_quota_are_shown() -> None:
    refusal = Overloaded(ReasonCode.QUEUE_BACKLOG, "the queue is full", retry_after=7.5)
    failure = failure_of(_Refused(refusal))
    assert failure is not None and failure.code == ExitCode.REFUSED
    assert "QUEUE_BACKLOG" in failure.lines()[0]
    assert "  retry after 7.5s" in failure.lines()
    assert failure.document()["error"]["retry_after_seconds"] == 7.5  # type: ignore[index]

    bad = InvalidInput(
        ReasonCode.INVALID_MANIFEST,
        "the manifest is invalid",
        (FieldViolation("manifest.items[0].sha256", "not a sha256 digest", "BAD_DIGEST"),),
    )
    lines = failure_of(_Refused(bad)).lines()  # type: ignore[union-attr]
    assert lines[1] == "  manifest.items[0].sha256: not a sha256 digest (BAD_DIGEST)"


def test_a_reader_that_goes_away_is_no_error(stack) -> None:  # type: ignore[no-untyped-def]
    """``quire --json jobs | head -c 1``: the pipe closes before the result is
    written; the command ends quietly, without a traceback."""
    process = subprocess.Popen(
        [*QUIRE, "--data-dir", str(stack.data_dir), "--json", "jobs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before anything is written
    errors = process.stderr.read()
    assert process.wait(timeout=60) == 0, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
