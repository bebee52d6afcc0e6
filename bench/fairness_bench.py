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
    BENCH_FAIRNESS_PARTS=1 make bench-fairness   # the first part alone
    BENCH_FAIRNESS_KEEP=/tmp/fair make bench-fairness   # keep the stack's logs

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
from quire.top.endpoints import stack_endpoints  # noqa: E402
from quire.top.scrape import Scrape, scrape_all  # noqa: E402
from quire.type import job_pb2  # noqa: E402

PACKETS = int(os.environ.get("BENCH_FAIRNESS_PACKETS", "2000"))
SECONDS = float(os.environ.get("BENCH_FAIRNESS_SECONDS", "60"))
IDLE_PACKETS = int(os.environ.get("BENCH_FAIRNESS_IDLE_PACKETS", str(int(SECONDS))))
WARMUP_SECONDS = float(os.environ.get("BENCH_FAIRNESS_WARMUP_SECONDS", "15"))
WINDOW_SECONDS = float(os.environ.get("BENCH_FAIRNESS_WINDOW_SECONDS", "60"))
PARTS = os.environ.get("BENCH_FAIRNESS_PARTS", "1,2").split(",")
WEIGHTS = (3, 1)
PAGES = 3
WAIT_SECONDS = 300.0
STAGES = ("validate", "assemble", "sign")
WAITS = ("queue_wait", "sandbox_wait")
PHASE = "quire_stage_phase_seconds"


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


@dataclass(frozen=True)
class Outcome:
    """One interactive packet: how it ended, and when (seconds after its submit)
    WatchJob showed each state it passed through."""

    state: str
    seconds: float
    seen: dict[str, float]


async def one_interactive(tenant: Tenant) -> Outcome:
    """Submit one interactive packet and watch it to its end."""
    started = time.monotonic()
    try:
        job = await tenant.client.submit([tenant.packet], priority="interactive")
    except grpc.aio.AioRpcError as error:
        return Outcome(f"refused {error.code().name}", time.monotonic() - started, {})
    seen: dict[str, float] = {}
    state = "WATCH_TIMED_OUT"
    async for change in tenant.client.watch_changes(job.name, timeout=WAIT_SECONDS):
        state = state_name(change.job.state)
        seen.setdefault(state, time.monotonic() - started)
    return Outcome(state, seen.get(state, time.monotonic() - started), seen)


async def interactive_stream(tenant: Tenant, count: int) -> list[Outcome]:
    """``count`` packets, one a second (each followed on its own), as B sends them."""
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(one_interactive(tenant)))
        await asyncio.sleep(1.0)
    return list(await asyncio.gather(*tasks))


def latencies(outcomes: list[Outcome], label: str) -> list[float]:
    completed = [outcome for outcome in outcomes if outcome.state == "COMPLETED"]
    done = [outcome.seconds for outcome in completed]
    others = sorted({o.state for o in outcomes if o.state != "COMPLETED"})
    print(
        f"  {label}: {len(done)}/{len(outcomes)} completed"
        + (f" (others: {', '.join(others)})" if others else "")
    )
    if done:
        print(
            f"    terminal latency p50 {ms(statistics.median(done))}  p95 {ms(p95(done))}"
            f"  max {ms(max(done))}"
        )
        marks = []
        for state in ("VALIDATING", "ASSEMBLING", "SIGNING", "COMMITTING", "COMPLETED"):
            times = [o.seen[state] for o in completed if state in o.seen]
            if times:
                marks.append(f"{state} {ms(statistics.mean(times))}")
        print("    mean time each state was seen: " + ", ".join(marks))
    return done


def phase_totals(scrapes: Sequence[Scrape]) -> dict[tuple[str, str, str, str], float]:
    """(stage, class, phase, sum|count) of the wait phases, over every process."""
    totals: dict[tuple[str, str, str, str], float] = {}
    for scrape in scrapes:
        for (name, labels), value in scrape.samples.items():
            if name not in (f"{PHASE}_sum", f"{PHASE}_count"):
                continue
            label = dict(labels)
            if label.get("phase") not in WAITS:
                continue
            key = (label["stage"], label["class"], label["phase"], name.rsplit("_", 1)[1])
            totals[key] = totals.get(key, 0.0) + value
    return totals


def print_waits(
    before: dict[tuple[str, str, str, str], float], after: dict[tuple[str, str, str, str], float]
) -> None:
    """Each stage's mean wait per class between two scrapes: on its queue, and
    for a sandbox worker in the job's lane."""
    for stage in STAGES:
        cells = []
        for priority in ("interactive", "batch"):
            for phase in WAITS:
                key = (stage, priority, phase)
                count = after.get((*key, "count"), 0.0) - before.get((*key, "count"), 0.0)
                total = after.get((*key, "sum"), 0.0) - before.get((*key, "sum"), 0.0)
                mean = ms(total / count) if count else "-"
                cells.append(f"{priority} {phase.removesuffix('_wait')} {mean}")
        print(f"    {stage:<9} mean wait: " + ", ".join(cells))


def waits_now(stack: Stack) -> dict[tuple[str, str, str, str], float]:
    return phase_totals(scrape_all(stack_endpoints(stack.data_dir))[1])


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
    waits_before = await asyncio.to_thread(waits_now, stack)
    busy_count = int(SECONDS)
    busy_outcomes = await interactive_stream(b, busy_count)
    busy = latencies(busy_outcomes, f"beside A's batch, {busy_count} packets")
    after = await progress(a, batch)
    slowest = sorted((o.seconds, i) for i, o in enumerate(busy_outcomes) if o.state == "COMPLETED")[
        -5:
    ]
    print(
        "    slowest, with the second of the batch each was sent in: "
        + ", ".join(f"{ms(seconds)} at {i}s" for seconds, i in reversed(slowest))
    )
    print_waits(waits_before, await asyncio.to_thread(waits_now, stack))
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
        # BENCH_FAIRNESS_KEEP=DIR keeps the stack's data (its logs) in DIR.
        stack = Stack(Path(os.environ.get("BENCH_FAIRNESS_KEEP") or folder) / "stack")
        stack.start()
        try:
            info = StackInfo.read(stack.data_dir)
            async with TenantAdminClient(
                stack.endpoints["admission"], info.operator_token()
            ) as admin:
                if "1" in PARTS:
                    await portfolio_against_renewals(admin, stack)
                if "2" in PARTS:
                    await weighted_shares(admin, stack)
        finally:
            stack.stop()


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    asyncio.run(run())
