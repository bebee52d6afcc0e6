"""NATS itself dies: nats-server is SIGKILLed in the middle of a batch of jobs
and started again on the same store. Every job still ends with exactly one
outcome (COMPLETED), the ledger holds one completion per job, and the
invariant checker finds nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from test_faults_common import eventually, ledger_rows, running_stack, submit_text_jobs, wait_all

from quire.invariants import check
from quire.jobs import state_name

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = 10
"""Half submitted first, the rest once two of those completed: nats-server
is killed the moment the last is accepted, so the outage always hits jobs in
flight, however fast the machine."""
OUTAGE_SECONDS = 1.5


async def test_nats_killed_and_restarted_mid_batch_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "stack", env={"QUIRE_ACK_WAIT_SECONDS": "3"}) as running:
        nats = running.stack.nats
        assert nats is not None
        names = await submit_text_jobs(running.client, tmp_path / "first", JOBS // 2)

        async def some_completed() -> bool:
            done = [r for r in ledger_rows(running.data_dir) if r[3] == "COMPLETED"]
            return len(done) >= 2

        await eventually(some_completed, 60, "the batch got under way", every=0.02)
        names += await submit_text_jobs(running.client, tmp_path / "rest", JOBS - JOBS // 2)
        await asyncio.to_thread(nats.kill)
        completed_before = {r[2] for r in ledger_rows(running.data_dir) if r[3] == "COMPLETED"}
        assert len(completed_before) < JOBS, "the outage must hit jobs still in flight"
        await asyncio.sleep(OUTAGE_SECONDS)
        await asyncio.to_thread(nats.start)

        jobs = await wait_all(running.client, names, timeout=90)
        assert {name: state_name(job.state) for name, job in jobs.items()} == {
            name: "COMPLETED" for name in names
        }
        rows = ledger_rows(running.data_dir)
        completions = Counter(job for _seq, _id, job, state in rows if state == "COMPLETED")
        assert completions == Counter(names), "exactly one COMPLETED entry per job"
        assert len({event_id for _seq, event_id, _job, _state in rows}) == len(rows)
        signed = list((running.data_dir / "blobs" / "signed").rglob("*.pdf"))
        assert len(signed) == JOBS
    report = check(running.data_dir)
    assert report.stopped and report.findings == [], report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": JOBS}
