"""The history checker's real use (issue 42): at least 16 jobs from four
recording clients of two tenants through a private embedded stack, while
admission, the signer and audit are each SIGKILLed once with jobs in flight
(paced by the acknowledgements, each kill once the one before has been
recovered from and while at least two acknowledged jobs have not been seen
to end; the clients keep sending until the last kill is recovered from); afterwards the facts are gathered through the services' APIs and
every property of the checker holds. The report is printed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from quire.client import TenantAdminClient
from quire.stack.supervisor import Stack
from quire.testing.history import (
    History,
    Kind,
    SystemAccess,
    check,
    gather_facts,
    verdicts_markdown,
)
from quire.testing.history.workload import Progress, run_workload
from quire.testing.soak import SOAK_ENV

pytestmark = [pytest.mark.stack, pytest.mark.fault]

CLIENTS = 4
JOBS_PER_CLIENT = 4
KILLS = (("admission", 3), ("signer", 7), ("audit", 11))
"""Each victim, and how many submits must have been acknowledged before it dies."""
GRACE_SECONDS = 60.0


async def _kill(stack: Stack, service: str) -> float:
    """SIGKILL ``service``, wait until the supervisor has restarted it and the
    stack is healthy again; when it was killed (``time.monotonic()``)."""
    restarts = stack.restarts(service)
    killed = time.monotonic()
    stack.kill(service)
    for _ in range(600):
        if stack.restarts(service) > restarts:
            break
        await asyncio.sleep(0.1)
    await asyncio.to_thread(stack.wait_healthy)
    return killed


async def _killer(stack: Stack, progress: Progress, done: asyncio.Event) -> dict[str, float]:
    killed = {}
    try:
        for service, acknowledged in KILLS:
            # Two in flight: one may be between its end being seen and counted.
            await progress.reached(acknowledged, in_flight=2)
            killed[service] = await _kill(stack, service)
    finally:
        done.set()  # the clients finish their jobs and stop
    return killed


def _in_flight(history: History, moment: float) -> list[str]:
    """Jobs acknowledged before ``moment`` whose end a client saw after it."""
    acknowledged = {op.job: op.monotonic for op in history.of(Kind.ACCEPTED)}
    ended: dict[str, float] = {}
    for op in history.of(Kind.OBSERVED):
        if op.state in ("COMPLETED", "REJECTED", "FAILED", "CANCELLED"):
            ended.setdefault(op.job, op.monotonic)
    return sorted(
        job for job, at in acknowledged.items() if at < moment < ended.get(job, float("inf"))
    )


async def test_a_workload_through_kills_holds_every_property(tmp_path: Path) -> None:
    started = time.monotonic()
    stack = Stack(tmp_path / "stack", env=SOAK_ENV)
    info = await asyncio.to_thread(stack.start)
    try:
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            made = [await admin.create_tenant(f"history-{n}") for n in range(2)]
        tokens = {reply.tenant.name: reply.secret for reply in made}
        secrets = [made[index % len(made)].secret for index in range(CLIENTS)]
        progress = Progress()
        recovered = asyncio.Event()
        killing = asyncio.create_task(_killer(stack, progress, recovered))
        history = await run_workload(
            info.endpoints["admission"],
            secrets,
            tmp_path / "history",
            jobs_per_client=JOBS_PER_CLIENT,
            progress=progress,
            timeout=120,
            until=recovered,
        )
        killed = await asyncio.wait_for(killing, timeout=60)
        facts = await gather_facts(
            SystemAccess.of_stack(info, tokens), history, tmp_path / "facts", grace=GRACE_SECONDS
        )
    finally:
        await asyncio.to_thread(stack.stop)
    verdicts = check(history, facts)
    print(verdicts_markdown(verdicts))
    print(f"{time.monotonic() - started:.1f} s in all; kills at {killed}")
    assert verdicts.ok, verdicts.summary()
    jobs = len({op.job for op in history.of(Kind.ACCEPTED)})
    assert jobs >= CLIENTS * JOBS_PER_CLIENT
    assert verdicts["ended"].checked == jobs
    assert {record.state for record in facts.jobs.values()} == {"COMPLETED"}
    assert verdicts["one_signature"].checked == jobs, "every artifact was verified"
    assert facts.ledger.chains == len(tokens) and facts.ledger.checkpoints_checked > 0
    for service, moment in killed.items():
        assert _in_flight(history, moment), f"{service} died with no job in flight"
