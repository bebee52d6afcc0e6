"""Encryption at rest on the real stack, its KEK ring configured outside the
data directory as production would: no file of the blob store holds a
source's plaintext; crypto-shredding a tenant makes its downloads fail with
a typed error while the ledger still verifies; rotating the KEK under load
(new KEK rolled out in two waves, every data key rewrapped, old KEK removed,
every service restarted) loses nothing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pikepdf
import pytest

from quire.admission.v1 import batch_pb2
from quire.client import AdmissionClient, PacketItem, TenantAdminClient, inline_source
from quire.grpcstatus import reason_of
from quire.invariants import check
from quire.jobs import state_name
from quire.stack.supervisor import SERVICES, Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT
from quire.type import job_pb2

pytestmark = pytest.mark.stack

MARKER = "QUIRE-AT-REST-MARKER-5d1c9e"
T = TypeVar("T")


def _ring_line(kek_id: str) -> str:
    return f"{kek_id} {base64.b64encode(os.urandom(32)).decode()}\n"


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The KEK ring, as a mounted Secret: outside the data directory."""
    path = tmp_path_factory.mktemp("secret") / "kek-ring"
    path.write_text(_ring_line("k1"))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def sealed_stack(tmp_path_factory: pytest.TempPathFactory, ring: Path) -> Iterator[Stack]:
    """The stack whose services read ``ring``. A 3 s acknowledgement wait
    (production's is 30 s; a worker extends its lease while it works): a stage's
    work lost with a process killed mid-rotation comes back within seconds,
    not after half a minute of the test waiting for its jobs."""
    data_dir = tmp_path_factory.mktemp("sealed-stack")
    stack = Stack(
        data_dir,
        env={
            "QUIRE_KEK_FILE": str(ring),
            "QUIRE_DRAIN_SECONDS": "5",
            "QUIRE_ACK_WAIT_SECONDS": "3",
        },
    )
    stack.start()
    yield stack
    stack.stop()


def _quire(stack: Stack, ring: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*QUIRE, "--data-dir", str(stack.data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "QUIRE_KEK_FILE": str(ring)},
    )


async def _tenant(stack: Stack, name: str) -> AdmissionClient:
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        reply = await admin.create_tenant(f"{name}-{uuid.uuid4().hex[:6]}")
    client = AdmissionClient(info.endpoints["admission"], reply.secret)
    client.tenant = reply.tenant.name  # type: ignore[attr-defined]
    return client


async def _completed_job(client: AdmissionClient, pdf: Path, timeout: float = 90) -> str:
    digest = (await client.upload(pdf)).sha256
    job = await client.submit([PacketItem("d", digest)])
    done = await client.wait(job.name, timeout=timeout)
    assert state_name(done.state) == "COMPLETED", done.reason_code
    return job.name


def _check_findings(stack: Stack, ring: Path) -> list[str]:
    report = check(stack.data_dir, stopped=False, env={**os.environ, "QUIRE_KEK_FILE": str(ring)})
    return [f"{f.kind} {f.detail}" for f in report.findings]


async def test_no_blob_holds_plaintext_and_a_shredded_tenant_is_unreadable_while_the_ledger_verifies(
    sealed_stack: Stack, ring: Path, tmp_path: Path
) -> None:
    compressed = write_text_pdf(tmp_path / "compressed.pdf", [f"lease clause {MARKER}", MARKER])
    pdf = tmp_path / "marked.pdf"
    with pikepdf.open(compressed) as document:  # the marker readable in the file's bytes
        document.save(
            pdf, compress_streams=False, stream_decode_level=pikepdf.StreamDecodeLevel.generalized
        )
    assert MARKER.encode() in pdf.read_bytes(), "the marker is in the source's plaintext"
    leaving, staying = (
        await _tenant(sealed_stack, "leaving"),
        await _tenant(sealed_stack, "staying"),
    )
    try:
        gone_job = await _completed_job(leaving, pdf)
        kept_job = await _completed_job(staying, pdf)
        blob_root = sealed_stack.data_dir / "blobs"
        files = [p for p in blob_root.rglob("*") if p.is_file()]
        assert len(files) >= 6, "sources, packets and artifacts of two jobs are stored"
        holding = [p.relative_to(blob_root) for p in files if MARKER.encode() in p.read_bytes()]
        assert holding == [], f"plaintext at rest in {holding}"

        shred = _quire(sealed_stack, ring, "keys", "shred", leaving.tenant, "--yes")  # type: ignore[attr-defined]
        assert shred.returncode == 0, shred.stderr
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await leaving.download(gone_job, tmp_path / "gone.pdf")
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(refused.value) == "DATA_SHREDDED"
        with pytest.raises(grpc.aio.AioRpcError) as upload_refused:
            await leaving.upload(pdf)
        assert reason_of(upload_refused.value) == "DATA_SHREDDED"
        # No new work either, not even from a source stored before the shred.
        digest = hashlib.sha256(pdf.read_bytes()).hexdigest()
        manifest = job_pb2.Manifest(
            items=[job_pb2.ManifestItem(position=0, document_id="d", sha256=digest)]
        )
        # Nor from one carried inside the request (checked once, as it is kept):
        # nothing of it is stored.
        fresh = write_text_pdf(tmp_path / "fresh.pdf", ["sent after the shred"]).read_bytes()
        carried = inline_source(fresh)
        stored_before = {p for p in blob_root.rglob("*") if p.is_file()}
        for new_work in (
            leaving.submit([PacketItem("d", digest)]),
            leaving.submit_batch([batch_pb2.BatchPacket(bundle_id="b", manifest=manifest)]),
            leaving.submit([PacketItem("d", carried.header.sha256)], inline=[carried]),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as work_refused:
                await new_work
            assert work_refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert reason_of(work_refused.value) == "TENANT_SHREDDED"
        assert {p for p in blob_root.rglob("*") if p.is_file()} == stored_before
        assert await staying.download(kept_job, tmp_path / "kept.pdf")

        verified = _quire(sealed_stack, ring, "audit", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert _check_findings(sealed_stack, ring) == []
    finally:
        await leaving.close()
        await staying.close()


async def test_rotating_the_kek_under_load_loses_nothing(
    sealed_stack: Stack, ring: Path, tmp_path: Path
) -> None:
    clients = [await _tenant(sealed_stack, f"rotating{i}") for i in range(2)]
    pdf = write_text_pdf(tmp_path / "load.pdf", ["rotation under load"])
    jobs: list[tuple[AdmissionClient, str]] = []
    stop = asyncio.Event()

    async def retried(call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """As a client does while admission restarts, or sheds load when the
        pipeline falls behind (RESOURCE_EXHAUSTED, with a retry hint): the same
        request again, later."""
        for _ in range(200):
            try:
                return await call(*args, **kwargs)
            except grpc.aio.AioRpcError as error:
                if error.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                ):
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("admission never came back")

    async def load(client: AdmissionClient) -> None:
        while not stop.is_set():
            digest = (await retried(client.upload, pdf)).sha256
            request_id = uuid.uuid4().hex  # one per job: a retried submit is the same job
            job = await retried(client.submit, [PacketItem("d", digest)], request_id=request_id)
            jobs.append((client, job.name))
            accepted.set()
            # About a job a second per tenant: a steady flow, without a backlog
            # of hundreds to drain afterwards (each restart follows an
            # acceptance at once, so that job is in flight as it comes).
            await asyncio.sleep(1.0)

    accepted = asyncio.Event()

    async def just_accepted() -> None:
        """Until a job is accepted: a restart right after finds it in flight
        (a one-page job takes tens of milliseconds at the least)."""
        accepted.clear()
        await asyncio.wait_for(accepted.wait(), timeout=60)

    async def restarted(services: tuple[str, ...]) -> None:
        """SIGKILL ``services`` together; back once each was started again and all are healthy."""
        before = {service: sealed_stack.restarts(service) for service in services}
        for service in services:
            sealed_stack.kill(service)
        deadline = asyncio.get_running_loop().time() + 60
        while any(sealed_stack.restarts(s) == n for s, n in before.items()):
            assert asyncio.get_running_loop().time() < deadline, "not started again"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(sealed_stack.wait_healthy)

    async def more_jobs(each: int) -> None:
        """Until every tenant has had ``each`` more jobs accepted."""
        start = {id(c): sum(owner is c for owner, _ in jobs) for c in clients}
        deadline = asyncio.get_running_loop().time() + 120
        while any(sum(owner is c for owner, _ in jobs) < start[id(c)] + each for c in clients):
            assert not any(task.done() for task in loaders), "a loader stopped"
            assert asyncio.get_running_loop().time() < deadline, "no jobs accepted"
            await asyncio.sleep(0.1)

    loaders = [asyncio.create_task(load(c)) for c in clients]
    try:
        await more_jobs(2)  # every tenant's data key wrapped by the old KEK, jobs in flight
        new = await asyncio.to_thread(_quire, sealed_stack, ring, "keys", "new-kek", str(ring))
        assert new.returncode == 0, new.stderr
        # A rolling update in two waves: between them, jobs flow through a
        # pipeline whose restarted services hold the new ring (the new KEK
        # first, the old one still unwrapping) and the others the old KEK alone.
        await just_accepted()  # the restart finds that job in flight
        await restarted(SERVICES[0::2])
        await more_jobs(1)
        await just_accepted()
        await restarted(SERVICES[1::2])
        rewrap = await asyncio.to_thread(_quire, sealed_stack, ring, "keys", "rewrap")
        assert rewrap.returncode == 0, rewrap.stderr
        assert "rewrapped" in rewrap.stdout
        ring.write_text(ring.read_text().splitlines(keepends=True)[0])  # the old KEK is gone
        await just_accepted()
        await restarted(SERVICES)  # all at once: none keeps the old KEK in memory
        await more_jobs(2)  # accepted with the new KEK alone
    finally:
        stop.set()
        await asyncio.gather(*loaders)
    try:
        assert len(jobs) >= 10
        for client, name in jobs:
            done = await retried(client.wait, name, timeout=120)
            assert state_name(done.state) == "COMPLETED", (name, done.reason_code)
            assert await client.download(name, tmp_path / "out.pdf") == done.output_digest
        for client in clients:  # each accepted job exactly once, none lost, none doubled
            listed = (await client.list_jobs(page_size=1000)).jobs
            mine = sorted(name for owner, name in jobs if owner is client)
            assert sorted(job.name for job in listed) == mine
        status = _quire(sealed_stack, ring, "keys", "status", "--json")
        assert status.returncode == 0, status.stderr
        current = ring.read_text().split()[0]
        wrapped_by = {k["kek"] for t in json.loads(status.stdout)["status"] for k in t["keys"]}
        assert wrapped_by == {current}, "every data key is wrapped by the new KEK only"
        assert _check_findings(sealed_stack, ring) == []
    finally:
        for client in clients:
            await client.close()
