"""Lost queue messages heal: a purged work stream strands no accepted job.

Jobs wait at several points of the pipeline (validate and assemble tasks held
in the queue, events held from audit) when the operator's login purges the
work stream — every task in it is gone. Admission's reconciler notices jobs
that sit still past their state's budget and re-drives them from the stages'
committed records; every job ends COMPLETED exactly once, with one artifact,
and ``quire check`` finds nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from test_faults_common import (
    Running,
    eventually,
    kept_armed,
    ledger_rows,
    resume_promptly,
    running_stack,
    submit_text_jobs,
)
from test_faults_common import wait_all as wait_terminal

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.client import PacketItem
from quire.invariants import check
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.testing.consumers import pause
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.workqueue import PRIORITIES, WORK_STREAM, consumer_name

pytestmark = [pytest.mark.stack, pytest.mark.asyncio(loop_scope="module")]

ENV = {
    "QUIRE_MAX_DELIVER": "2",
    "QUIRE_ACK_WAIT_SECONDS": "3",
    "QUIRE_BACKOFF_CAP_SECONDS": "1",
    "QUIRE_RECONCILE_SECONDS": "1",
    "QUIRE_STALL_SECONDS": "4",
}
PER_QUEUE = 4
"""Jobs whose task waits in each held queue when the stream is purged: several,
so that a pass re-drives more than one; how many is not what is asserted."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    directory = tmp_path_factory.mktemp("reconcile")
    env = {**ENV, "QUIRE_FAULTS_DIR": str(directory / "faults")}
    async with running_stack(directory, env) as stack:
        yield stack


@pytest.mark.parametrize(
    ("held", "shown"),
    [
        ("validate", "ACCEPTED"),
        # The signer's events ride on its commit task: a job held in audit's
        # own queue is still shown at SIGNING, and is in line all the same.
        ("commit", "SIGNING"),
    ],
)
async def test_a_job_waiting_in_line_is_not_redriven(
    running: Running, tmp_path: Path, held: str, shown: str
) -> None:
    """A backlog is not a loss: jobs whose tasks still wait in the queue, however
    long past their budget, are left alone (no re-drive doubles a backlog)."""
    nc = await connect_nats(running.stack.nats_url, "operator-hold", **running.stack.nats_login())
    js = nc.jetstream()
    try:
        for priority in PRIORITIES:
            await pause(js, WORK_STREAM, consumer_name(held, priority), minutes=5)
        names = await submit_text_jobs(running.client, tmp_path / "waiting", 3)

        async def arrived() -> bool:
            views = [await running.client.get_job(name) for name in names]
            return all(state_name(view.state) == shown for view in views)

        await eventually(arrived, 60, f"jobs shown {shown}")
        # Past the budget, then several passes (one a second) that find them there.
        await asyncio.sleep(
            float(ENV["QUIRE_STALL_SECONDS"]) + 4 * float(ENV["QUIRE_RECONCILE_SECONDS"])
        )
        for name in names:
            assert state_name((await running.client.get_job(name)).state) == shown
        assert _redrives(running.data_dir, names) == 0
    finally:
        for priority in PRIORITIES:
            await resume_promptly(js, WORK_STREAM, consumer_name(held, priority))
        await nc.close()
    jobs = await wait_terminal(running.client, names, timeout=60)
    assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}


def _redrives(data_dir: Path, names: list[str]) -> int:
    path = data_dir / "admission" / "admission.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT job FROM redrives").fetchall()
    return sum(1 for (job,) in rows if job in names)


async def test_a_purged_work_stream_strands_no_job(running: Running, tmp_path: Path) -> None:
    nc = await connect_nats(running.stack.nats_url, "operator-purge", **running.stack.nats_login())
    js = nc.jetstream()
    held = [consumer_name(stage, p) for stage in ("validate", "assemble") for p in PRIORITIES]
    try:
        # Half the jobs get as far as the assemble queue, half stay in the validate queue.
        for consumer in held[2:]:
            await pause(js, WORK_STREAM, consumer, minutes=5)
        early = await submit_text_jobs(running.client, tmp_path / "early", PER_QUEUE)

        async def assembling() -> bool:
            views = [await running.client.get_job(name) for name in early]
            return all(state_name(view.state) == "ASSEMBLING" for view in views)

        await eventually(assembling, 60, "early jobs waiting for the assembler")
        for consumer in held[:2]:
            await pause(js, WORK_STREAM, consumer, minutes=5)
        late = await submit_text_jobs(running.client, tmp_path / "late", PER_QUEUE)
        info = await js.stream_info(WORK_STREAM)
        # Every job's next task is waiting in the stream.
        assert info.state.messages >= 2 * PER_QUEUE
        await js.purge_stream(WORK_STREAM)
        assert (await js.stream_info(WORK_STREAM)).state.messages == 0
    finally:
        # Even when an assertion above failed: the module's later tests share
        # this stack, and must not find its queues paused.
        for consumer in held:
            await resume_promptly(js, WORK_STREAM, consumer)
        await nc.close()

    names = early + late
    jobs = await wait_terminal(running.client, names, timeout=120)
    assert Counter(state_name(job.state) for job in jobs.values()) == {"COMPLETED": 2 * PER_QUEUE}
    completions = Counter(
        job for _, _, job, to_state in ledger_rows(running.data_dir) if to_state == "COMPLETED"
    )
    assert all(completions[name] == 1 for name in names)
    signed = {path.stem for path in (running.data_dir / "blobs" / "signed").rglob("*.pdf")}
    assert {name.removeprefix("jobs/") for name in names} <= signed
    log = (running.data_dir / "logs" / "admission.log").read_text(errors="replace")
    assert "re-drove" in log  # healed by the reconciler, not by luck

    async def clean() -> bool:
        return (await asyncio.to_thread(check, running.data_dir, stopped=False)).ok

    await eventually(clean, 60, "quire check clean", every=1.0)


async def test_a_lost_dead_letter_retry_is_published_again(
    running: Running, tmp_path: Path
) -> None:
    client = running.client
    faults = running.data_dir / "faults"
    digest = (await client.upload(write_text_pdf(tmp_path / "r.pdf", ["retry"]))).sha256
    async with kept_armed(faults, "signer.before_commit"):
        name = (await client.submit([PacketItem("r", digest)])).name
        failed = await client.wait(name, timeout=120)
    assert state_name(failed.state) == "FAILED"
    nc = await connect_nats(running.stack.nats_url, "operator-purge", **running.stack.nats_login())
    js = nc.jetstream()
    try:
        for priority in PRIORITIES:
            await pause(js, WORK_STREAM, consumer_name("sign", priority), minutes=5)

        # Asked of audit directly while it books the dead letter (a quire process
        # per look costs a second of CPU); then the operator's retry, once.
        await eventually(
            lambda: _dead_lettered(running, name), 30, "the dead letter booked", every=0.2
        )
        retry = await asyncio.to_thread(run_quire, running.data_dir, "dlq", "retry", name)
        assert retry.returncode == 0, retry.stdout + retry.stderr
        await js.purge_stream(WORK_STREAM)  # the retry's sign task is lost
        for priority in PRIORITIES:
            await resume_promptly(js, WORK_STREAM, consumer_name("sign", priority))
    finally:
        await nc.close()
    final = await client.wait(name, timeout=120)
    assert state_name(final.state) == "COMPLETED"
    completions = [row for row in ledger_rows(running.data_dir) if row[2] == name]
    assert [row[3] for row in completions].count("COMPLETED") == 1
    log = (running.data_dir / "logs" / "audit.log").read_text(errors="replace")
    assert "stalled dead-letter retr" in log


async def _dead_lettered(running: Running, job: str) -> bool:
    """Whether audit lists ``job`` among the dead letters (what ``quire dlq`` reads)."""
    operator = (("authorization", f"Bearer {running.info.operator_token()}"),)
    async with grpc.aio.insecure_channel(running.info.endpoints["audit"]) as channel:
        reply = await audit_service_pb2_grpc.AuditServiceStub(channel).ListDeadLetters(
            audit_service_pb2.ListDeadLettersRequest(), metadata=operator, timeout=10
        )
    return job in {letter.job for letter in reply.dead_letters}
