"""A stage's concurrency limit belongs to the stage, not to a pod: replicas
of the assembler, with four slots each (far more slots than the limit), never
hold more jobs at once than the stage's limit, counted from the stage's own
records (each lease's delivery time to its commit).

The suite runs five replicas and 24 jobs (``STAGE_LIMIT_REPLICAS``,
``STAGE_LIMIT_JOBS``); ``make stage-limit`` runs ten replicas and 36 jobs."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import pytest
from test_faults_common import eventually, ledger_rows, most_at_once, running_stack, wait_all

from quire.client import PacketItem
from quire.errors import InvalidSetting
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.settings import (
    DEFAULT_STAGE_LIMIT,
    QueueSettings,
    service_address_var,
    service_health_var,
    service_metrics_var,
)
from quire.stack.natsserver import NatsServer
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack
from quire.testing.consumers import HELD_FOREVER, resume_promptly
from quire.testing.multinode import wait_healthy
from quire.testing.pdfs import write_text_pdf
from quire.type import queue_pb2
from quire.workqueue.topology import (
    PRIORITIES,
    WORK_STREAM,
    consumer_name,
    ensure_topology,
    priority_shares,
    work_subject,
)

pytestmark = pytest.mark.stack

LIMIT = 3
REPLICAS = int(os.environ.get("STAGE_LIMIT_REPLICAS", "5"))
"""The stack's assembler and REPLICAS - 1 more: 20 slots for a limit of 3."""
JOBS = int(os.environ.get("STAGE_LIMIT_JOBS", "24"))
ENV = {
    "QUIRE_ASSEMBLER_STAGE_LIMIT": str(LIMIT),
    "QUIRE_ASSEMBLER_CONCURRENCY": "4",
    "QUIRE_ASSEMBLER_SANDBOX_WORKERS": "1",
}


def _spawn_replica(
    env: dict[str, str], number: int, logs: Path
) -> tuple[subprocess.Popen[bytes], str]:
    health = f"127.0.0.1:{free_port()}"
    replica_env = {
        **env,
        service_address_var("assembler"): f"127.0.0.1:{free_port()}",
        service_health_var("assembler"): health,
        service_metrics_var("assembler"): f"127.0.0.1:{free_port()}",
        "QUIRE_INSTANCE": f"assembler-replica-{number}",
    }
    with open(logs / f"assembler-replica-{number}.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "quire.assembler.main"],
            env=replica_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, health


@asynccontextmanager
async def _assembling_held(stack: Stack) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    """The assemble consumers paused until the block calls ``release(n)``,
    which waits for ``n`` tasks to wait there and resumes them."""
    nc = await connect_nats(stack.nats_url, "quire-test-stage-limit", **stack.nats_login())
    js = nc.jetstream()
    held = [consumer_name("assemble", priority) for priority in PRIORITIES]
    try:
        for consumer in held:
            await js.pause_consumer(WORK_STREAM, consumer, HELD_FOREVER)

        async def release(count: int) -> None:
            async def all_waiting() -> bool:
                infos = [await js.consumer_info(WORK_STREAM, c) for c in held]
                return sum(info.num_pending for info in infos) >= count

            await eventually(all_waiting, 120, "every job waiting to be assembled")
            for consumer in held:
                await resume_promptly(js, WORK_STREAM, consumer)

        yield release
    finally:
        await nc.close()


def test_the_limit_is_split_between_priorities_without_exceeding_it() -> None:
    for limit in range(2, 200):
        shares = priority_shares(limit)
        assert sum(shares.values()) == limit and min(shares.values()) >= 1


async def test_replicas_of_a_stage_never_hold_more_jobs_than_its_limit(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "stack", ENV) as running:
        env = running.stack.service_env()
        logs = running.data_dir / "logs"
        replicas = [_spawn_replica(env, n, logs) for n in range(1, REPLICAS)]
        try:
            for process, health in replicas:
                await asyncio.to_thread(wait_healthy, health, process, "an assembler replica")
            # Sources big enough that assembling one packet takes a while.
            digests = []
            for index in range(3):
                pages = [f"page {p} of {index} {uuid.uuid4().hex}" for p in range(40)]
                path = write_text_pdf(tmp_path / f"source-{index}.pdf", pages)
                digests.append((await running.client.upload(path)).sha256)
            names = []
            # Every job waits at the assemble stage before any replica may take
            # one, so all of them pull at once, however fast assembling is.
            async with _assembling_held(running.stack) as release:
                for index in range(JOBS):
                    order = digests[index % 3 :] + digests[: index % 3]
                    items = [PacketItem(f"d{n}", digest) for n, digest in enumerate(order)]
                    priority = "batch" if index % 3 == 0 else "interactive"
                    names.append((await running.client.submit(items, priority=priority)).name)
                await release(JOBS)
            jobs = await wait_all(running.client, names, timeout=300)
            assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}
        finally:
            for process, _ in replicas:
                process.terminate()
            for process, _ in replicas:
                try:
                    await asyncio.to_thread(process.wait, 30)
                except subprocess.TimeoutExpired:
                    process.kill()

        with sqlite3.connect(running.data_dir / "assembler" / "assembler.db") as db:
            rows = db.execute(
                "SELECT leased_at, updated_at FROM stage_leases WHERE outcome IS NOT NULL"
            ).fetchall()
        assert len(rows) == JOBS
        intervals = [(datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in rows]
        assert all(start <= end for start, end in intervals)
        peak = most_at_once(intervals)
        assert 2 <= peak <= LIMIT, f"{peak} jobs held at once; the stage's limit is {LIMIT}"

        workers = set()
        with sqlite3.connect(running.data_dir / "audit" / "audit.db") as db:
            for (event,) in db.execute("SELECT event FROM ledger"):
                actor = queue_pb2.TransitionEvent.FromString(event).actor
                if actor.service == "assembler":
                    workers.add(actor.instance)
        print(f"{REPLICAS} replicas, {JOBS} jobs: peak {peak}, {len(workers)} assemblers")  # noqa: T201
        assert len(workers) >= 3, f"the work spread over the replicas: {sorted(workers)}"
        assert ledger_rows(running.data_dir), "the ledger holds the jobs"


async def test_an_operator_changes_a_stage_limit_and_the_consumers_follow(
    nats_server: NatsServer,
) -> None:
    """Provisioning again with a new limit updates the live consumers (their
    messages stay); the work and events streams keep the configured replicas."""
    nc = await connect_nats(nats_server.url, "test")
    try:
        js = nc.jetstream(timeout=10)
        await ensure_topology(js, QueueSettings.from_env({"QUIRE_SIGNER_STAGE_LIMIT": "9"}))
        await js.publish(work_subject("sign", "interactive"), b"kept")
        before = await js.consumer_info(WORK_STREAM, consumer_name("sign", "interactive"))
        assert before.config.max_ack_pending == priority_shares(9)["interactive"] == 6
        await ensure_topology(js, QueueSettings.from_env({"QUIRE_SIGNER_STAGE_LIMIT": "30"}))
        for priority in PRIORITIES:
            info = await js.consumer_info(WORK_STREAM, consumer_name("sign", priority))
            assert info.config.max_ack_pending == priority_shares(30)[priority]
        after = await js.consumer_info(WORK_STREAM, consumer_name("sign", "interactive"))
        assert after.num_pending == 1, "the waiting message is still there"
        other = await js.consumer_info(WORK_STREAM, consumer_name("validate", "interactive"))
        assert other.config.max_ack_pending == priority_shares(DEFAULT_STAGE_LIMIT)["interactive"]
        stream = await js.stream_info(WORK_STREAM)
        assert stream.config.num_replicas == 1
    finally:
        await nc.close()


def test_a_stage_limit_below_two_is_refused_at_start() -> None:
    with pytest.raises(InvalidSetting, match="QUIRE_VALIDATOR_STAGE_LIMIT"):
        QueueSettings.from_env({"QUIRE_VALIDATOR_STAGE_LIMIT": "1"})
