"""One commit's events travel in one message: a stage whose work ends before
its announcement is due sends the entry event, its steps and its hand-off
together, in order, as an ``EventBatch`` on ``quire.events.<service>.batch``;
work that runs longer announces the working state on its own first, and
the rest follow together. The signer's hand-off goes to audit itself, so
its events ride on that task instead (``events_with_commit``). Every event
keeps its own id (DESIGN.md invariant 3); audit records each once, whichever
message brought it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from sqlalchemy import MetaData

from quire.database import Database
from quire.jobs import state_name
from quire.leases import LeaseStore, lease_table
from quire.pipeline import State, stage
from quire.settings import QueueSettings
from quire.stage import StageResult, StageRunner, Step
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.wire import allowed_producers
from quire.workqueue import (
    EVENTS_STREAM,
    WORK_STREAM,
    Publisher,
    consumer_name,
    is_event_batch,
    work_subject,
)
from quire.workqueue.topology import EVENTS_CONSUMER, batch_message_id

JOB = "jobs/0123456789abcdef0123456789ab"
STARTS: dict[str, float] = {}
"""When each event of the last delivery says it occurred."""


class _Work:
    def __init__(self, seconds: float, steps: tuple[Step, ...]) -> None:
        self.seconds = seconds
        self.steps = steps

    async def process(self, task: queue_pb2.JobTask, lease, attempt: int) -> StageResult:  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.seconds)
        handed = queue_pb2.JobTask()
        handed.CopyFrom(task)
        return StageResult.hand_on(handed, steps=self.steps)


NEXT_TASKS: list[queue_pb2.JobTask] = []
"""The tasks the last delivery handed on."""


async def _deliver(
    tmp_path: Path,
    jetstream: JetStreamContext,
    queue: QueueSettings,
    seconds: float,
    sources: tuple[job_pb2.SourceRef, ...] = (),
    *,
    stage_name: str = "validate",
    incoming_events: tuple[queue_pb2.TransitionEvent, ...] = (),
) -> list[tuple[str, list[str]]]:
    """Run one delivery of ``stage_name`` (validate unless named); each
    message the events stream got, as (subject, the target states of its
    events). The tasks it handed on are left in ``NEXT_TASKS``."""
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    worked = stage(stage_name)
    steps = (Step(State.VALIDATING, State.REVIEWING),) if stage_name == "validate" else ()
    runner = StageRunner(
        stage=worked,
        work=_Work(seconds, steps),
        leases=LeaseStore(database, table),
        publisher=Publisher(jetstream),
        events=EventFactory(worked.service, "test", "0"),
        queue=queue,
    )
    task = queue_pb2.JobTask(
        job=JOB, tenant="t1", priority="interactive", sources=sources, events=incoming_events
    )
    await jetstream.publish(work_subject(stage_name, "interactive"), task.SerializeToString())
    pulled = await jetstream.pull_subscribe_bind(
        durable=consumer_name(stage_name, "interactive"), stream=WORK_STREAM
    )
    (delivery,) = await pulled.fetch(1, timeout=5)
    await runner.handle(delivery)
    database.close()
    NEXT_TASKS.clear()
    assert worked.next is not None
    handed = await jetstream.pull_subscribe_bind(
        durable=consumer_name(worked.next, "interactive"), stream=WORK_STREAM
    )
    for message in await _fetched(handed):
        await message.ack()
        NEXT_TASKS.append(queue_pb2.JobTask.FromString(message.data))
    events = await jetstream.pull_subscribe_bind(durable=EVENTS_CONSUMER, stream=EVENTS_STREAM)
    received = []
    STARTS.clear()
    for message in await _fetched(events):
        await message.ack()
        if is_event_batch(message.subject):
            carried = list(queue_pb2.EventBatch.FromString(message.data).events)
            assert message.headers["Nats-Msg-Id"] == batch_message_id(carried)
        else:
            carried = [queue_pb2.TransitionEvent.FromString(message.data)]
        received.append((message.subject, [state_name(e.to_state) for e in carried]))
        STARTS.update({state_name(e.to_state): e.occur_time.ToNanoseconds() / 1e9 for e in carried})
    return received


async def _fetched(subscription) -> list[Msg]:  # type: ignore[no-untyped-def]
    """What the consumer holds (up to ten); none once a short wait finds nothing."""
    try:
        return list(await subscription.fetch(10, timeout=1))
    except (NatsTimeoutError, TimeoutError):
        return []


async def test_work_that_ends_before_its_announcement_sends_one_message(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    queue = fast_queue.model_copy(update={"announce_after_seconds": 5.0})
    received = await _deliver(tmp_path, jetstream, queue, seconds=0.3)
    assert received == [
        ("quire.events.validator.batch", ["VALIDATING", "REVIEWING", "ASSEMBLING"])
    ], "the entry event, the step and the hand-off, in order, in one message"
    assert STARTS["REVIEWING"] - STARTS["VALIDATING"] >= 0.25, "the entry says when work began"


async def test_longer_work_announces_its_state_while_it_runs(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    queue = fast_queue.model_copy(update={"announce_after_seconds": 0.1})
    received = await _deliver(tmp_path, jetstream, queue, seconds=0.5)
    assert received == [
        ("quire.events.validator", ["VALIDATING"]),
        ("quire.events.validator.batch", ["REVIEWING", "ASSEMBLING"]),
    ], "announced once due, and not sent again with the outcome"


async def test_work_that_fetches_from_a_source_system_announces_at_once(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    queue = fast_queue.model_copy(update={"announce_after_seconds": 5.0})
    by_reference = job_pb2.SourceRef(
        position=0, fetch=job_pb2.SourceFetch(system="tax", key="records/1")
    )
    received = await _deliver(tmp_path, jetstream, queue, seconds=0.0, sources=(by_reference,))
    assert received[0] == ("quire.events.validator", ["VALIDATING"]), (
        "a job that may wait on an outside system shows its state before it waits"
    )


def test_only_the_service_itself_may_send_its_batches() -> None:
    assert allowed_producers("quire.events.validator.batch") == frozenset({"validator"})
    assert allowed_producers("quire.events.validator.other") == frozenset()
    assert allowed_producers("quire.events.validator.batch.more") == frozenset()


async def test_the_signers_events_ride_on_its_task_to_audit(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    queue = fast_queue.model_copy(update={"announce_after_seconds": 5.0})
    received = await _deliver(tmp_path, jetstream, queue, seconds=0.0, stage_name="sign")
    assert received == [], "nothing on the events stream: the events go with the task"
    (commit,) = NEXT_TASKS
    # The job waits and is worked in SIGNING: no entry event, only the hand-off.
    assert [state_name(e.to_state) for e in commit.events] == ["COMMITTING"]
    assert [e.job for e in commit.events] == [JOB]


async def test_a_task_to_another_stage_carries_no_events(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    """The validator's hand-off goes to the assembler, not audit: its events
    go on the events stream, and events a task arrived with are not passed on."""
    stale = EventFactory("admission", "test", "0").transition(
        queue_pb2.JobTask(job=JOB, tenant="t1"), "", "ACCEPTED", attempt=1, lease_token=0
    )
    queue = fast_queue.model_copy(update={"announce_after_seconds": 5.0})
    received = await _deliver(tmp_path, jetstream, queue, seconds=0.0, incoming_events=(stale,))
    assert received == [("quire.events.validator.batch", ["VALIDATING", "REVIEWING", "ASSEMBLING"])]
    (assemble,) = NEXT_TASKS
    assert list(assemble.events) == []


async def test_with_events_with_commit_off_the_signer_sends_them_on_the_events_stream(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    stale = EventFactory("signer", "test", "0").transition(
        queue_pb2.JobTask(job=JOB, tenant="t1"), "SIGNING", "SIGNING", attempt=1, lease_token=0
    )
    queue = fast_queue.model_copy(
        update={"announce_after_seconds": 5.0, "events_with_commit": False}
    )
    received = await _deliver(
        tmp_path, jetstream, queue, seconds=0.0, stage_name="sign", incoming_events=(stale,)
    )
    assert received == [("quire.events.signer", ["COMMITTING"])]
    (commit,) = NEXT_TASKS
    assert list(commit.events) == [], "an older release's audit would not read them"
