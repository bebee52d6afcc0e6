"""Evidence lags: audit's events consumer is paused (and, later, the whole
audit service is stopped) while jobs run. The assembler asks audit before
acting (``quire.authority``), so the jobs wait there, validated but neither
assembled nor signed, and no job is ever shown COMPLETED while its history
is missing from the ledger; once the events flow again every job completes,
once, and the invariant checker finds nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from test_faults_common import (
    eventually,
    ledger_rows,
    resume_promptly,
    running_stack,
    submit_text_jobs,
    wait_all,
)

from quire.client import AdmissionClient
from quire.invariants import check
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.testing.consumers import pause
from quire.workqueue import EVENTS_STREAM
from quire.workqueue.topology import EVENTS_CONSUMER

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = 4
ENV = {
    # Deferred completions come back within a second once the evidence is in.
    "QUIRE_BACKOFF_CAP_SECONDS": "1",
    "QUIRE_ACK_WAIT_SECONDS": "10",
}


def _leased(data_dir: Path, service: str, *, committed: bool) -> set[str]:
    """The jobs ``service`` has taken a lease for (and committed an outcome of)."""
    path = data_dir / service / f"{service}.db"
    query = "SELECT job FROM stage_leases" + (" WHERE outcome IS NOT NULL" if committed else "")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {job for (job,) in db.execute(query)}


def _waiting_for_audit(data_dir: Path, names: list[str]) -> bool:
    """Every job validated and taken up by the assembler, which waits for
    audit's record of the validation: none assembled, none signed."""
    validated = _leased(data_dir, "validator", committed=True)
    taken = _leased(data_dir, "assembler", committed=False)
    assembled = _leased(data_dir, "assembler", committed=True)
    assert not set(names) & assembled, "assembled before audit recorded the validation"
    assert not set(names) & _leased(data_dir, "signer", committed=False), "signed too early"
    return set(names) <= validated and set(names) <= taken


async def _never_completed(client: AdmissionClient, names: list[str]) -> None:
    """Every job's status, asked for all at once: while audit is stopped each
    answer is an UNAVAILABLE that takes admission seconds to give."""

    async def one(name: str) -> None:
        try:
            job = await client.get_job(name)
        except Exception:  # noqa: BLE001 - audit unreachable: nothing shown complete
            return
        assert state_name(job.state) != "COMPLETED", "shown complete with evidence missing"

    await asyncio.gather(*(one(name) for name in names))


async def _watch_while(
    client: AdmissionClient,
    data_dir: Path,
    names: list[str],
    ready: Callable[[], Awaitable[bool]],
) -> None:
    """Poll every job's status until ``ready()`` holds; none may be COMPLETED.

    The polls run beside the wait for ``ready()`` (at least one of them
    complete): with audit stopped one poll takes seconds, and the wait ends
    when ``ready()`` does, not at the end of the poll then under way.
    """
    polls = 0

    async def watch() -> None:
        nonlocal polls
        while True:
            await _never_completed(client, names)
            rows = ledger_rows(data_dir)
            completions = [r for r in rows if r[2] in names and r[3] == "COMPLETED"]
            assert not completions, "a completion was recorded without its history"
            polls += 1
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())

    async def settled() -> bool:
        if watcher.done():
            watcher.result()  # raises what the watcher found
        return polls > 0 and await ready()

    try:
        await eventually(settled, 60, "jobs reached the commit stage", every=0.1)
    finally:
        watcher.cancel()
        with suppress(asyncio.CancelledError):
            await watcher


async def test_no_job_is_shown_complete_while_its_events_lag(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "stack", env=ENV) as running:
        nc = await connect_nats(
            running.stack.nats_url, "quire-test-lag", **running.stack.nats_login()
        )
        js: JetStreamContext = nc.jetstream(timeout=10)
        try:
            await pause(js, EVENTS_STREAM, EVENTS_CONSUMER, minutes=3)
            names = await submit_text_jobs(running.client, tmp_path / "paused", JOBS)

            async def held() -> bool:
                return _waiting_for_audit(running.data_dir, names)

            await _watch_while(running.client, running.data_dir, names, held)
            await asyncio.sleep(2.0)  # and they stay held
            assert _waiting_for_audit(running.data_dir, names)
            assert not [r for r in ledger_rows(running.data_dir) if r[2] in names]
            await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
            jobs = await wait_all(running.client, names, timeout=60)
            assert {n: state_name(j.state) for n, j in jobs.items()} == dict.fromkeys(
                names, "COMPLETED"
            )
        finally:
            await nc.close()

        # The same with the whole audit service stopped, and its events waiting.
        await asyncio.to_thread(running.stack.stop_service, "audit")
        later = await submit_text_jobs(running.client, tmp_path / "stopped", JOBS)

        async def all_held() -> bool:
            return _waiting_for_audit(running.data_dir, later)

        await _watch_while(running.client, running.data_dir, later, all_held)
        await asyncio.to_thread(running.stack.start_service, "audit")
        await asyncio.to_thread(running.stack.wait_healthy)
        # Admission's channel to audit may still be reconnecting for a moment.
        jobs = await wait_all(running.client, later, timeout=60, through_unavailable=True)
        assert {state_name(j.state) for j in jobs.values()} == {"COMPLETED"}
        completions = [r[2] for r in ledger_rows(running.data_dir) if r[3] == "COMPLETED"]
        assert sorted(completions) == sorted(names + later), "one completion per job"
    report = check(running.data_dir)
    assert report.stopped and report.findings == [], report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": 2 * JOBS}
