"""Storage that fails, on the real stack: a passing fault (EIO) is retried and
every job completes; storage refusing writes (EROFS) ends each job FAILED with
STORAGE_FAILED, without retries; an upload meanwhile gets a typed UNAVAILABLE,
and nothing half-written is left in the blob store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest

from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.invariants import check as check_invariants
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf

pytestmark = [pytest.mark.stack, pytest.mark.fault]


def _stack(tmp_path: Path, **env: str) -> Stack:
    (tmp_path / "faults").mkdir()
    return Stack(
        tmp_path / "stack",
        env={
            "QUIRE_FAULTS_DIR": str(tmp_path / "faults"),
            "QUIRE_DRAIN_SECONDS": "5",
            "QUIRE_ACK_WAIT_SECONDS": "10",
            **env,
        },
    )


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


def _blob_store_is_clean(stack: Stack, prefix: str) -> None:
    blobs = stack.data_dir / "blobs"
    assert list((blobs / ".tmp").iterdir()) == [], "no temporary file was left"
    assert not (blobs / prefix).exists() or not any((blobs / prefix).rglob("*")), (
        f"nothing half-stored under {prefix}/"
    )


def _invariants_hold(data_dir: Path) -> None:
    report = check_invariants(data_dir)
    assert report.ok, report.findings


async def test_a_passing_storage_fault_is_retried_and_every_job_completes(
    tmp_path: Path,
) -> None:
    stack = _stack(
        tmp_path,
        QUIRE_MAX_DELIVER="20",
        QUIRE_BACKOFF_BASE_SECONDS="0.3",
        QUIRE_BACKOFF_CAP_SECONDS="1",
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digests = await _upload_sources(client, tmp_path, 3)
            (tmp_path / "faults" / "storage.transient").touch()
            jobs = [await client.submit([PacketItem("doc", digest)]) for digest in digests]
            await _upload_is_refused(client, tmp_path, "STORAGE_UNAVAILABLE")
            await asyncio.sleep(3)
            held = [state_name((await client.get_job(job.name)).state) for job in jobs]
            assert "COMPLETED" not in held, "no job got past the failing storage"
            (tmp_path / "faults" / "storage.transient").unlink()
            for job in jobs:
                done = await client.wait(job.name, timeout=60)
                assert (state_name(done.state), done.reason_code) == ("COMPLETED", "")
    finally:
        await asyncio.to_thread(stack.stop)
    assert list((stack.data_dir / "blobs" / ".tmp").iterdir()) == []
    _invariants_hold(stack.data_dir)


async def test_storage_refusing_writes_fails_each_job_with_storage_failed(
    tmp_path: Path,
) -> None:
    stack = _stack(tmp_path, QUIRE_MAX_DELIVER="3")
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digests = await _upload_sources(client, tmp_path, 2)
            (tmp_path / "faults" / "storage.permanent").touch()
            jobs = [await client.submit([PacketItem("doc", digest)]) for digest in digests]
            await _upload_is_refused(client, tmp_path, "STORAGE_FAILED")
            for job in jobs:
                done = await client.wait(job.name, timeout=60)
                assert (state_name(done.state), done.reason_code) == ("FAILED", "STORAGE_FAILED")
    finally:
        await asyncio.to_thread(stack.stop)
    _blob_store_is_clean(stack, "assembled")
    _blob_store_is_clean(stack, "signed")
    _invariants_hold(stack.data_dir)
