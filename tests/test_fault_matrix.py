"""Kill it anywhere: every stage SIGKILLed at every step of its work.

One real stack; for each fault point, the first process to reach it kills
itself (SIGKILL, no cleanup), the supervisor restarts it, and the job must
still end COMPLETED exactly once: one COMPLETED ledger entry, one signed
artifact, nothing left over — and `quire check` passes after the whole run.

The points run in rounds, one point per service in each round, and each point
has a job of its own. Before the round's points are armed, each stage's job
is brought to its stage and held there (the stage's queue paused, deepest
stage first); then the points are armed, every held queue is let go at once
and admission's job is submitted, so each service is SIGKILLed exactly once
per round (the first job to reach its point, whichever that is) while the
other services die and restart beside it, not one after another. Every job
of the round is held to the whole promise, and each point's test checks what
its round recorded for its point and its job.

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
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from nats.js import JetStreamContext
from test_faults_common import eventually, resume_promptly

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.faults import arm, fired
from quire.invariants import check as check_invariants
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.consumers import pause
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel
from quire.workqueue import WORK_STREAM, consumer_name

pytestmark = [pytest.mark.stack, pytest.mark.fault]

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


def _rounds(points: list[str]) -> list[list[str]]:
    """The i-th point of every service, for each i: no service twice in a round."""
    by_service: dict[str, list[str]] = {}
    for point in points:
        by_service.setdefault(point.split(".")[0], []).append(point)
    deepest = max(len(mine) for mine in by_service.values())
    return [[mine[i] for mine in by_service.values() if i < len(mine)] for i in range(deepest)]


ROUNDS = _rounds(POINTS)

HELD_AT = {"audit": "commit", "signer": "sign", "assembler": "assemble", "validator": "validate"}
"""The stage whose queue each service's job waits in before its round starts,
deepest first (a job is brought to a stage through the stages before it)."""


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
    """The job's ledger moves, asking again while audit restarts (its point may
    have fired just before this look)."""
    for _ in range(150):  # 30 s at most
        try:
            async with aio_channel(info.endpoints["audit"], None) as channel:
                reply = await audit_service_pb2_grpc.AuditServiceStub(channel).ListJobEvents(
                    audit_service_pb2.ListJobEventsRequest(job=job, page_size=100),
                    metadata=bearer_metadata(info.operator_token()),
                )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.2)
            continue
        return [
            (state_name(e.event.from_state), state_name(e.event.to_state)) for e in reply.entries
        ]
    raise AssertionError("audit did not come back")


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


@dataclass(frozen=True)
class Outcome:
    """What one point's round recorded for the point, its service and its job."""

    job: str
    state: str
    fired: bool
    restarts_before: int
    restarts_after: int
    moves: list[tuple[str, str]]
    artifacts: int


async def _held(js: JetStreamContext, client: AdmissionClient, stage: str, digest: str) -> str:
    """Pause ``stage``'s queue and submit a job: it travels the stages before
    and waits there (the round's points are not armed yet)."""
    consumer = consumer_name(stage, "interactive")
    pending = (await js.consumer_info(WORK_STREAM, consumer)).num_pending
    await pause(js, WORK_STREAM, consumer, minutes=5)
    name = await _submit_through_kills(client, digest)

    async def waiting() -> bool:
        return (await js.consumer_info(WORK_STREAM, consumer)).num_pending > pending

    await eventually(waiting, 60, f"{name} waits in the {stage} queue")
    return name


async def _run_round(
    fault_stack: FaultStack,
    js: JetStreamContext,
    client: AdmissionClient,
    points: list[str],
    folder: Path,
) -> dict[str, Outcome]:
    stack, info = fault_stack.stack, fault_stack.info
    assert info is not None
    folder.mkdir(parents=True, exist_ok=True)
    digests = {
        point: (await client.upload(write_text_pdf(folder / f"{point}.pdf", [point]))).sha256
        for point in points
    }
    services = {point: point.split(".")[0] for point in points}
    assert len(set(services.values())) == len(points), "one point per service in a round"
    point_of = {service: point for point, service in services.items()}
    jobs: dict[str, str] = {}
    held: list[str] = []
    for service, stage in HELD_AT.items():
        if service in point_of:
            jobs[point_of[service]] = await _held(js, client, stage, digests[point_of[service]])
            held.append(stage)
    before = {point: stack.restarts(services[point]) for point in points}
    for point in points:
        arm(fault_stack.faults, point)
    for stage in held:
        await resume_promptly(js, WORK_STREAM, consumer_name(stage, "interactive"))
    if "admission" in point_of:
        jobs[point_of["admission"]] = await _submit_through_kills(
            client, digests[point_of["admission"]]
        )
    fault_stack.jobs.extend(jobs.values())
    states = await asyncio.gather(
        *(_wait_through_kills(client, jobs[point], timeout=180) for point in points)
    )
    # A point after a publish may fire just after the job was seen COMPLETED:
    # audit can commit the end before the publisher's next line runs.
    for _ in range(100):  # 10 s at most
        if all(fired(fault_stack.faults, point) for point in points):
            break
        await asyncio.sleep(0.1)
    for _ in range(100):  # the supervisor notices a death within its watch interval
        if all(stack.restarts(services[point]) > before[point] for point in points):
            break
        await asyncio.sleep(0.1)
    outcomes = {}
    for point, state in zip(points, states, strict=True):
        job = jobs[point].removeprefix("jobs/")
        outcomes[point] = Outcome(
            job=jobs[point],
            state=state,
            fired=fired(fault_stack.faults, point),
            restarts_before=before[point],
            restarts_after=stack.restarts(services[point]),
            moves=await _ledger(info, jobs[point]),
            artifacts=len(list((stack.data_dir / "blobs" / "signed").rglob(f"{job}.pdf"))),
        )
    return outcomes


async def _run_matrix(fault_stack: FaultStack, folder: Path) -> dict[str, Outcome]:
    info = fault_stack.info
    assert info is not None
    outcomes: dict[str, Outcome] = {}
    stack = fault_stack.stack
    nc = await connect_nats(stack.nats_url, "quire-test-matrix", **stack.nats_login())
    try:
        js = nc.jetstream(timeout=10)
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            for index, points in enumerate(ROUNDS):
                outcomes.update(
                    await _run_round(fault_stack, js, client, points, folder / str(index))
                )
    finally:
        await nc.close()
    return outcomes


@pytest.fixture(scope="module")
def matrix(fault_stack: FaultStack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every round run, in order, on the module's stack: point -> what was recorded."""
    return asyncio.run(_run_matrix(fault_stack, tmp_path_factory.mktemp("matrix")))


@pytest.mark.parametrize("point", POINTS)
def test_a_process_killed_at_this_step_loses_and_duplicates_nothing(
    matrix: dict[str, Outcome], point: str
) -> None:
    outcome = matrix[point]
    assert outcome.state == "COMPLETED"
    assert outcome.fired, "the fault point was reached"
    assert outcome.restarts_after == outcome.restarts_before + 1, "exactly one SIGKILL, one restart"
    moves = outcome.moves
    assert [to for _, to in moves].count("COMPLETED") == 1
    assert len(moves) == len(set(moves)), f"a transition recorded twice: {moves}"
    assert outcome.artifacts == 1


async def test_after_every_kill_the_invariants_hold(
    fault_stack: FaultStack, matrix: dict[str, Outcome]
) -> None:
    assert len(fault_stack.jobs) == len(POINTS) == len(matrix), "runs after the whole matrix"
    report = await asyncio.to_thread(check_invariants, fault_stack.stack.data_dir)
    assert report.ok, report.findings
