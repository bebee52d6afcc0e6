"""The sandbox's lanes (issue 18): interactive work is served before batch work
when a worker frees, batch work never holds the reserved workers, batch tasks
run at a lower CPU priority, and cancellation and recovery work in each lane.
Real worker processes; ``time.sleep`` stands in for PDF work."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from quire.sandbox import SandboxExhausted, SandboxPool, sandbox_lane
from quire.settings import SandboxSettings


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


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


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
        batch = [asyncio.create_task(pool.run(_span, 1.0, lane="batch")) for _ in range(2)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        _, interactive_end = await pool.run(_span, 0.0, lane="interactive")
        assert time.monotonic() - started < 1.0, "no wait for a batch call to finish"
        spans = await asyncio.gather(*batch)
        assert interactive_end < min(end for _, end in spans)
        assert _most_at_once(spans) == 1, "batch never took the reserved worker"
    finally:
        pool.close()


async def test_batch_never_holds_more_than_workers_minus_reserved() -> None:
    pool = _pool(workers=3, reserved=1)
    try:
        spans = await asyncio.gather(*(pool.run(_span, 0.4, lane="batch") for _ in range(6)))
        assert _most_at_once(spans) == 2
    finally:
        pool.close()


async def test_a_freed_worker_goes_to_interactive_work_before_waiting_batch_work() -> None:
    pool = _pool(workers=2, reserved=0)  # no reserve: only the hand-off's order decides
    try:
        await pool.warm()
        long = asyncio.create_task(pool.run(_span, 1.5, lane="batch"))
        short = asyncio.create_task(pool.run(_span, 0.5, lane="batch"))
        await asyncio.sleep(0.1)
        queued_batch = asyncio.create_task(pool.run(_span, 0.5, lane="batch"))
        await asyncio.sleep(0.1)  # the batch caller waits first...
        interactive = asyncio.create_task(pool.run(_span, 0.5, lane="interactive"))
        (i_start, i_end), (b_start, _) = await asyncio.gather(interactive, queued_batch)
        assert i_start < b_start, "...but the interactive caller gets the freed worker"
        assert b_start >= i_end - 0.05, "and the batch caller the next one"
        await asyncio.gather(long, short)
    finally:
        pool.close()


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
