"""The nemesis's disk and clock faults (issue 42) through their interface
(``quire.testing.nemesis.fault.Fault``), on the embedded stack seen as a
cluster (``quire.testing.nemesis.stackcluster``): each fault prepares the
processes it may strike before the stack starts, strikes one with jobs in
flight (a submit was just acknowledged), is healed, and the recorded
workload's history holds every property.

- ``temp-disk-full`` on the validator (blobs in NATS, so the small disk is
  the temporary space alone);
- ``blob-disk-full`` on the nats-server: its JetStream store, which holds
  the queues, the buckets and the blobs, full; healing frees it and starts
  the node again;
- ``clock-skew`` on audit, the direction drawn from a seed: the clock moves
  while audit runs, and back.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from quire.client import TenantAdminClient
from quire.stack.supervisor import Stack
from quire.testing.history import SystemAccess, check, gather_facts, verdicts_markdown
from quire.testing.history.workload import Progress, run_workload
from quire.testing.nemesis.clockskew import ClockSkew
from quire.testing.nemesis.diskfull import BLOB_DISK_FULL, TEMP_DISK_FULL, DiskFull
from quire.testing.nemesis.fault import Fault, FaultRecord
from quire.testing.nemesis.inflight import in_flight
from quire.testing.nemesis.stackcluster import StackCluster, nats_directory, service_directory
from quire.testing.smallfs import MIB
from quire.testing.soak import SOAK_ENV

pytestmark = [pytest.mark.stack, pytest.mark.fault]

CLIENTS = 2
JOBS_PER_CLIENT = 4
HOLD_SECONDS = 3.0
"""How long a fault lasts once struck."""
GRACE_SECONDS = 40.0
SEED = 42


async def _strike_and_heal(
    fault: Fault, cluster: StackCluster, target: str, progress: Progress
) -> FaultRecord:
    await progress.reached(progress.acknowledged + 1)  # a job in flight from here
    record = FaultRecord(fault.kind, target, time.monotonic())
    record.detail = await fault.strike(cluster, target)
    try:
        await asyncio.sleep(HOLD_SECONDS)  # the fault's length, not a wait for an event
    finally:
        await fault.heal(cluster, target)
        record.end = time.monotonic()
    return record


async def _run(
    tmp_path: Path,
    fault: Any,
    target: str,
    prepared: dict[str, str],
    env: dict[str, str],
) -> FaultRecord:
    root = tmp_path / "cluster"
    stack = Stack(
        root / "data",
        env={**SOAK_ENV, **env},
        service_env={service: prepared for service in ("validator", "audit") if prepared},
    )
    try:
        info = await asyncio.to_thread(stack.start)
        cluster = StackCluster(stack, root)
        assert target in fault.targets(cluster)
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            made = [await admin.create_tenant(f"nemesis-{n}") for n in range(CLIENTS)]
        tokens = {reply.tenant.name: reply.secret for reply in made}
        progress = Progress()
        striking = asyncio.create_task(_strike_and_heal(fault, cluster, target, progress))
        history = await run_workload(
            info.endpoints["admission"],
            [reply.secret for reply in made],
            tmp_path / "history",
            jobs_per_client=JOBS_PER_CLIENT,
            progress=progress,
            timeout=120,
        )
        record = await asyncio.wait_for(striking, timeout=60)
        facts = await gather_facts(
            SystemAccess.of_stack(info, tokens), history, tmp_path / "facts", grace=GRACE_SECONDS
        )
    finally:
        await asyncio.to_thread(stack.stop)
        if isinstance(fault, DiskFull):
            fault.release()
    verdicts = check(history, facts)
    print(verdicts_markdown(verdicts))
    print(f"{fault.kind} on {target}: {record.to_json()}")
    assert verdicts.ok, verdicts.summary()
    assert verdicts["ended"].checked == CLIENTS * JOBS_PER_CLIENT
    assert {r.state for r in facts.jobs.values()} == {"COMPLETED"}
    assert in_flight(history, record.start), "struck with jobs in flight"
    return record


async def test_a_full_temporary_disk_struck_by_the_nemesis(tmp_path: Path) -> None:
    fault = DiskFull(TEMP_DISK_FULL, size_bytes=32 * MIB)
    env = fault.prepare(service_directory(tmp_path / "cluster"), "validator")
    record = await _run(tmp_path, fault, "validator-1", {}, {**env, "QUIRE_BLOB_BACKEND": "nats"})
    assert int(record.detail["filled_bytes"]) > 0


async def test_a_full_jetstream_store_struck_by_the_nemesis(tmp_path: Path) -> None:
    fault = DiskFull(BLOB_DISK_FULL, size_bytes=256 * MIB)
    fault.prepare(nats_directory(tmp_path / "cluster"), "nats")
    record = await _run(tmp_path, fault, "nats-1", {}, {"QUIRE_BLOB_BACKEND": "nats"})
    assert int(record.detail["filled_bytes"]) > 0


async def test_a_skewed_clock_struck_by_the_nemesis(tmp_path: Path) -> None:
    fault = ClockSkew(seconds=300, rng=random.Random(SEED))
    prepared = fault.prepare(service_directory(tmp_path / "cluster"), "audit")
    record = await _run(tmp_path, fault, "audit-1", prepared, {})
    assert record.detail["how"] == "moved while running"
    assert record.detail["offset_seconds"] in ("+300", "-300")
