"""Killed in the middle of a group: a stage SIGKILLed while one transaction
holds several jobs' outcomes (before it commits), or just after such a
transaction committed (before anything was published or acked), loses and
duplicates nothing. Every job ends COMPLETED once, with one artifact, and
the invariant checker finds nothing.

The jobs are held in the validate queue, the fault point armed, and the
queue let go at once, so the validator works them side by side and commits
their outcomes together; the point fires only in a transaction that holds
more than one job's lease or outcome (``quire.leases``, ``quire.groupcommit``),
in the first stage process to write one (the validator, all but always).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from test_faults_common import (
    eventually,
    ledger_rows,
    resume_promptly,
    running_stack,
    submit_text_jobs,
    wait_all,
)

from quire.faults import arm, fired
from quire.invariants import check
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.testing.consumers import HELD_FOREVER
from quire.workqueue import WORK_STREAM, consumer_name

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = 6
CONSUMER = consumer_name("validate", "interactive")


async def _killed_mid_group(tmp_path: Path, point: str) -> None:
    data_dir = tmp_path / "stack"
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    env = {
        "QUIRE_FAULTS_DIR": str(fault_dir),
        "QUIRE_ACK_WAIT_SECONDS": "3",
        "QUIRE_BACKOFF_CAP_SECONDS": "1",
    }
    async with running_stack(data_dir, env) as running:
        stack = running.stack
        nc = await connect_nats(stack.nats_url, "quire-test-groups", **stack.nats_login())
        try:
            js = nc.jetstream()
            await js.pause_consumer(WORK_STREAM, CONSUMER, HELD_FOREVER)
            jobs = await submit_text_jobs(running.client, tmp_path / "inputs", JOBS)

            async def all_waiting() -> bool:
                info = await js.consumer_info(WORK_STREAM, CONSUMER)
                return info.num_pending >= JOBS

            await eventually(all_waiting, 30, "every job waiting to be validated")
            arm(fault_dir, point)
            await resume_promptly(js, WORK_STREAM, CONSUMER)
            done = await wait_all(running.client, jobs, 120, through_unavailable=True)
        finally:
            await nc.close()
        assert fired(fault_dir, point), "a stage died with several jobs in one transaction"
        restarts = {s: stack.restarts(s) for s in ("validator", "assembler", "signer")}
        assert sum(restarts.values()) == 1, restarts
        assert {state_name(job.state) for job in done.values()} == {"COMPLETED"}
        completed = Counter(
            job for _, _, job, state in ledger_rows(data_dir) if state == "COMPLETED"
        )
        assert sorted(completed) == sorted(jobs) and set(completed.values()) == {1}
        with sqlite3.connect(f"file:{data_dir / 'signer' / 'signer.db'}?mode=ro", uri=True) as db:
            signed = Counter(job for (job,) in db.execute("SELECT job FROM signatures"))
        assert sorted(signed) == sorted(jobs) and set(signed.values()) == {1}, "signed once each"
    report = check(data_dir)
    assert report.stopped and report.findings == [], report.findings


async def test_a_stage_killed_while_a_group_is_being_written_loses_nothing(
    tmp_path: Path,
) -> None:
    await _killed_mid_group(tmp_path, "leases.group_written")


async def test_a_stage_killed_just_after_a_group_committed_duplicates_nothing(
    tmp_path: Path,
) -> None:
    await _killed_mid_group(tmp_path, "leases.group_committed")
