"""Fairness benchmark (issue 18): a portfolio cannot starve a renewal, and
tenants' weights decide their shares of batch work. On the embedded stack:

1. Tenant B's interactive packets, one a second on the idle stack: their
   terminal latency (submit to the end WatchJob reports), p50/p95. Then
   tenant A submits a batch of BENCH_FAIRNESS_PACKETS packets (SubmitBatch)
   and B goes on sending one interactive packet a second for
   BENCH_FAIRNESS_SECONDS: B's p95 against its idle p95 (aim: within 2x) and
   A's batch progress over that time (aim: it keeps completing).
2. Tenants C and D, scheduling weights 3 and 1, each submit a batch at once;
   over BENCH_FAIRNESS_WINDOW_SECONDS, after BENCH_FAIRNESS_WARMUP_SECONDS,
   their completion rates and the ratio (aim: within 15 % of 3:1). Both
   batches must still be dispatching at the window's end, or the window
   measured a tail, not a share: the bench says so.

    make bench-fairness
    BENCH_FAIRNESS_PACKETS=2000 BENCH_FAIRNESS_SECONDS=60 make bench-fairness

Figures are printed, never asserted: they are wall-clock on whatever else
the machine is doing. The batches are cancelled once measured.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import grpc  # noqa: E402

from quire.admission.v1 import batch_pb2  # noqa: E402
from quire.client import AdmissionClient, PacketItem, TenantAdminClient  # noqa: E402
from quire.jobs import state_name  # noqa: E402
from quire.stack.supervisor import Stack, StackInfo  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402
from quire.type import job_pb2  # noqa: E402

PACKETS = int(os.environ.get("BENCH_FAIRNESS_PACKETS", "2000"))
SECONDS = float(os.environ.get("BENCH_FAIRNESS_SECONDS", "60"))
IDLE_PACKETS = int(os.environ.get("BENCH_FAIRNESS_IDLE_PACKETS", "20"))
WARMUP_SECONDS = float(os.environ.get("BENCH_FAIRNESS_WARMUP_SECONDS", "15"))
WINDOW_SECONDS = float(os.environ.get("BENCH_FAIRNESS_WINDOW_SECONDS", "60"))
WEIGHTS = (3, 1)
PAGES = 3
WAIT_SECONDS = 300.0


@dataclass(frozen=True)
class Tenant:
    name: str
    client: AdmissionClient
    packet: PacketItem
    """One uploaded source, the whole of each of its packets."""


@dataclass(frozen=True)
class Progress:
    """A batch's counts at one moment (GetBatch)."""

    at: float
    dispatched: int
    completed: int
    terminal: int
    packets: int


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


async def new_tenant(admin: TenantAdminClient, stack: Stack, label: str, weight: int) -> Tenant:
    """A tenant of its own (its own quota and share), one source uploaded."""
    reply = await admin.create_tenant(
        f"fairness-{label}-{uuid.uuid4().hex[:6]}", scheduling_weight=weight
    )
    client = AdmissionClient(stack.endpoints["admission"], reply.secret)
    folder = Path(tempfile.mkdtemp(prefix=f"fairness-{label}-"))
    texts = [f"tenant {label} page {page}" for page in range(PAGES)]
    source = await client.upload(write_text_pdf(folder / "packet.pdf", texts))
    return Tenant(reply.tenant.name, client, PacketItem("d0", source.sha256))


async def one_interactive(tenant: Tenant) -> tuple[float, str]:
    """Submit one interactive packet; seconds until WatchJob shows it ended, and how."""
    started = time.monotonic()
    try:
        job = await tenant.client.submit([tenant.packet], priority="interactive")
    except grpc.aio.AioRpcError as error:
        return time.monotonic() - started, f"refused {error.code().name}"
    ended = await tenant.client.wait(job.name, timeout=WAIT_SECONDS)
    return time.monotonic() - started, state_name(ended.state)


async def interactive_stream(tenant: Tenant, count: int) -> list[tuple[float, str]]:
    """``count`` packets, one a second (each followed on its own), as B sends them."""
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(one_interactive(tenant)))
        await asyncio.sleep(1.0)
    return list(await asyncio.gather(*tasks))


def latencies(outcomes: list[tuple[float, str]], label: str) -> list[float]:
    done = [seconds for seconds, state in outcomes if state == "COMPLETED"]
    others = sorted({state for _, state in outcomes if state != "COMPLETED"})
    print(
        f"  {label}: {len(done)}/{len(outcomes)} completed"
        + (f" (others: {', '.join(others)})" if others else "")
    )
    if done:
        print(
            f"    terminal latency p50 {ms(statistics.median(done))}  p95 {ms(p95(done))}"
            f"  max {ms(max(done))}"
        )
    return done


async def submit_batch(tenant: Tenant, count: int) -> str:
    manifest = job_pb2.Manifest(
        items=[
            job_pb2.ManifestItem(
                position=0, document_id=tenant.packet.document_id, sha256=tenant.packet.sha256
            )
        ]
    )
    packets = [batch_pb2.BatchPacket(bundle_id=f"p{i}", manifest=manifest) for i in range(count)]
    batch = await tenant.client.submit_batch(packets)
    return batch.name


async def progress(tenant: Tenant, batch: str) -> Progress:
    got = await tenant.client.get_batch(batch)
    completed = sum(c.count for c in got.job_counts if state_name(c.state) == "COMPLETED")
    return Progress(
        time.monotonic(), got.dispatched_count, completed, got.terminal_count, got.packet_count
    )


async def cancel(tenant: Tenant, batch: str) -> None:
    reply = await tenant.client.cancel_batch(batch)
    print(
        f"  {tenant.name}'s batch cancelled: {reply.not_dispatched_cancelled} not dispatched,"
        f" {reply.in_flight_finishing} finishing, {reply.already_terminal} already ended"
    )


async def settle(tenant: Tenant, batch: str, limit: float = WAIT_SECONDS) -> None:
    """Wait (bounded) until the cancelled batch's dispatched jobs have ended."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = await tenant.client.get_batch(batch)
        if got.HasField("finish_time"):
            return
        await asyncio.sleep(1.0)
    print(f"  {tenant.name}'s batch still finishing after {limit:.0f}s")


async def portfolio_against_renewals(admin: TenantAdminClient, stack: Stack) -> None:
    print(f"1. tenant B's interactive packets, idle and beside a {PACKETS}-packet batch")
    a = await new_tenant(admin, stack, "a", 1)
    b = await new_tenant(admin, stack, "b", 1)
    await one_interactive(b)  # the first job warms caches; not counted
    idle = latencies(await interactive_stream(b, IDLE_PACKETS), f"idle, {IDLE_PACKETS} packets")
    batch = await submit_batch(a, PACKETS)
    before = await progress(a, batch)
    busy_count = int(SECONDS)
    busy = latencies(
        await interactive_stream(b, busy_count), f"beside A's batch, {busy_count} packets"
    )
    after = await progress(a, batch)
    if idle and busy:
        ratio = p95(busy) / p95(idle)
        verdict = "within" if ratio <= 2 else "NOT within"
        print(f"    p95 beside the batch / idle p95: {ratio:.2f}x ({verdict} the 2x aim)")
    spent = after.at - before.at
    print(
        f"  A's batch over those {spent:.0f}s: dispatched {before.dispatched} -> {after.dispatched},"
        f" completed {before.completed} -> {after.completed}"
        f" ({(after.completed - before.completed) / spent:.2f} jobs/s) of {after.packets}"
    )
    await cancel(a, batch)
    await settle(a, batch)


async def weighted_shares(admin: TenantAdminClient, stack: Stack) -> None:
    heavy_weight, light_weight = WEIGHTS
    print(f"2. two batch tenants, weights {heavy_weight}:{light_weight}, {PACKETS} packets each")
    heavy = await new_tenant(admin, stack, "c", heavy_weight)
    light = await new_tenant(admin, stack, "d", light_weight)
    batches = await asyncio.gather(submit_batch(heavy, PACKETS), submit_batch(light, PACKETS))
    await asyncio.sleep(WARMUP_SECONDS)
    starts = await asyncio.gather(progress(heavy, batches[0]), progress(light, batches[1]))
    await asyncio.sleep(WINDOW_SECONDS)
    ends = await asyncio.gather(progress(heavy, batches[0]), progress(light, batches[1]))
    rates = []
    for label, weight, start, end in zip(("C", "D"), WEIGHTS, starts, ends, strict=True):
        rate = (end.completed - start.completed) / (end.at - start.at)
        rates.append(rate)
        backlog = "still dispatching" if end.dispatched < end.packets else "ALL DISPATCHED"
        print(
            f"  {label} (weight {weight}): {end.completed - start.completed} completed in"
            f" {end.at - start.at:.0f}s = {rate:.2f} jobs/s; {backlog}"
        )
    if rates[1] > 0:
        ratio = rates[0] / rates[1]
        off = abs(ratio / (heavy_weight / light_weight) - 1)
        verdict = "within" if off <= 0.15 else "NOT within"
        print(
            f"    ratio {ratio:.2f}:1, {off:.0%} off {heavy_weight}:{light_weight} ({verdict} 15 %)"
        )
    else:
        print("    D completed nothing in the window: no ratio")
    for tenant, batch in ((heavy, batches[0]), (light, batches[1])):
        await cancel(tenant, batch)


async def run() -> None:
    with tempfile.TemporaryDirectory(prefix="quire-fairness-") as folder:
        stack = Stack(Path(folder) / "stack")
        stack.start()
        try:
            info = StackInfo.read(stack.data_dir)
            async with TenantAdminClient(
                stack.endpoints["admission"], info.operator_token()
            ) as admin:
                await portfolio_against_renewals(admin, stack)
                await weighted_shares(admin, stack)
        finally:
            stack.stop()


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    asyncio.run(run())
