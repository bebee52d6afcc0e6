"""Storage that fails, on the real stack: a passing fault (EIO) is retried and
every job completes; storage refusing writes (EROFS) ends each job FAILED with
STORAGE_FAILED, without retries; an upload meanwhile gets a typed UNAVAILABLE,
and nothing half-written is left in the blob store.

The tests share one stack (a fault directory, up to 20 deliveries with a
short backoff, which a permanent fault does not use): each test puts its fault
in place and takes it away, and the invariants and the empty temporary
directory are checked once the stack has stopped."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from test_faults_common import eventually

from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.invariants import check as check_invariants
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf

pytestmark = [pytest.mark.stack, pytest.mark.fault]


@dataclass(frozen=True)
class FaultyStorage:
    stack: Stack
    info: StackInfo
    faults: Path
    """Where a test puts ``storage.transient`` or ``storage.permanent``."""


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultyStorage]:
    root = tmp_path_factory.mktemp("storage")
    faults = root / "faults"
    faults.mkdir()
    stack = Stack(
        root / "stack",
        env={
            "QUIRE_FAULTS_DIR": str(faults),
            "QUIRE_DRAIN_SECONDS": "5",
            "QUIRE_ACK_WAIT_SECONDS": "10",
            "QUIRE_MAX_DELIVER": "20",
            "QUIRE_BACKOFF_BASE_SECONDS": "0.3",
            "QUIRE_BACKOFF_CAP_SECONDS": "1",
        },
    )
    info = stack.start()
    try:
        yield FaultyStorage(stack, info, faults)
    finally:
        for fault in faults.iterdir():
            fault.unlink()
        stack.stop()
    assert list((stack.data_dir / "blobs" / ".tmp").iterdir()) == [], "no temporary file left"
    _invariants_hold(stack.data_dir)


async def _upload_sources(client: AdmissionClient, tmp_path: Path, count: int) -> list[str]:
    paths = [
        write_text_pdf(tmp_path / f"s{i}.pdf", [f"storage {i} {uuid.uuid4().hex}"])
        for i in range(count)
    ]
    return [(await client.upload(path)).sha256 for path in paths]


async def _upload_is_refused(client: AdmissionClient, tmp_path: Path, reason: str) -> None:
    path = write_text_pdf(tmp_path / "refused.pdf", [f"refused {uuid.uuid4().hex}"])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.upload(path)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
    assert reason_of(refused.value) == reason


def _stored(stack: Stack, prefix: str) -> set[Path]:
    """Every file under ``prefix/`` in the blob store."""
    folder = stack.data_dir / "blobs" / prefix
    return {path for path in folder.rglob("*") if path.is_file()} if folder.exists() else set()


def _deliveries(stack: Stack, job: str) -> int:
    """How often ``job`` was delivered to the stage it is at: the highest lease
    token any stage holds for it."""
    tokens = [0]
    for service in ("validator", "assembler", "signer"):
        path = stack.data_dir / service / f"{service}.db"
        if not path.exists():
            continue
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            row = db.execute("SELECT token FROM stage_leases WHERE job = ?", (job,)).fetchone()
        tokens.append(0 if row is None else int(row[0]))
    return max(tokens)


def _invariants_hold(data_dir: Path) -> None:
    report = check_invariants(data_dir)
    assert report.ok, report.findings


async def test_a_passing_storage_fault_is_retried_and_every_job_completes(
    storage: FaultyStorage, tmp_path: Path
) -> None:
    stack, fault = storage.stack, storage.faults / "storage.transient"
    try:
        async with AdmissionClient(
            storage.info.endpoints["admission"], storage.info.token()
        ) as client:
            digests = await _upload_sources(client, tmp_path, 3)
            fault.touch()
            jobs = [await client.submit([PacketItem("doc", digest)]) for digest in digests]
            await _upload_is_refused(client, tmp_path, "STORAGE_UNAVAILABLE")

            async def each_retried() -> bool:
                """Every job met the failing storage and was delivered again."""
                return all(_deliveries(stack, job.name) >= 2 for job in jobs)

            await eventually(each_retried, 60, "every job retried")
            held = [state_name((await client.get_job(job.name)).state) for job in jobs]
            assert "COMPLETED" not in held, "no job got past the failing storage"
            fault.unlink()
            for job in jobs:
                done = await client.wait(job.name, timeout=60)
                assert (state_name(done.state), done.reason_code) == ("COMPLETED", "")
    finally:
        fault.unlink(missing_ok=True)


async def test_storage_refusing_writes_fails_each_job_with_storage_failed(
    storage: FaultyStorage, tmp_path: Path
) -> None:
    stack, fault = storage.stack, storage.faults / "storage.permanent"
    stored_before = {prefix: _stored(stack, prefix) for prefix in ("assembled", "signed")}
    try:
        async with AdmissionClient(
            storage.info.endpoints["admission"], storage.info.token()
        ) as client:
            digests = await _upload_sources(client, tmp_path, 2)
            fault.touch()
            jobs = [await client.submit([PacketItem("doc", digest)]) for digest in digests]
            await _upload_is_refused(client, tmp_path, "STORAGE_FAILED")
            for job in jobs:
                done = await client.wait(job.name, timeout=60)
                assert (state_name(done.state), done.reason_code) == ("FAILED", "STORAGE_FAILED")
    finally:
        fault.unlink(missing_ok=True)
    for prefix, before in stored_before.items():
        assert _stored(stack, prefix) == before, f"nothing half-stored under {prefix}/"
