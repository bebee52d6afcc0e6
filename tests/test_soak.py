"""A bounded soak inside the suite: jobs keep flowing while a random process
(a service, or the NATS server) is SIGKILLed every couple of seconds. Every
job ends in exactly one outcome, and `quire check` passes afterwards.

`make soak` runs the full-size version (1,000 jobs) and prints its figures.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from quire.invariants import check
from quire.stack.supervisor import Stack
from quire.testing.soak import SOAK_ENV, soak

pytestmark = pytest.mark.stack


async def test_jobs_survive_random_kills_with_exactly_one_outcome_each(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack", env=SOAK_ENV)
    await asyncio.to_thread(stack.start)
    try:
        (tmp_path / "inputs").mkdir()
        report = await soak(
            stack, tmp_path / "inputs", jobs=60, kill_interval=2.0, timeout=300, min_kills=3
        )
    finally:
        await asyncio.to_thread(stack.stop)
    print("\n".join(report.lines()))
    assert sum(report.kills.values()) >= 3, "processes were really killed during the run"
    assert report.outcomes == {"COMPLETED": 60}
    assert report.terminal_entries == {1: 60}, "exactly one terminal ledger entry per job"
    result = await asyncio.to_thread(check, stack.data_dir)
    assert result.ok, result.findings
