"""The sandbox's lanes (issue 18): interactive work is served before batch work
when a worker frees, batch work never holds the reserved workers, batch tasks
run at a lower CPU priority, and cancellation and recovery work in each lane.
Real worker processes; ``time.sleep`` stands in for PDF work."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from sqlalchemy import MetaData
from test_faults_common import most_at_once

from quire.database import Database
from quire.leases import LeaseStore, lease_table
from quire.pipeline import stage
from quire.sandbox import SandboxExhausted, SandboxPool, sandbox_lane
from quire.sandboxlanes import current_lane
from quire.settings import QueueSettings, SandboxSettings
from quire.stage import StageResult, StageRunner
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, Publisher, consumer_name, work_subject


def _span(seconds: float) -> tuple[float, float]:
    """Sleep in the worker; when it started and ended (wall clock)."""
    started = time.time()
    time.sleep(seconds)
    return started, time.time()


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _die() -> None:
    os._exit(3)


def _pool(workers: int, reserved: int, *, batch_nice: int = 10) -> SandboxPool:
    settings = SandboxSettings(
        workers=workers,
        cpu_seconds=20,
        wall_seconds=30,
        reserved_workers=reserved,
        batch_nice=batch_nice,
    )
    return SandboxPool(settings, name="lanes-test")


async def _abandon(pool: SandboxPool, calls: list[asyncio.Task[tuple[float, float]]]) -> None:
    """Cancel ``calls`` (their workers are killed) and wait until the batch lane
    has its workers back, so the pool closes with no recovery under way."""
    for call in calls:
        call.cancel()
    for call in calls:
        with pytest.raises(asyncio.CancelledError):
            await call
    await asyncio.wait_for(pool.run(abs, -1, lane="batch"), 20)


def test_reserved_workers_and_batch_niceness_come_from_the_environment() -> None:
    env = {
        "QUIRE_ASSEMBLER_SANDBOX_WORKERS": "4",
        "QUIRE_ASSEMBLER_SANDBOX_RESERVED_WORKERS": "2",
        "QUIRE_ASSEMBLER_SANDBOX_BATCH_NICE": "5",
    }
    settings = SandboxSettings.from_env(env, "assembler")
    assert (settings.batch_workers(), settings.batch_nice) == (2, 5)
    default = SandboxSettings.from_env({}, "assembler")
    assert (default.workers, default.batch_workers(), default.batch_nice) == (2, 1, 10)
    assert SandboxSettings(workers=1).batch_workers() == 1, "one worker: nothing reserved"
    assert SandboxSettings(workers=3, reserved_workers=9).batch_workers() == 1


async def test_interactive_work_starts_while_batch_work_holds_its_lane() -> None:
    pool = _pool(workers=2, reserved=1)
    try:
        await pool.warm()
        # Batch work holds its one worker and more waits: far longer than the test.
        batch = [asyncio.create_task(pool.run(_span, 60, lane="batch")) for _ in range(2)]
        await asyncio.sleep(0.3)
        await asyncio.wait_for(pool.run(_span, 0.0, lane="interactive"), 20)
        assert not any(task.done() for task in batch), "no batch call had to finish first"
        await _abandon(pool, batch)
    finally:
        pool.close()


async def test_batch_never_holds_more_than_workers_minus_reserved() -> None:
    pool = _pool(workers=3, reserved=1)
    try:
        await pool.warm()  # a worker still starting on a loaded machine would run none at once
        spans = await asyncio.gather(*(pool.run(_span, 0.4, lane="batch") for _ in range(6)))
        assert most_at_once(spans) == 2
    finally:
        pool.close()


async def test_a_freed_worker_goes_to_interactive_work_before_waiting_batch_work() -> None:
    pool = _pool(workers=2, reserved=0)  # no reserve: only the hand-off's order decides
    try:
        await pool.warm()
        holding = [asyncio.create_task(pool.run(_span, 60, lane="batch")) for _ in range(2)]
        await asyncio.sleep(0.3)
        queued_batch = asyncio.create_task(pool.run(_span, 0.0, lane="batch"))
        await asyncio.sleep(0.1)  # the batch caller waits first...
        interactive = asyncio.create_task(pool.run(_span, 0.0, lane="interactive"))
        await asyncio.sleep(0.1)
        assert not queued_batch.done() and not interactive.done()
        await _abandon(pool, holding[:1])  # one worker frees
        i_start, _ = await asyncio.wait_for(interactive, 20)
        b_start, _ = await asyncio.wait_for(queued_batch, 20)
        assert i_start < b_start, "...but the interactive caller gets the freed worker"
        await _abandon(pool, holding[1:])
    finally:
        pool.close()


async def test_one_call_after_another_runs_in_the_worker_last_used() -> None:
    """The idle worker handed out is the one most recently given back (its
    caches hold the work just done), not the one idle longest: calls one
    after another all run in one process, and two at once in two."""
    pool = _pool(workers=3, reserved=0)
    try:
        await pool.warm()
        alone = {await pool.run(os.getpid) for _ in range(6)}
        assert len(alone) == 1
        together = set(await asyncio.gather(*(pool.run(_pid_after, 0.3) for _ in range(2))))
        assert len(together) == 2
        assert alone < together, "the worker used alone is one of the pair"
    finally:
        pool.close()


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


async def test_batch_workers_run_at_the_configured_niceness() -> None:
    pool = _pool(workers=2, reserved=1, batch_nice=7)
    try:
        interactive = await pool.run(_niceness, lane="interactive")
        batch = await pool.run(_niceness, lane="batch")
        assert interactive == os.getpriority(os.PRIO_PROCESS, 0)
        assert batch == min(19, interactive + 7)
        with sandbox_lane("batch"):  # how the stage runner passes a job's class
            assert await pool.run(_niceness) == batch
        assert await pool.run(_niceness) == interactive, "interactive outside any lane"
    finally:
        pool.close()


async def test_cancelling_a_batch_call_kills_its_worker_and_frees_the_lane() -> None:
    pool = _pool(workers=2, reserved=1)
    try:
        first = await pool.run(os.getpid, lane="batch")
        hostile = asyncio.create_task(pool.run(_span, 30, lane="batch"))
        waiting = asyncio.create_task(pool.run(_span, 30, lane="batch"))
        await asyncio.sleep(0.3)
        waiting.cancel()  # a waiter gives up: it must not keep a worker
        hostile.cancel()
        for task in (hostile, waiting):
            with pytest.raises(asyncio.CancelledError):
                await task
        started = time.monotonic()
        second = await pool.run(os.getpid, lane="batch")
        assert time.monotonic() - started < 5, "the lane's worker came back"
        assert second != first, "the abandoned process was killed and replaced"
        pids = await asyncio.gather(*(pool.run(os.getpid) for _ in range(2)))
        assert len(set(pids)) == 2, "both slots are free again"
    finally:
        pool.close()


async def test_a_dead_batch_worker_is_replaced_without_touching_interactive_work() -> None:
    pool = _pool(workers=2, reserved=1)
    try:
        interactive = asyncio.create_task(pool.run(_span, 0.8, lane="interactive"))
        with pytest.raises(SandboxExhausted):
            await pool.run(_die, lane="batch")
        assert await pool.run(abs, -3, lane="batch") == 3, "a fresh batch worker took over"
        start, end = await interactive
        assert end - start >= 0.8, "the interactive call ran to its end"
    finally:
        pool.close()


class _LaneRecorder:
    """Stage work that notes the sandbox lane its calls would take."""

    def __init__(self) -> None:
        self.lanes: dict[str, str] = {}

    async def process(self, task: queue_pb2.JobTask, lease, attempt: int) -> StageResult:  # type: ignore[no-untyped-def]
        self.lanes[task.job] = current_lane()
        return StageResult.hand_on(task)


async def test_the_stage_runner_passes_each_jobs_class_as_its_lane(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    metadata = MetaData()
    leases = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    work = _LaneRecorder()
    runner = StageRunner(
        stage=stage("validate"),
        work=work,
        leases=LeaseStore(database, leases),
        publisher=Publisher(jetstream),
        events=EventFactory("validator", "test", "0"),
        queue=fast_queue,
    )
    for job, priority in (("jobs/00000000000000b1", "batch"), ("jobs/00000000000000a1", "")):
        task = queue_pb2.JobTask(job=job, tenant="t1", priority=priority)
        subject_class = priority or "interactive"
        await jetstream.publish(work_subject("validate", subject_class), task.SerializeToString())
        pull = await jetstream.pull_subscribe_bind(
            durable=consumer_name("validate", subject_class), stream=WORK_STREAM
        )
        (delivery,) = await pull.fetch(1, timeout=5)
        await runner.handle(delivery)
    assert work.lanes == {
        "jobs/00000000000000b1": "batch",
        "jobs/00000000000000a1": "interactive",
    }
    assert current_lane() == "interactive", "the lane is the delivery's only"
    database.close()
