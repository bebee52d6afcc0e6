"""One commit's events travel in one message: a stage whose work ends before
its announcement is due sends the entry event, its steps and its hand-off
together, in order, as an ``EventBatch`` on ``quire.events.<service>.batch``;
work that runs longer announces the working state on its own first, and
the rest follow together. Every event keeps its own id (DESIGN.md
invariant 3); audit records each once, whichever message brought it."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def process(self, task: queue_pb2.JobTask, lease, attempt: int) -> StageResult:  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.seconds)
        handed = queue_pb2.JobTask()
        handed.CopyFrom(task)
        return StageResult.hand_on(handed, steps=(Step(State.VALIDATING, State.REVIEWING),))


async def _deliver(
    tmp_path: Path,
    jetstream: JetStreamContext,
    queue: QueueSettings,
    seconds: float,
    sources: tuple[job_pb2.SourceRef, ...] = (),
) -> list[tuple[str, list[str]]]:
    """Run one validate delivery; each message the events stream got, as
    (subject, the target states of its events)."""
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    runner = StageRunner(
        stage=stage("validate"),
        work=_Work(seconds),
        leases=LeaseStore(database, table),
        publisher=Publisher(jetstream),
        events=EventFactory("validator", "test", "0"),
        queue=queue,
    )
    task = queue_pb2.JobTask(job=JOB, tenant="t1", priority="interactive", sources=sources)
    await jetstream.publish(work_subject("validate", "interactive"), task.SerializeToString())
    validate = await jetstream.pull_subscribe_bind(
        durable=consumer_name("validate", "interactive"), stream=WORK_STREAM
    )
    (delivery,) = await validate.fetch(1, timeout=5)
    await runner.handle(delivery)
    database.close()
    events = await jetstream.pull_subscribe_bind(durable=EVENTS_CONSUMER, stream=EVENTS_STREAM)
    received = []
    STARTS.clear()
    for message in await events.fetch(10, timeout=2):
        await message.ack()
        if is_event_batch(message.subject):
            carried = list(queue_pb2.EventBatch.FromString(message.data).events)
            assert message.headers["Nats-Msg-Id"] == batch_message_id(carried)
        else:
            carried = [queue_pb2.TransitionEvent.FromString(message.data)]
        received.append((message.subject, [state_name(e.to_state) for e in carried]))
        STARTS.update({state_name(e.to_state): e.occur_time.ToNanoseconds() / 1e9 for e in carried})
    return received


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
