"""Fencing: a delivery whose lease token was superseded commits and publishes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from sqlalchemy import MetaData

from quire.database import Database
from quire.leases import LeaseStore, lease_table
from quire.pipeline import State, stage
from quire.settings import QueueSettings
from quire.stage import Decided, StageResult, StageRunner, Step
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.workqueue import WORK_STREAM, Publisher, consumer_name, work_subject

JOB = "jobs/0123456789abcdef"


def _lease_store(tmp_path: Path) -> LeaseStore:
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    return LeaseStore(database, table)


async def test_lease_token_increments_and_old_token_cannot_commit(tmp_path: Path) -> None:
    leases = _lease_store(tmp_path)
    first = await leases.acquire(JOB)
    second = await leases.acquire(JOB)
    assert (first.token, second.token) == (1, 2)
    assert not await leases.complete(first, queue_pb2.StageOutcome())
    assert await leases.complete(second, queue_pb2.StageOutcome())
    third = await leases.acquire(JOB)
    assert third.committed is not None, "a redelivery after the commit sees the committed outcome"


class _BlockingWork:
    """Marks its output with the call number; the first call waits for the test."""

    def __init__(self) -> None:
        self.release_first = asyncio.Event()
        self.calls = 0

    async def process(self, task: queue_pb2.JobTask, lease, attempt: int) -> StageResult:  # type: ignore[no-untyped-def]
        self.calls += 1
        call = self.calls
        if call == 1:
            await self.release_first.wait()
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        next_task.assembled.CopyFrom(job_pb2.Artifact(sha256=f"call-{call}"))
        return StageResult.hand_on(next_task, steps=(Step(State.VALIDATING, State.REVIEWING),))


@pytest.mark.parametrize("kind", ["process", "early"])
async def test_a_stale_delivery_commits_and_publishes_nothing(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings, kind: str
) -> None:
    """Whether the work ran under its lease (``process``) or judged beside it
    (``StartsEarly``), the delivery whose lease was superseded commits and
    publishes nothing."""
    work = _BlockingWork() if kind == "process" else _EarlyWork()
    leases = _lease_store(tmp_path)
    runner = _runner(work, leases, jetstream, fast_queue)
    await _superseded(runner, leases, work.release_first, jetstream)
    assert await _handed_on(jetstream) == ["call-2"], "the stale delivery must publish nothing"
    assert work.calls == 2
    assert await leases.current_token(JOB) == 2


def _counted_store(tmp_path: Path) -> tuple[LeaseStore, list[str]]:
    """A lease store whose database reports each write transaction."""
    metadata = MetaData()
    table = lease_table(metadata)
    writes: list[str] = []
    database = Database(
        f"sqlite:///{tmp_path / 'grouped.db'}",
        metadata,
        transactions=lambda kind: lambda: writes.append(kind),
    )
    database.create_schema()
    return LeaseStore(database, table), writes


async def test_leases_taken_together_share_a_transaction(tmp_path: Path) -> None:
    leases, transactions = _counted_store(tmp_path)
    jobs = [f"jobs/{n:030d}" for n in range(12)]
    taken = await asyncio.gather(*(leases.acquire(job) for job in jobs))
    assert [lease.token for lease in taken] == [1] * 12
    done = await asyncio.gather(
        *(leases.complete(lease, queue_pb2.StageOutcome()) for lease in taken)
    )
    assert done == [True] * 12
    writes = transactions.count("write")
    assert writes < 24, f"{writes} write transactions for 12 leases and 12 commits"


async def test_a_failing_job_in_a_group_is_rolled_back_alone(tmp_path: Path) -> None:
    leases, _ = _counted_store(tmp_path)
    jobs = [f"jobs/{n:030d}" for n in range(6)]
    taken = await asyncio.gather(*(leases.acquire(job) for job in jobs))
    stale = taken[4]
    await leases.acquire(stale.job)  # a newer delivery of that job: token 2

    def broken(_connection: object) -> None:
        raise RuntimeError("the stage's own rows could not be written")

    results = await asyncio.gather(
        *(
            leases.complete(
                lease,
                queue_pb2.StageOutcome(next_subject=f"done {n}"),
                broken if n == 2 else None,
            )
            for n, lease in enumerate(taken)
        ),
        return_exceptions=True,
    )
    assert isinstance(results[2], RuntimeError), "the failing job gets its own error"
    assert results[4] is False, "the stale lease commits nothing"
    assert [results[n] for n in (0, 1, 3, 5)] == [True] * 4, "the others commit"
    for n, lease in enumerate(taken):
        again = await leases.acquire(lease.job)
        if n in (2, 4):
            assert again.committed is None, "nothing of the failed or stale job was kept"
        else:
            assert again.committed is not None
            assert again.committed.next_subject == f"done {n}"


class _EarlyWork:
    """Judges before its lease (``StartsEarly``), marking its verdict with the
    call number; the first call waits for the test. ``process`` is never used."""

    def __init__(self, *, hold_first: bool = True) -> None:
        self.started = asyncio.Event()
        self.release_first = asyncio.Event()
        if not hold_first:
            self.release_first.set()
        self.calls = 0
        self.finished = 0
        self.slow_second = False
        """The second judgement takes a while (0.3 s)."""
        self.tokens: list[int] = []

    async def process(self, task: queue_pb2.JobTask, lease, attempt: int) -> StageResult:  # type: ignore[no-untyped-def]
        raise AssertionError("a delivery judged early is not processed again")

    def early(self, task: queue_pb2.JobTask, attempt: int):  # type: ignore[no-untyped-def]
        self.calls += 1
        return self._judged(task, self.calls)

    async def _judged(self, task: queue_pb2.JobTask, call: int) -> Decided:
        self.started.set()
        if call == 1:
            await self.release_first.wait()
        if call == 2 and self.slow_second:
            await asyncio.sleep(0.3)
        self.finished += 1
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        next_task.assembled.CopyFrom(job_pb2.Artifact(sha256=f"call-{call}"))

        def decided(lease) -> StageResult:  # type: ignore[no-untyped-def]
            self.tokens.append(lease.token)
            return StageResult.hand_on(next_task, steps=(Step(State.VALIDATING, State.REVIEWING),))

        return decided


def _runner(
    work: object, leases: LeaseStore, jetstream: JetStreamContext, queue: QueueSettings
) -> StageRunner:
    return StageRunner(
        stage=stage("validate"),
        work=work,  # type: ignore[arg-type]
        leases=leases,
        publisher=Publisher(jetstream),
        events=EventFactory("validator", "test", "0"),
        queue=queue,
    )


async def _handed_on(jetstream: JetStreamContext) -> list[str]:
    assemble = await jetstream.pull_subscribe_bind(
        durable=consumer_name("assemble", "interactive"), stream=WORK_STREAM
    )
    try:
        messages = await assemble.fetch(5, timeout=1)
    except TimeoutError:
        return []
    return [queue_pb2.JobTask.FromString(m.data).assembled.sha256 for m in messages]


async def test_an_early_verdict_runs_beside_the_lease_and_is_recorded_under_it(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    work = _EarlyWork()
    leases = _lease_store(tmp_path)
    runner = _runner(work, leases, jetstream, fast_queue)
    delivery, _validate = await _task_delivered(jetstream)
    handled = asyncio.create_task(runner.handle(delivery))
    await asyncio.wait_for(work.started.wait(), 5)
    # The lease is taken while the judgement is still under way.
    for _ in range(100):
        if await leases.current_token(JOB) == 1:
            break
        await asyncio.sleep(0.02)
    assert await leases.current_token(JOB) == 1
    assert not handled.done()
    work.release_first.set()
    await handled
    assert work.tokens == [1], "the verdict is recorded under the lease taken beside it"
    assert await _handed_on(jetstream) == ["call-1"]
    again = await leases.acquire(JOB)
    assert again.committed is not None


async def test_an_early_verdict_is_dropped_when_an_earlier_delivery_committed(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    work = _EarlyWork(hold_first=False)
    work.slow_second = True
    leases = _lease_store(tmp_path)
    runner = _runner(work, leases, jetstream, fast_queue)
    validate = None
    for _ in range(2):  # the task twice (a producer's retry): two deliveries
        delivery, validate = await _task_delivered(jetstream, validate)
        await runner.handle(delivery)
    assert work.calls == 2, "the second delivery was judged early too"
    # Unused, its judgement still ran to its end inside the delivery (within
    # the stage's limit), neither cancelled nor left running behind it.
    assert work.finished == 2
    assert work.tokens == [1], "but only the first verdict was recorded"
    assert await _handed_on(jetstream) == ["call-1"], "the committed outcome, handed on once"


async def _superseded(
    runner: StageRunner, leases: LeaseStore, release: asyncio.Event, jetstream: JetStreamContext
) -> None:
    """The job's task delivered and held by its work, under the lease it
    took, until JetStream, with no heartbeat, hands it to a second delivery,
    which runs to its end; then the first delivery's work is released and it
    ends too."""
    stale_delivery, validate = await _task_delivered(jetstream)
    stale = asyncio.create_task(runner.handle(stale_delivery))
    for _ in range(500):  # the first delivery holds the first lease
        if await leases.current_token(JOB) == 1:
            break
        await asyncio.sleep(0.02)
    assert await leases.current_token(JOB) == 1
    # No heartbeat: the ack wait lapses and JetStream hands the job to a new worker.
    (fresh_delivery,) = await validate.fetch(1, timeout=5)
    assert fresh_delivery.metadata.num_delivered == 2
    await runner.handle(fresh_delivery)
    release.set()
    await stale


async def _task_delivered(jetstream: JetStreamContext, validate: Any = None) -> tuple[Msg, Any]:
    """The job's validate task published, and its delivery (and the pull
    subscription it came on, made unless given)."""
    task = queue_pb2.JobTask(job=JOB, tenant="t1", priority="interactive")
    await jetstream.publish(work_subject("validate", "interactive"), task.SerializeToString())
    if validate is None:
        validate = await jetstream.pull_subscribe_bind(
            durable=consumer_name("validate", "interactive"), stream=WORK_STREAM
        )
    (delivery,) = await validate.fetch(1, timeout=5)
    return delivery, validate
