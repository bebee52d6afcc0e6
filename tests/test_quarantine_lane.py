"""The quarantine lane and per-file budgets (issue 13), without the stack: the
budget rule, the per-call budget of a sandbox pool, and the lane routing of
the evaluator. ``time.sleep`` stands in for slow PDF work here only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from quire.sandbox import Budget, SandboxBusy, SandboxExhausted, SandboxPool
from quire.settings import SandboxSettings
from quire.validator.budgets import MIB, BudgetRule
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits


def test_budget_scales_with_size_and_pages() -> None:
    rule = BudgetRule(base_seconds=3, seconds_per_mib=2, seconds_per_page=0.05)
    small = rule.budget(50 * 1024)
    assert 3 < small.cpu_seconds < 3.2 and small.wall_seconds == 10 * small.cpu_seconds, (
        "the clock is only a backstop, far above the CPU budget"
    )
    assert rule.budget(20 * MIB).cpu_seconds == 43
    assert rule.budget(0, pages=100).cpu_seconds == 8
    assert BudgetRule(base_seconds=3, wall_factor=2).quarantine(0) == Budget(9, 18), (
        "quarantine: three times the budget"
    )
    assert BudgetRule(base_seconds=0.25).quarantine(0) == Budget(4, 40), (
        "never less than the floor: the verdict's line is far above ordinary work"
    )


def test_quarantine_settings_have_their_own_defaults_and_env() -> None:
    env = {"QUIRE_VALIDATOR_QUARANTINE_CPU_SECONDS": "7", "QUIRE_VALIDATOR_SANDBOX_WORKERS": "4"}
    shared = SandboxSettings.from_env(env, "validator")
    quarantine = SandboxSettings.from_env(env, "validator", lane="quarantine")
    assert (shared.workers, shared.cpu_seconds, shared.nice) == (4, 20, 0)
    assert (quarantine.workers, quarantine.cpu_seconds, quarantine.nice) == (1, 7, 19)
    rule = BudgetRule.from_env({"QUIRE_VALIDATOR_BUDGET_BASE_SECONDS": "1.5"})
    assert rule.base_seconds == 1.5 and rule.seconds_per_mib == BudgetRule().seconds_per_mib


def _pool(workers: int = 1, wall: float = 30, name: str = "test") -> SandboxPool:
    return SandboxPool(
        SandboxSettings(workers=workers, cpu_seconds=20, wall_seconds=wall), name=name
    )


async def test_a_per_call_budget_is_tighter_than_the_pool_but_never_looser() -> None:
    pool = _pool(wall=1.5)
    try:
        await pool.warm()
        started = time.monotonic()
        with pytest.raises(SandboxExhausted):
            await pool.run(time.sleep, 5, budget=Budget(cpu_seconds=5, wall_seconds=0.3))
        assert time.monotonic() - started < 1.2, "killed at the call's budget"
        started = time.monotonic()
        with pytest.raises(SandboxExhausted):
            await pool.run(time.sleep, 5, budget=Budget(cpu_seconds=60, wall_seconds=60))
        assert time.monotonic() - started < 3, "the pool's limit is the ceiling"
        assert await pool.run(abs, -2, budget=Budget(1, 1)) == 2, "a fresh worker took over"
    finally:
        pool.close()


async def test_a_fresh_worker_start_is_not_charged_to_the_task_that_finds_it() -> None:
    """A killed worker is replaced on the next call; loading its libraries (here
    pikepdf, well over 50 ms) must not eat that call's wall-clock budget, or the
    job after a hostile one would be pushed to quarantine too."""
    pool = SandboxPool(
        SandboxSettings(workers=1, cpu_seconds=20, wall_seconds=30),
        name="fresh",
        preload=("pikepdf", "magic"),
    )
    try:
        assert await pool.run(abs, -1, budget=Budget(cpu_seconds=1, wall_seconds=0.05)) == 1
        with pytest.raises(SandboxExhausted):
            await pool.run(time.sleep, 5, budget=Budget(cpu_seconds=5, wall_seconds=0.2))
        assert await pool.run(abs, -2, budget=Budget(cpu_seconds=1, wall_seconds=0.05)) == 2
    finally:
        pool.close()


async def test_a_busy_pool_makes_a_bounded_wait_fail_without_running() -> None:
    pool = _pool()
    try:
        await pool.warm()
        hog = asyncio.create_task(pool.run(time.sleep, 1.5))
        await asyncio.sleep(0.1)
        with pytest.raises(SandboxBusy):
            await pool.run(abs, -1, wait_seconds=0.2)
        await hog
        assert await pool.run(abs, -1, wait_seconds=0.2) == 1
    finally:
        pool.close()


@asynccontextmanager
async def _lanes(quarantine_scale: float) -> AsyncIterator[Evaluator]:
    """An evaluator with warm shared and quarantine pools: a 0.6 s wall-clock
    budget in the shared lane, ``quarantine_scale`` times that in quarantine."""
    shared, quarantine = _pool(name="shared"), _pool(name="quarantine")
    try:
        await asyncio.gather(shared.warm(), quarantine.warm())
        yield Evaluator(
            blobs=None,  # type: ignore[arg-type]  # not reached by run_sandboxed
            sandbox=shared,
            limits=PdfLimits(),
            quarantine=quarantine,
            budgets=BudgetRule(
                base_seconds=0.3,
                seconds_per_mib=0,
                wall_factor=2,  # time.sleep stands in for work: the clock decides here
                quarantine_scale=quarantine_scale,
                quarantine_floor_seconds=0,
                quarantine_wait_seconds=5,
            ),
        )
    finally:
        shared.close()
        quarantine.close()


@pytest.fixture
async def lanes() -> AsyncIterator[Evaluator]:
    """Quarantine's budget (6 s by the clock) is ten times the shared lane's."""
    async with _lanes(quarantine_scale=10) as evaluator:
        yield evaluator


async def test_a_task_that_exhausts_the_shared_lane_is_retried_in_quarantine(
    lanes: Evaluator,
) -> None:
    evaluator = lanes
    started = time.monotonic()
    # 0.8 s of "work": over the shared wall budget (0.6 s), within quarantine's (6 s)
    assert await evaluator.run_sandboxed(("slow",), 0, 0, time.sleep, 0.8) is None
    first = time.monotonic() - started
    assert first >= 1.4, "tried in the shared lane first, then in quarantine"
    started = time.monotonic()
    assert await evaluator.run_sandboxed(("slow",), 0, 0, time.sleep, 0.8) is None
    assert time.monotonic() - started < 1.3, "known to be hostile: straight to quarantine"


async def test_exhausting_quarantine_too_is_final() -> None:
    """With quarantine's budget three times the shared lane's (1.8 s by the
    clock), so that the hang is stopped in both lanes within seconds."""
    async with _lanes(quarantine_scale=3) as evaluator:
        with pytest.raises(SandboxExhausted):
            await evaluator.run_sandboxed(("hang",), 0, 0, time.sleep, 30)


async def test_ordinary_work_never_waits_behind_the_quarantine_lane(lanes: Evaluator) -> None:
    evaluator = lanes
    hostile = asyncio.create_task(evaluator.run_sandboxed(("hostile",), 0, 0, time.sleep, 4))
    await asyncio.sleep(1.0)  # out of the shared lane (0.6 s), into quarantine
    started = time.monotonic()
    # The first call also starts the shared lane's new worker (the hostile
    # task's was killed there): far less than the 4 s quarantine is held.
    assert await evaluator.run_sandboxed(("ordinary",), 0, 0, abs, -3) == 3
    assert time.monotonic() - started < 2.5, "the shared lane is free"
    started = time.monotonic()
    for _ in range(5):
        assert await evaluator.run_sandboxed(("ordinary",), 0, 0, abs, -3) == 3
    assert time.monotonic() - started < 1.0, "and stays free"
    assert not hostile.done(), "while the hostile task still holds quarantine"
    waiting = asyncio.create_task(evaluator.run_sandboxed(("second",), 0, 0, time.sleep, 1))
    assert await hostile is None
    assert await waiting is None, "a second hostile task waited for quarantine, bounded"
