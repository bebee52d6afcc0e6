"""Kill it anywhere: every stage SIGKILLed at every step of its work.

One real stack; for each fault point, the first process to reach it kills
itself (SIGKILL, no cleanup), the supervisor restarts it, and the job must
still end COMPLETED exactly once: one COMPLETED ledger entry, one signed
artifact, nothing left over — and `quire check` passes after the whole run.

Steps: before the commit (the work is lost and redone), after the commit and
before the publish (the redelivery republishes the committed outcome), after
the publish and before the ack (the redelivery finds the outcome; the queue
drops the republish). Plus the signer after writing its artifact, audit after
recording an event, and admission after committing a job and after
publishing it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.faults import arm, fired
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

POINTS = [
    f"{service}.{step}"
    for service in ("validator", "assembler", "signer")
    for step in ("before_commit", "after_commit", "after_publish")
] + [
    "signer.after_artifact",
    "audit.after_record",
    "audit.before_commit",
    "audit.after_commit",
    "admission.after_commit",
    "admission.after_publish",
]


class FaultStack:
    def __init__(self, root: Path) -> None:
        self.faults = root / "faults"
        self.stack = Stack(
            root / "stack",
            env={
                "QUIRE_FAULTS_DIR": str(self.faults),
                "QUIRE_ACK_WAIT_SECONDS": "2",
                "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
                "QUIRE_DRAIN_SECONDS": "3",
            },
        )
        self.info: StackInfo | None = None
        self.jobs: list[str] = []


@pytest.fixture(scope="module")
def fault_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    running = FaultStack(tmp_path_factory.mktemp("faults"))
    running.info = running.stack.start()
    yield running
    running.stack.stop()


async def _submit_through_kills(client: AdmissionClient, digest: str) -> str:
    """Submit, asking again with the same request id while admission restarts."""
    request_id = uuid.uuid4().hex
    for _ in range(100):
        try:
            return (await client.submit([PacketItem("d", digest)], request_id=request_id)).name
        except grpc.aio.AioRpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("admission did not come back")


async def _ledger(info: StackInfo, job: str) -> list[tuple[str, str]]:
    async with aio_channel(info.endpoints["audit"], None) as channel:
        reply = await audit_service_pb2_grpc.AuditServiceStub(channel).ListJobEvents(
            audit_service_pb2.ListJobEventsRequest(job=job, page_size=100),
            metadata=bearer_metadata(info.operator_token()),
        )
    return [(state_name(e.event.from_state), state_name(e.event.to_state)) for e in reply.entries]


async def _wait_through_kills(client: AdmissionClient, name: str, timeout: float) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return state_name((await client.wait(name, timeout=timeout)).state)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("point", POINTS)
async def test_a_process_killed_at_this_step_loses_and_duplicates_nothing(
    fault_stack: FaultStack, point: str, tmp_path: Path
) -> None:
    stack, info = fault_stack.stack, fault_stack.info
    assert info is not None
    service = point.split(".")[0]
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", [point]))).sha256
        restarts = stack.restarts(service)
        arm(fault_stack.faults, point)
        name = await _submit_through_kills(client, digest)
        fault_stack.jobs.append(name)
        assert await _wait_through_kills(client, name, timeout=90) == "COMPLETED"
    # A point after a publish may fire just after the job was seen COMPLETED:
    # audit can commit the end before the publisher's next line runs.
    for _ in range(100):  # 10 s at most
        if fired(fault_stack.faults, point):
            break
        await asyncio.sleep(0.1)
    assert fired(fault_stack.faults, point), "the fault point was reached"
    for _ in range(100):  # the supervisor notices the death within its watch interval
        if stack.restarts(service) > restarts:
            break
        await asyncio.sleep(0.1)
    assert stack.restarts(service) == restarts + 1, "exactly one SIGKILL, one restart"
    moves = await _ledger(info, name)
    assert [to for _, to in moves].count("COMPLETED") == 1
    assert len(moves) == len(set(moves)), f"a transition recorded twice: {moves}"
    job = name.removeprefix("jobs/")
    assert len(list((stack.data_dir / "blobs" / "signed").rglob(f"{job}.pdf"))) == 1


async def test_after_every_kill_the_invariants_hold(fault_stack: FaultStack) -> None:
    invariants = pytest.importorskip("quire.invariants")
    assert len(fault_stack.jobs) == len(POINTS), "runs after the whole matrix"
    report = await asyncio.to_thread(invariants.check, fault_stack.stack.data_dir)
    assert report.ok, report.findings
