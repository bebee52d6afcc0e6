"""A bounded soak inside the suite: 12 jobs keep flowing while a random
process (a service, or the NATS server) is SIGKILLed about every second, each
kill once the stack has recovered from the one before. The killer's seed is
one whose first six victims are the five services and the NATS server, each
once, and the submissions are paced by the kills (two jobs let go before
each of the first six, the kill coming the moment they are accepted), so
every kind of process dies at least once while jobs are in flight. Every
job ends in exactly one outcome, `quire check` passes afterwards, and so
does the history checker over every call the client made
(``quire.testing.history``), its facts gathered through the services' APIs
before the stack stops.

`make soak` runs the full-size version (1,000 jobs) and prints its figures.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from quire.invariants import check
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.history import History, SystemAccess, gather_facts, verdicts_markdown
from quire.testing.history import check as check_history
from quire.testing.soak import SOAK_ENV, VICTIMS, soak

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = 12
SEED = 1361
"""Its first kills: assembler, nats, admission, signer, audit, validator."""
KILL_INTERVAL = 1.0
"""Seconds from one kill's recovery to the next (jittered 0.5-1.5x): the
killer waits for each victim to be back and healthy first, so a short
interval spends no time idle without piling kills onto a stack still
coming back."""


async def test_jobs_survive_random_kills_with_exactly_one_outcome_each(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack", env=SOAK_ENV)
    await asyncio.to_thread(stack.start)
    try:
        (tmp_path / "inputs").mkdir()
        report = await soak(
            stack,
            tmp_path / "inputs",
            jobs=JOBS,
            kill_interval=KILL_INTERVAL,
            timeout=300,
            seed=SEED,
            min_kills=len(VICTIMS),
            history=tmp_path / "soak.jsonl",
        )
        history = History.read([tmp_path / "soak.jsonl"])
        access = SystemAccess.of_stack(StackInfo.read(stack.data_dir))
        facts = await gather_facts(access, history, tmp_path / "facts", grace=60)
    finally:
        await asyncio.to_thread(stack.stop)
    print("\n".join(report.lines()))
    assert sum(report.kills.values()) >= len(VICTIMS), "processes were really killed"
    assert set(report.kills) == set(VICTIMS), "every service and the NATS server was killed"
    assert set(report.kills_in_flight) == set(VICTIMS), "each of them with jobs in flight"
    assert report.outcomes == {"COMPLETED": JOBS}
    assert report.terminal_entries == {1: JOBS}, "exactly one terminal ledger entry per job"
    result = await asyncio.to_thread(check, stack.data_dir)
    assert result.ok, result.findings
    verdicts = check_history(history, facts)
    print(verdicts_markdown(verdicts))
    assert verdicts.ok, verdicts.summary()
    assert verdicts["ended"].checked == JOBS
