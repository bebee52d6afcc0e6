"""The validator's inspection and its sandbox: hostile input is contained."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest

from quire.blobstore import sha256_file
from quire.sandbox import SandboxExhausted, SandboxPool
from quire.settings import SandboxSettings
from quire.testing.pdfs import write_text_pdf
from quire.validator.inspection import Finding, inspect_source

PDF = "application/pdf"


def _inspect(path: Path, declared: str = PDF) -> str:
    digest, _size = sha256_file(path)
    return inspect_source(str(path), digest, declared).reason


def test_a_findings_record_holds_every_field_as_asdict_would() -> None:
    """What the validation record keeps of each source (``Finding.as_record``)."""
    finding = Finding(
        PDF,
        3,
        "MALFORMED_PDF",
        detail="TWO_READINGS",
        warnings=("xref_rebuilt", "stream_length"),
        normalized_sha256="ab" * 32,
        normalized_size=1234,
        differing_pages=(1, 3),
    )
    record = finding.as_record()
    assert record == dataclasses.asdict(finding)
    assert list(record) == [f.name for f in dataclasses.fields(Finding)]


def test_an_ordinary_pdf_passes(tmp_path: Path) -> None:
    path = write_text_pdf(tmp_path / "ok.pdf", ["one", "two"])
    digest, _ = sha256_file(path)
    finding = inspect_source(str(path), digest, PDF)
    assert (finding.reason, finding.page_count, finding.detected_type) == ("", 2, PDF)


@pytest.mark.parametrize(
    "name",
    [
        "r2-user-password.pdf",
        "r4-aes-user-password.pdf",
        "r6-empty-password.pdf",
        "r3-empty-password.pdf",
    ],
)
def test_encrypted_pdfs_are_rejected(corpus: Path, name: str) -> None:
    assert _inspect(corpus / "pypdf" / "resources" / "encryption" / name) == "ENCRYPTED_PDF"


def test_a_truncated_pdf_is_malformed(tmp_path: Path) -> None:
    whole = write_text_pdf(tmp_path / "whole.pdf", ["page"] * 3).read_bytes()
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(whole[: len(whole) // 2])
    assert _inspect(truncated) == "MALFORMED_PDF"


def test_json_declared_as_pdf_is_a_type_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "lines.pdf"
    path.write_text(json.dumps({"lines": [{"amount": "1.00"}]}))
    assert _inspect(path) == "TYPE_MISMATCH"


def test_a_json_object_declared_as_json_passes_and_other_json_does_not(tmp_path: Path) -> None:
    good = tmp_path / "lines.json"
    good.write_text(json.dumps({"lines": [{"amount": "1.00"}]}))
    assert _inspect(good, "application/json") == ""
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([1, 2, 3]))
    assert _inspect(listed, "application/json") == "SCHEMA_INVALID"


def test_a_pdf_declared_as_json_is_a_type_mismatch(tmp_path: Path) -> None:
    path = write_text_pdf(tmp_path / "doc.pdf", ["not json"])
    assert _inspect(path, "application/json") == "TYPE_MISMATCH"


def test_bytes_that_changed_since_upload_are_a_digest_mismatch(tmp_path: Path) -> None:
    path = write_text_pdf(tmp_path / "ok.pdf", ["one"])
    assert inspect_source(str(path), "0" * 64, PDF).reason == "DIGEST_MISMATCH"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _allocate(megabytes: int) -> int:
    return len(bytearray(megabytes * 1024 * 1024))


def _spin() -> None:
    while True:
        pass


def _add(a: int, b: int) -> int:
    return a + b


def _slow_add(a: int, b: int) -> int:
    import time

    time.sleep(0.5)
    return a + b


@pytest.fixture
async def sandbox():  # type: ignore[no-untyped-def]
    pool = SandboxPool(
        SandboxSettings(workers=1, memory_bytes=512 * 1024 * 1024, cpu_seconds=2, wall_seconds=4.0)
    )
    yield pool
    pool.close()


async def test_a_task_that_kills_its_worker_costs_only_that_task(sandbox: SandboxPool) -> None:
    with pytest.raises(SandboxExhausted):
        await sandbox.run(_die)
    assert await sandbox.run(_add, 2, 3) == 5


async def test_a_task_over_the_memory_limit_is_stopped(sandbox: SandboxPool) -> None:
    with pytest.raises(SandboxExhausted):
        await sandbox.run(_allocate, 1024)
    assert await sandbox.run(_add, 1, 1) == 2


async def test_a_task_over_the_cpu_limit_is_stopped(sandbox: SandboxPool) -> None:
    started = asyncio.get_running_loop().time()
    with pytest.raises(SandboxExhausted):
        await sandbox.run(_spin)
    assert asyncio.get_running_loop().time() - started < 10
    assert await sandbox.run(_add, 2, 2) == 4


async def test_a_crash_never_costs_a_concurrent_innocent_task() -> None:
    pool = SandboxPool(SandboxSettings(workers=2, cpu_seconds=5, wall_seconds=10.0))
    try:
        innocent = asyncio.create_task(pool.run(_slow_add, 20, 22))
        await asyncio.sleep(0.05)
        with pytest.raises(SandboxExhausted):
            await pool.run(_die)
        assert await innocent == 42
    finally:
        pool.close()


async def test_an_abandoned_task_never_answers_the_next_caller(sandbox: SandboxPool) -> None:
    abandoned = asyncio.create_task(sandbox.run(_slow_add, 1, 1))
    await asyncio.sleep(0.1)
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    assert await sandbox.run(_add, 3, 4) == 7


async def test_a_task_abandoned_while_its_worker_restarts_never_answers_another(
    sandbox: SandboxPool,
) -> None:
    for round_ in range(3):
        with pytest.raises(SandboxExhausted):
            await sandbox.run(_die)  # the next call starts a fresh process
        abandoned = asyncio.create_task(sandbox.run(_slow_add, 100, round_))
        await asyncio.sleep(0.01 * round_)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        assert await sandbox.run(_add, round_, 1) == round_ + 1
