"""Temporary space on the real stack: admission sheds new work while the
pipeline's temporary space is nearly full (and work already accepted still
completes), a stage over its own temporary budget takes no new work, and every
service sweeps what dead processes left behind, at start and when restarted,
never touching a live process's entries.

The tests share one stack (a 20 MB pipeline limit, a 1 MB assembler budget):
each uses a tenant of its own and removes what it wrote, and the invariants
are checked once the stack has stopped."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from test_faults_common import resume_promptly

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.invariants import check as check_invariants
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack, StackInfo
from quire.tempspace import local_owner, owner_prefix, temp_prefix
from quire.testing.consumers import pause
from quire.testing.nemesis.probes import replica_metric
from quire.testing.pdfs import write_text_pdf
from quire.workqueue import WORK_STREAM, consumer_name

pytestmark = [pytest.mark.stack, pytest.mark.fault]

LIMIT_BYTES = 20_000_000
ASSEMBLER_BUDGET_BYTES = 1_000_000


def _invariants_hold(data_dir: Path) -> None:
    report = check_invariants(data_dir)
    assert report.ok, report.findings


def _retry_delay_seconds(error: grpc.aio.AioRpcError) -> float:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToMilliseconds() / 1000
    raise AssertionError("no RetryInfo in the status")


async def _refused_for_temp_space(
    client: AdmissionClient, digest: str, accepted: list[str]
) -> grpc.aio.AioRpcError:
    """Submit until refused: admission notices the filled space at its next reading.

    A submission that gets in before that reading is accepted work like any other.
    """
    await asyncio.sleep(0.6)  # three readings
    for _ in range(50):
        try:
            accepted.append((await client.submit([PacketItem("late", digest)])).name)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            assert reason_of(error) == "TEMP_SPACE_LOW"
            return error
        await asyncio.sleep(0.1)
    raise AssertionError("submissions were still accepted with the temporary space full")


async def _accepted_again(client: AdmissionClient, digest: str) -> str:
    for _ in range(50):
        try:
            return (await client.submit([PacketItem("again", digest)])).name
        except grpc.aio.AioRpcError as error:
            assert reason_of(error) == "TEMP_SPACE_LOW"
        await asyncio.sleep(0.1)
    raise AssertionError("submissions stayed refused after the space was freed")


class _ValidateQueue:
    """Pauses the validator's interactive consumer, so accepted jobs wait in flight."""

    def __init__(self, stack: Stack) -> None:
        self._stack = stack

    async def __aenter__(self) -> _ValidateQueue:
        self._nc = await connect_nats(
            self._stack.nats_url, "quire-test-temp", **self._stack.nats_login()
        )
        self._js = self._nc.jetstream(timeout=10)
        await pause(self._js, WORK_STREAM, self._consumer, minutes=5)
        return self

    async def resume(self) -> None:
        await resume_promptly(self._js, WORK_STREAM, self._consumer)

    async def __aexit__(self, *_exc: object) -> None:
        await self._js.resume_consumer(WORK_STREAM, self._consumer)
        await self._nc.close()

    @property
    def _consumer(self) -> str:
        return consumer_name("validate", "interactive")


def _dead_pid() -> int:
    process = subprocess.Popen(["sleep", "0"])
    process.wait()
    return process.pid


def _leftovers(tmp_dir: Path, pid: int) -> list[Path]:
    """A dead assembler's attempt directory and a dead signer's output file."""
    attempt = tmp_dir / (owner_prefix(local_owner("assembler", pid), "attempt") + "x")
    (attempt / "nested").mkdir(parents=True)
    (attempt / "nested" / "rendered-0.pdf").write_bytes(b"%PDF-")
    part = tmp_dir / (owner_prefix(local_owner("signer", pid), "part") + "y")
    part.write_bytes(b"%PDF-")
    return [attempt, part]


@dataclass
class Scene:
    stack: Stack
    info: StackInfo
    live: Path
    """A live process's (this one's) entry, there since before the start."""
    left_at_start: list[Path]
    """Dead processes' entries that were there before the start and still
    were right after it (read before any test ran): none, if swept at start."""


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    stack = Stack(
        tmp_path_factory.mktemp("temp") / "stack",
        env={
            "QUIRE_TEMP_SPACE_LIMIT_BYTES": str(LIMIT_BYTES),
            "QUIRE_ASSEMBLER_TEMP_BUDGET_BYTES": str(ASSEMBLER_BUDGET_BYTES),
            "QUIRE_TEMP_MEASURE_SECONDS": "0.2",
            "QUIRE_DRAIN_SECONDS": "5",
        },
    )
    tmp_dir = stack.data_dir / "blobs" / ".tmp"
    tmp_dir.mkdir(parents=True)
    before = _leftovers(tmp_dir, _dead_pid())
    live = tmp_dir / (temp_prefix("test", "keep") + "z")
    live.write_bytes(b"mine")
    info = stack.start()
    try:
        # The periodic sweep is a minute away: whatever is gone now went in the
        # sweep at start, before any service took work.
        yield Scene(stack, info, live, [path for path in before if path.exists()])
    finally:
        live.unlink(missing_ok=True)
        stack.stop()
    _invariants_hold(stack.data_dir)


@asynccontextmanager
async def _tenant(scene: Scene, name: str) -> AsyncIterator[AdmissionClient]:
    """A fresh tenant's client: its jobs are this test's alone."""
    address = scene.info.endpoints["admission"]
    async with TenantAdminClient(address, scene.info.operator_token()) as admin:
        reply = await admin.create_tenant(f"{name}-{uuid.uuid4().hex[:8]}")
    async with AdmissionClient(address, reply.secret) as client:
        yield client


async def test_admission_sheds_new_work_while_temp_space_is_full_and_accepted_work_completes(
    scene: Scene, tmp_path: Path
) -> None:
    stack = scene.stack
    fill = stack.data_dir / "blobs" / ".tmp" / (temp_prefix("test", "fill") + uuid.uuid4().hex)
    try:
        async with _tenant(scene, "shed") as client:
            paths = [
                write_text_pdf(tmp_path / f"t{i}.pdf", [f"temp {i} {uuid.uuid4().hex}"])
                for i in range(3)
            ]
            digests = [(await client.upload(path)).sha256 for path in paths]
            async with _ValidateQueue(stack) as queue:
                in_flight = [
                    (await client.submit([PacketItem("doc", d)])).name for d in digests[:2]
                ]
                fill.write_bytes(b"\0" * LIMIT_BYTES)

                refused = await _refused_for_temp_space(client, digests[2], in_flight)
                assert _retry_delay_seconds(refused) > 0
                with pytest.raises(grpc.aio.AioRpcError) as upload:
                    await client.upload(write_text_pdf(tmp_path / "u.pdf", ["late upload"]))
                assert upload.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert reason_of(upload.value) == "TEMP_SPACE_LOW"
                listed = {job.name for job in (await client.list_jobs()).jobs}
                assert listed == set(in_flight), "nothing refused was kept"

                await queue.resume()
                for name in in_flight:
                    done = await client.wait(name, timeout=60)
                    assert state_name(done.state) == "COMPLETED", "accepted work is not lost"

            fill.unlink()
            again = await _accepted_again(client, digests[2])
            assert state_name((await client.wait(again, timeout=60)).state) == "COMPLETED"
    finally:
        fill.unlink(missing_ok=True)


async def test_leftovers_of_dead_processes_are_swept_when_a_service_starts(scene: Scene) -> None:
    assert scene.left_at_start == [], "swept at start, before taking work"
    assert scene.live.exists(), "a live process's entry is kept"

    stack = scene.stack
    later = _leftovers(stack.data_dir / "blobs" / ".tmp", _dead_pid())
    restarts = stack.restarts("validator")
    stack.kill("validator")  # restarted by the supervisor; it sweeps as it starts
    for _ in range(150):
        if not any(path.exists() for path in later):
            break
        await asyncio.sleep(0.1)
    assert not any(path.exists() for path in later), "swept by the restarted service"
    assert stack.restarts("validator") == restarts + 1
    assert scene.live.exists()


def _assembler_temp_used(stack: Stack) -> float:
    """The temporary space the assembler's last reading counted against it
    (``quire_temp_space_used_bytes``): what its pull gate decides by."""
    address = StackInfo.read(stack.data_dir).metrics_endpoints["assembler"]
    return replica_metric(address, "quire_temp_space_used_bytes") or 0.0


def _assembler_log(stack: Stack) -> str:
    return (stack.data_dir / "logs" / "assembler.log").read_text(errors="replace")


async def test_a_stage_over_its_temp_budget_takes_no_new_work_until_space_is_freed(
    scene: Scene, tmp_path: Path
) -> None:
    stack = scene.stack
    # Counted against the assembler's budget; owned by this (live) process, so not swept.
    hog = (
        stack.data_dir
        / "blobs"
        / ".tmp"
        / (owner_prefix(local_owner("assembler"), "attempt") + uuid.uuid4().hex)
    )
    paused = "assembler temporary space over its budget; not taking new work"
    paused_before = _assembler_log(stack).count(paused)
    try:
        async with _tenant(scene, "budget") as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "b.pdf", ["budget"]))).sha256
            hog.write_bytes(b"\0" * (ASSEMBLER_BUDGET_BYTES + 1))
            for _ in range(300):  # until the assembler's reading has counted it
                if _assembler_temp_used(stack) > ASSEMBLER_BUDGET_BYTES:
                    break
                await asyncio.sleep(0.1)
            assert _assembler_temp_used(stack) > ASSEMBLER_BUDGET_BYTES
            name = (await client.submit([PacketItem("doc", digest)])).name
            for _ in range(300):  # validated: 30 s at most
                state = state_name((await client.get_job(name)).state)
                # REVIEWING stands between two entries the validator records.
                if state not in ("ACCEPTED", "VALIDATING", "REVIEWING"):
                    break
                await asyncio.sleep(0.1)
            assert state == "ASSEMBLING", "validated, then held at assembly"
            await asyncio.sleep(3.0)  # an unheld one-page assembly takes a fraction of this
            waiting = await client.get_job(name)
            assert state_name(waiting.state) == "ASSEMBLING", "held at assembly"
            assert _assembler_log(stack).count(paused) > paused_before, "held by its budget"
            hog.unlink()
            done = await client.wait(name, timeout=60)
            assert state_name(done.state) == "COMPLETED"
    finally:
        hog.unlink(missing_ok=True)
