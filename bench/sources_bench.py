"""Source slowdown benchmark (issue 19's "Slowdown"): one source system slows
from 200 ms to 6 s for a minute while jobs arrive steadily. Its circuit
breaker should open, the other system's jobs keep completing at their normal
rate, calls to the slow system stay bounded without synchronized retry
waves, and the validate queue's age recover within twice the slowdown's
length after it ends.

On the embedded stack (a temp dir) and an in-process ``SourceServer`` (a real
local HTTP server on its own threads), one tenant registers two systems:

- ``orders`` (``order-lines@1``): answers in 0.2 s throughout;
- ``tax`` (``tax-record@1``): 0.2 s, then 6 s during the slowdown, then 0.2 s.

Both are registered with a 2 s timeout (BENCH_SOURCES_TIMEOUT): a 6 s answer
is then a timeout, i.e. a failure the breaker counts, as a slow system is to
a caller that will not wait for it. (With a timeout above 6 s the slow calls
succeed, nothing opens, and each tax job holds a validator slot for 6 s.)

Jobs arrive in an open loop at BENCH_SOURCES_RATE jobs/s, alternating two
classes: "orders-only" (an uploaded one-page PDF cover + an orders
reference) and "tax" (cover + orders + tax references), each submitted
interactive with a budget of BENCH_SOURCES_BUDGET seconds and its own record
keys (so the server's call log maps calls to jobs). Phases: a baseline, the
slowdown, and a recovery window of up to 2x the slowdown under the same
arrivals, ended early once the validate queue's oldest-ready age has been
back at its baseline (and tax's breaker closed) for a while. Then every job
is watched to its end (bounded).

Every second the validator's /metrics is read (``quire_source_breaker_state``
for both systems, ``quire_queue_oldest_ready_age_seconds`` and
``quire_queue_pending_messages`` of validate/interactive, which the validator
itself refreshes every 5 s, ``quire_source_fetches_total``,
``quire_source_deferrals_total``). Each job keeps its submit time, its end
(the job's update_time once terminal), state and reason.

Printed: jobs per phase and class (completion rate, p50/p95 terminal
latency); tax's breaker timeline; calls to tax (totals against tax arrivals,
a per-bucket histogram, the largest 1 s burst, the spread of inter-call
gaps, the first call times of the slowdown); the validate queue's age; and
the backlog's age (the oldest job not yet ended, every second, from the
jobs' own submit and end times) and when it was back after the slowdown.
The queue gauge counts only messages waiting for a first delivery: a job
deferred for a source waits off the queue (a scheduled copy of its task,
``quire.workqueue.deferral``), so the backlog is the figure the "queue age
recovers" aim is read from.

    make bench-sources
    BENCH_SOURCES_RATE=4 BENCH_SOURCES_SLOW=30 make bench-sources
    QUIRE_SOURCE_BREAKER_OPEN_SECONDS=5 make bench-sources
    BENCH_SOURCES_PROFILE=tiny make bench-sources   # seconds-long phases (the test's)
    BENCH_SOURCES_KEEP=/tmp/src make bench-sources  # keep the stack's data and logs
    BENCH_SOURCES_JSON=/tmp/src.json make bench-sources  # also write a JSON summary

Knobs (profile defaults: full / tiny): BENCH_SOURCES_RATE (2 / 2),
BENCH_SOURCES_BASELINE seconds (30 / 3), BENCH_SOURCES_SLOW (60 / 8),
BENCH_SOURCES_RECOVERY (2x slow: 120 / 16), BENCH_SOURCES_BUDGET (30 / 15),
BENCH_SOURCES_TIMEOUT (2 / 2), BENCH_SOURCES_SLOW_DELAY (6 / 6); the stack's
QUIRE_SOURCE_BREAKER_FAILURES (5 / 3), QUIRE_SOURCE_BREAKER_OPEN_SECONDS
(10 / 2) and QUIRE_JOB_BUDGET_RESERVE_SECONDS (5 / 5) are read from the
environment when set. The tiny profile opens the breaker after 3 failures,
not 5, so that it opens well inside its 8 s slowdown on a busy machine, and
ends its recovery once the queue age has been back and the breaker closed
for 2 s (the full profile: 10 s).

Figures are printed, never asserted: they are wall-clock on whatever else
the machine is doing.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.jobs import TERMINAL_STATES, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.sourcerecords import TAX_RECORD
from quire.testing.sourceserver import Call, SourceServer
from quire.top.endpoints import Endpoint, stack_endpoints
from quire.top.scrape import Scrape, scrape_all

# -- settings ------------------------------------------------------------------

PROFILES: dict[str, dict[str, float]] = {
    "full": {
        "rate": 2.0,
        "baseline": 30.0,
        "slow": 60.0,
        "budget": 30.0,
        "timeout": 2.0,
        "slow_delay": 6.0,
        "breaker_failures": 5,
        "breaker_open": 10.0,
        "reserve": 5.0,
        "settle": 10.0,
    },
    "tiny": {
        "rate": 2.0,
        "baseline": 3.0,
        "slow": 8.0,
        "budget": 15.0,
        "timeout": 2.0,
        "slow_delay": 6.0,
        "breaker_failures": 3,
        "breaker_open": 2.0,
        "reserve": 5.0,
        "settle": 2.0,
    },
}
PROFILE_NAME = os.environ.get("BENCH_SOURCES_PROFILE", "full")
if PROFILE_NAME not in PROFILES:
    raise SystemExit(f"BENCH_SOURCES_PROFILE must be one of {', '.join(PROFILES)}")
_PROFILE = PROFILES[PROFILE_NAME]


def _knob(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value.strip() else float(default)


RATE = _knob("BENCH_SOURCES_RATE", _PROFILE["rate"])
BASELINE = _knob("BENCH_SOURCES_BASELINE", _PROFILE["baseline"])
SLOW = _knob("BENCH_SOURCES_SLOW", _PROFILE["slow"])
RECOVERY = _knob("BENCH_SOURCES_RECOVERY", 2 * SLOW)
BUDGET = _knob("BENCH_SOURCES_BUDGET", _PROFILE["budget"])
TIMEOUT = _knob("BENCH_SOURCES_TIMEOUT", _PROFILE["timeout"])
SLOW_DELAY = _knob("BENCH_SOURCES_SLOW_DELAY", _PROFILE["slow_delay"])
SETTLE = _PROFILE["settle"]
"""Recovery ends early once the queue age has been back (and tax's breaker
closed) for this long."""
FAST_DELAY = 0.2
STACK_SETTINGS = {
    name: f"{_knob(name, _PROFILE[key]):g}"
    for name, key in (
        ("QUIRE_SOURCE_BREAKER_FAILURES", "breaker_failures"),
        ("QUIRE_SOURCE_BREAKER_OPEN_SECONDS", "breaker_open"),
        ("QUIRE_JOB_BUDGET_RESERVE_SECONDS", "reserve"),
    )
}
"""The stack's settings of the run (the environment's, else the profile's)."""
JSON_PATH = os.environ.get("BENCH_SOURCES_JSON", "")
KEEP = os.environ.get("BENCH_SOURCES_KEEP", "")
SAMPLE_SECONDS = 1.0
WATCHERS = 64
"""Jobs watched at once; a job's end time is its own update_time, so a watch
that starts late does not move it."""
TRIES_PER_DELIVERY = 3  # SourceSettings.tries_per_delivery (a constant of the design)
BUCKET = 5.0 if SLOW >= 30 else 1.0
BAR_WIDTH = 40
TOKEN = "sources-bench-" + uuid.uuid4().hex
CLASSES = ("orders-only", "tax")
PHASES = ("baseline", "slowdown", "recovery")
STATE_LETTER = {0: "C", 1: "H", 2: "O"}
STATE_WORD = {0: "closed", 1: "half-open", 2: "open"}


def order_record(number: str) -> dict[str, object]:
    return {
        "number": number,
        "issued": "2026-11-01",
        "currency": "EUR",
        "lines": [
            {"description": "pallet wrap", "quantity": 2, "unit_price": "45.00", "amount": "90.00"},
            {"description": "freight", "quantity": 1, "unit_price": "100.00", "amount": "100.00"},
        ],
        "total": "190.00",
    }


# -- records ---------------------------------------------------------------------


@dataclass
class JobRecord:
    index: int
    cls: str
    key: str
    submitted: float
    """``time.time()`` just before SubmitJob."""
    name: str = ""
    ended: float | None = None
    """The job's update_time once terminal (``time.time()`` seconds)."""
    state: str = "PENDING"
    reason: str = ""

    @property
    def latency(self) -> float | None:
        return None if self.ended is None else max(0.0, self.ended - self.submitted)


@dataclass(frozen=True)
class Sample:
    at: float
    breaker: dict[str, int]
    age: float | None
    pending: float | None
    fetches: dict[str, float]
    """``system/outcome`` -> count, summed over validators."""
    deferrals: dict[str, float]


@dataclass
class Marks:
    """The phase boundaries, ``time.time()`` seconds."""

    baseline: float = 0.0
    slowdown: float = math.inf
    recovery: float = math.inf
    end: float = math.inf

    def phase(self, at: float) -> str:
        if at < self.slowdown:
            return "baseline"
        if at < self.recovery:
            return "slowdown"
        return "recovery"

    def span(self, phase: str) -> tuple[float, float]:
        return {
            "baseline": (self.baseline, self.slowdown),
            "slowdown": (self.slowdown, self.recovery),
            "recovery": (self.recovery, self.end),
        }[phase]


@dataclass
class Run:
    server: SourceServer
    client: AdmissionClient
    cover: str
    endpoints: tuple[Endpoint, ...]
    marks: Marks = field(default_factory=Marks)
    jobs: list[JobRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    tasks: list[asyncio.Task[JobRecord]] = field(default_factory=list)
    watchers: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(WATCHERS))
    threshold: float | None = None
    stop_arrivals: asyncio.Event = field(default_factory=asyncio.Event)
    recovery_ended_early: bool = False


# -- small helpers -------------------------------------------------------------------


def pct(values: Sequence[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-q * len(ordered) // 100) - 1)]


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _gauge(scrapes: Iterable[Scrape], name: str, **labels: str) -> float | None:
    wanted = set(labels.items())
    found = [
        value
        for scrape in scrapes
        for (sample, sample_labels), value in scrape.samples.items()
        if sample == name and wanted <= set(sample_labels)
    ]
    return max(found) if found else None


def _counters(scrapes: Iterable[Scrape], name: str, keys: Sequence[str]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for scrape in scrapes:
        for (sample, sample_labels), value in scrape.samples.items():
            if sample != name:
                continue
            label = dict(sample_labels)
            key = "/".join(label.get(k, "") for k in keys)
            totals[key] = totals.get(key, 0.0) + value
    return totals


def take_sample(endpoints: tuple[Endpoint, ...]) -> Sample:
    _, scrapes = scrape_all(endpoints)
    up = [s for s in scrapes if s.up]
    breaker = {}
    for system in ("tax", "orders"):
        state = _gauge(up, "quire_source_breaker_state", system=system)
        breaker[system] = int(state) if state is not None else 0
    return Sample(
        at=time.time(),
        breaker=breaker,
        age=_gauge(
            up, "quire_queue_oldest_ready_age_seconds", stage="validate", **{"class": "interactive"}
        ),
        pending=_gauge(
            up, "quire_queue_pending_messages", stage="validate", **{"class": "interactive"}
        ),
        fetches=_counters(up, "quire_source_fetches_total", ("system", "outcome")),
        deferrals=_counters(up, "quire_source_deferrals_total", ("system",)),
    )


# -- driving the run ---------------------------------------------------------------


async def one_job(run: Run, index: int, cls: str, *, warm: bool = False) -> JobRecord:
    """Serve this job's records, submit it, and watch it to its end."""
    key = f"orders/{'W' if warm else 'O'}-{index}"
    run.server.put_json("orders", key, order_record(key.rsplit("/", 1)[1]))
    items = [PacketItem("cover", run.cover), PacketItem.reference("order", "orders", key)]
    if cls == "tax":
        run.server.put_json("tax", key, TAX_RECORD)
        items.append(PacketItem.reference("tax", "tax", key))
    record = JobRecord(index, cls, key, time.time())
    if not warm:
        run.jobs.append(record)
    try:
        job = await run.client.submit(items, priority="interactive", budget=BUDGET)
    except grpc.aio.AioRpcError as error:
        record.state, record.reason, record.ended = "REFUSED", error.code().name, time.time()
        return record
    record.name = job.name
    async with run.watchers:
        try:
            job = await run.client.wait(job.name, timeout=BUDGET + 60)
        except (TimeoutError, grpc.aio.AioRpcError) as error:
            record.state, record.reason = "UNENDED", type(error).__name__
            return record
    record.state, record.reason = state_name(job.state), job.reason_code
    if record.state in TERMINAL_STATES:
        record.ended = job.update_time.ToNanoseconds() / 1e9
    return record


async def sampler(run: Run) -> None:
    while True:
        started = time.monotonic()
        run.samples.append(await asyncio.to_thread(take_sample, run.endpoints))
        await asyncio.sleep(max(0.0, SAMPLE_SECONDS - (time.monotonic() - started)))


async def arrivals(run: Run) -> None:
    """Open loop: job ``i`` at ``start + i / RATE``, classes alternating."""
    start = run.marks.baseline
    index = 0
    while not run.stop_arrivals.is_set():
        due = start + index / RATE
        wait = due - time.time()
        if wait > 0:
            try:
                await asyncio.wait_for(run.stop_arrivals.wait(), wait)
                break
            except TimeoutError:
                pass
        cls = CLASSES[index % 2]
        run.tasks.append(asyncio.create_task(one_job(run, index, cls)))
        index += 1


def queue_ages(samples: Iterable[Sample], start: float, end: float) -> list[float]:
    return [s.age for s in samples if start <= s.at < end and s.age is not None]


async def director(run: Run) -> None:
    """The phases: slow tax down, bring it back, end the recovery window."""
    marks = run.marks
    # The marks are the scheduled instants (so buckets line up with them); the
    # server is told at once, a few milliseconds late at most.
    marks.slowdown = marks.baseline + BASELINE
    await asyncio.sleep(max(0.0, marks.slowdown - time.time()))
    run.server.behave("tax", delay=SLOW_DELAY)
    late = time.time() - marks.slowdown
    print(
        f"  +{BASELINE:5.1f}s slowdown: tax answers in {SLOW_DELAY:g}s"
        + (f" (told {late:.2f}s late)" if late > 0.1 else "")
    )
    baseline_ages = queue_ages(run.samples, marks.baseline, marks.slowdown)
    run.threshold = max(1.5 * pct(baseline_ages, 95), 1.0) if baseline_ages else 1.0
    marks.recovery = marks.slowdown + SLOW
    await asyncio.sleep(max(0.0, marks.recovery - time.time()))
    run.server.behave("tax", delay=FAST_DELAY)
    late = time.time() - marks.recovery
    print(
        f"  +{BASELINE + SLOW:5.1f}s recovery: tax answers in {FAST_DELAY:g}s"
        + (f" (told {late:.2f}s late)" if late > 0.1 else "")
    )
    limit = marks.recovery + RECOVERY
    settled_since: float | None = None
    while time.time() < limit:
        await asyncio.sleep(SAMPLE_SECONDS)
        latest = run.samples[-1] if run.samples else None
        if latest is None or latest.at < marks.recovery:
            continue
        back = (
            latest.age is not None
            and latest.age <= (run.threshold or 1.0)
            and latest.breaker["tax"] == 0
        )
        if not back:
            settled_since = None
            continue
        settled_since = settled_since or latest.at
        if latest.at - settled_since >= SETTLE:
            run.recovery_ended_early = True
            break
    marks.end = time.time()
    run.stop_arrivals.set()
    print(
        f"  +{marks.end - marks.baseline:5.1f}s arrivals stop"
        + (
            f" (queue age back and breaker closed for {SETTLE:g}s)"
            if run.recovery_ended_early
            else ""
        )
    )


# -- the report --------------------------------------------------------------------------


def phase_of_jobs(run: Run, phase: str, cls: str) -> list[JobRecord]:
    return [j for j in run.jobs if j.cls == cls and run.marks.phase(j.submitted) == phase]


@dataclass(frozen=True)
class ClassRow:
    """One class's jobs submitted in one phase, and its completions in it."""

    seconds: float
    submitted: int
    completed: int
    failed: dict[str, int]
    """FAILED jobs by reason."""
    other: dict[str, int]
    """Neither COMPLETED nor FAILED, by state and reason."""
    completions_in_phase: int
    """Jobs of the class (submitted whenever) that completed inside the phase."""
    completion_rate: float
    arrival_rate: float
    p50: float | None
    p95: float | None
    max: float | None


Table = dict[str, dict[str, ClassRow]]


def class_table(run: Run) -> Table:
    table: Table = {}
    for phase in PHASES:
        start, end = run.marks.span(phase)
        length = max(end - start, 1e-9)
        for cls in CLASSES:
            jobs = phase_of_jobs(run, phase, cls)
            done = [j for j in jobs if j.state == "COMPLETED"]
            failed = Counter(j.reason or "?" for j in jobs if j.state == "FAILED")
            other = Counter(
                f"{j.state} {j.reason}".strip()
                for j in jobs
                if j.state not in ("COMPLETED", "FAILED")
            )
            ended_in = [
                j
                for j in run.jobs
                if j.cls == cls
                and j.state == "COMPLETED"
                and j.ended is not None
                and start <= j.ended < end
            ]
            latencies = [j.latency for j in done if j.latency is not None]
            table.setdefault(phase, {})[cls] = ClassRow(
                seconds=round(length, 2),
                submitted=len(jobs),
                completed=len(done),
                failed=dict(failed),
                other=dict(other),
                completions_in_phase=len(ended_in),
                completion_rate=round(len(ended_in) / length, 3),
                arrival_rate=round(len(jobs) / length, 3),
                p50=round(statistics.median(latencies), 3) if latencies else None,
                p95=round(pct(latencies, 95), 3) if latencies else None,
                max=round(max(latencies), 3) if latencies else None,
            )
    return table


def print_jobs(run: Run, table: Table) -> dict[str, object]:
    print()
    print("1. jobs by phase and class")
    print(
        "   (counted by submit time; done/s = completions that ended inside the phase"
        " / its length; latency = submit to the job's terminal update_time)"
    )
    header = (
        f"   {'phase':<9} {'len':>5}  {'class':<11} {'sub':>4} {'done':>4} {'fail':>4}"
        f"  {'done/s':>6}  {'p50':>6}  {'p95':>6}  {'max':>6}  failed by reason / other"
    )
    print(header)
    for phase in PHASES:
        for cls in CLASSES:
            row = table[phase][cls]
            why = ", ".join(
                f"{reason} {n}" for reason, n in sorted({**row.failed, **row.other}.items())
            )
            print(
                f"   {phase:<9} {row.seconds:>4.0f}s  {cls:<11} {row.submitted:>4}"
                f" {row.completed:>4} {sum(row.failed.values()):>4}"
                f"  {row.completion_rate:>6.2f}  {secs(row.p50):>6}"
                f"  {secs(row.p95):>6}  {secs(row.max):>6}  {why or '-'}"
            )
    base, slow = table["baseline"]["orders-only"], table["slowdown"]["orders-only"]
    rate_ratio = slow.completion_rate / base.completion_rate if base.completion_rate else None
    p95_ratio = slow.p95 / base.p95 if slow.p95 is not None and base.p95 else None
    print(
        f"   orders-only during the slowdown: {slow.completion_rate:.2f} jobs/s against"
        f" {base.completion_rate:.2f} at baseline"
        + (f" ({rate_ratio:.0%})" if rate_ratio is not None else "")
        + f"; p95 {secs(slow.p95)} against {secs(base.p95)}"
        + (f" ({p95_ratio:.2f}x)" if p95_ratio is not None else "")
        + " (aim: the normal rate)"
    )
    slowest = sorted(
        (j for j in phase_of_jobs(run, "slowdown", "orders-only") if j.latency is not None),
        key=lambda j: j.latency or 0.0,
    )[-5:]
    if slowest:
        print(
            "   slowest orders-only of the slowdown (latency at submit second): "
            + ", ".join(
                f"{secs(j.latency)} at +{j.submitted - run.marks.slowdown:.0f}s"
                for j in reversed(slowest)
            )
        )
    return {"orders_rate_ratio": rate_ratio, "orders_p95_ratio": p95_ratio}


def transitions(run: Run, system: str) -> list[tuple[float, int]]:
    seen: list[tuple[float, int]] = []
    for sample in run.samples:
        state = sample.breaker[system]
        if not seen or seen[-1][1] != state:
            seen.append((sample.at, state))
    return seen


def print_breaker(run: Run, calls: list[Call]) -> dict[str, object]:
    marks = run.marks
    print()
    print(
        '2. tax\'s breaker (quire_source_breaker_state{system="tax"}, sampled every'
        f" {SAMPLE_SECONDS:g}s; times from the slowdown's start)"
    )
    changes = transitions(run, "tax")
    print(
        "   "
        + (
            ", ".join(f"{at - marks.slowdown:+.1f}s {STATE_WORD[state]}" for at, state in changes)
            or "no samples"
        )
    )
    opened = next((at for at, state in changes if state == 2 and at >= marks.slowdown), None)
    closed = None
    if opened is not None:
        closed = next(
            (
                s.at
                for s in run.samples
                if s.at >= max(marks.recovery, opened) and s.breaker["tax"] == 0
            ),
            None,
        )
    half_opens = sum(
        1 for at, state in changes if state == 1 and opened is not None and at >= opened
    )
    # Calls let through a breaker that is not closed are its trials; after the
    # slowdown the closing is known to a second only, so trials are counted
    # while tax was slow.
    trials = [c for c in calls if opened is not None and opened <= c.at < marks.recovery]
    opened_after = None if opened is None else opened - marks.slowdown
    closed_after = None if closed is None else closed - marks.recovery
    print(
        "   opened "
        + (f"{opened_after:.1f}s after the slowdown began" if opened_after is not None else "NEVER")
        + f"; half-open seen {half_opens} times; {len(trials)} calls let through it while"
        " tax was slow (trials)"
        + (
            f"; closed {closed_after:.1f}s after the slowdown ended"
            if closed_after is not None
            else ("; never closed again" if opened is not None else "")
        )
    )
    orders_max = max((s.breaker["orders"] for s in run.samples), default=0)
    print(f"   orders' breaker: worst state seen {STATE_WORD[orders_max]}")
    failures = ending_at_the_edge(run, calls, closed)
    outcome_rows = []
    for phase in PHASES:
        start, end = marks.span(phase)
        before = [s for s in run.samples if s.at <= start]
        inside = [s for s in run.samples if s.at <= end]
        first = before[-1] if before else (run.samples[0] if run.samples else None)
        last = inside[-1] if inside else None
        if first is None or last is None:
            continue
        deltas = {
            key.split("/", 1)[1]: last.fetches.get(key, 0.0) - first.fetches.get(key, 0.0)
            for key in last.fetches
            if key.startswith("tax/")
        }
        deferred = last.deferrals.get("tax", 0.0) - first.deferrals.get("tax", 0.0)
        cells = ", ".join(f"{k} {v:.0f}" for k, v in sorted(deltas.items()) if v) or "none"
        outcome_rows.append({"phase": phase, "outcomes": deltas, "deferrals": deferred})
        print(f"   {phase:<9} tax fetch outcomes: {cells}; deliveries deferred {deferred:.0f}")
    return {
        "timeline": [[round(at - marks.slowdown, 2), state] for at, state in changes],
        "opened_after_slowdown_start": opened_after,
        "closed_after_slowdown_end": closed_after,
        "half_open_seen": half_opens,
        "trials": len(trials),
        "orders_worst_state": orders_max,
        "outcomes": outcome_rows,
        "tax_failures": failures,
    }


def ending_at_the_edge(run: Run, calls: list[Call], closed: float | None) -> dict[str, object]:
    """How the failed tax jobs ended: at their fetch deadline (budget minus
    the reserve) or before it; and, at the edge, after tax's breaker had
    closed again and without a call in their last moments."""
    reserve = float(STACK_SETTINGS["QUIRE_JOB_BUDGET_RESERVE_SECONDS"])
    edge = BUDGET - reserve
    failed = [j for j in run.jobs if j.cls == "tax" and j.state == "FAILED"]
    at_edge = [j for j in failed if (j.latency or 0.0) >= edge - 1.0]
    after_close = [j for j in at_edge if closed is not None and (j.ended or 0.0) >= closed]
    no_call = [
        j
        for j in at_edge
        if not any(c.key == j.key and (j.ended or 0.0) - 1.5 <= c.at for c in calls)
    ]
    early = Counter(j.reason for j in failed if j not in at_edge)
    edge_reasons = Counter(j.reason for j in at_edge)
    late_reasons = Counter(j.reason for j in after_close)

    def reasons(counts: Counter[str]) -> str:
        return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())) or "-"

    if failed:
        print(
            f"   tax jobs failed: {len(failed)}; {len(failed) - len(at_edge)} before their fetch"
            f" deadline ({reasons(early)}); {len(at_edge)} at it ({edge:g}s after submit ="
            f" budget - reserve, within 1s: {reasons(edge_reasons)}), {len(no_call)} of these"
            f" without a call in their last 1.5s, {len(after_close)} after tax's breaker had"
            f" closed again ({reasons(late_reasons)})"
        )
    return {
        "failed": len(failed),
        "at_fetch_deadline": len(at_edge),
        "at_fetch_deadline_without_a_call": len(no_call),
        "at_fetch_deadline_after_breaker_closed": len(after_close),
        "after_breaker_closed_reasons": dict(late_reasons),
        "earlier": dict(early),
    }


def cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.mean(values)
    return statistics.stdev(values) / mean if mean > 0 else None


def print_calls(run: Run, calls: list[Call], orders_calls: list[Call]) -> dict[str, object]:
    marks = run.marks
    in_slow = [c for c in calls if marks.slowdown <= c.at < marks.recovery]
    tax_jobs_slow = phase_of_jobs(run, "slowdown", "tax")
    per_job = Counter(c.key for c in in_slow)
    keys_slow = {j.key for j in tax_jobs_slow}
    per_slow_job = [
        sum(1 for c in calls if c.key == j.key) for j in tax_jobs_slow
    ]  # every call of the job, in whichever phase
    print()
    print("3. calls to tax (the source server's log, by arrival time)")
    print(
        f"   during the slowdown: {len(in_slow)} calls for {len(tax_jobs_slow)} tax jobs that"
        f" arrived in it ({len(in_slow) / max(1, len(tax_jobs_slow)):.2f} a job; bound"
        f" {TRIES_PER_DELIVERY} tries x jobs = {TRIES_PER_DELIVERY * len(tax_jobs_slow)});"
        f" {len(per_job)} distinct jobs called"
        f" ({sum(1 for k in per_job if k not in keys_slow)} of them arrived before it)"
    )
    if per_slow_job:
        print(
            f"   calls per tax job of the slowdown, whole run: max {max(per_slow_job)},"
            f" mean {statistics.mean(per_slow_job):.2f},"
            f" {sum(1 for n in per_slow_job if n == 0)} never called"
        )
    for phase in PHASES:
        start, end = marks.span(phase)
        n_tax = sum(1 for c in calls if start <= c.at < end)
        n_orders = sum(1 for c in orders_calls if start <= c.at < end)
        print(
            f"   {phase:<9} tax {n_tax:>4} calls ({n_tax / max(end - start, 1e-9):.2f}/s),"
            f" orders {n_orders:>4} calls ({n_orders / max(end - start, 1e-9):.2f}/s)"
        )
    # one line per bucket, with the context that explains it
    print(
        f"   per {BUCKET:g}s bucket from the slowdown's start: calls to tax (bar); tax's breaker"
        " states sampled in it (C closed, H half-open, O open); validate queue age (max);"
        " jobs completed orders-only/tax; tax jobs failed; tax jobs waiting at its end"
    )
    print(
        f"   {'from':>7} {'phase':<5} {'calls':>5} {'':<{BAR_WIDTH}} {'brk':<3} {'age':>6}"
        f" {'done':>7} {'fail':>4} {'wait':>4}"
    )
    end = max(marks.end, max((c.at for c in calls), default=marks.end))
    first_bucket = math.floor((marks.baseline - marks.slowdown) / BUCKET + 1e-6)
    last_bucket = math.ceil((end - marks.slowdown) / BUCKET - 1e-6)
    buckets = range(first_bucket, last_bucket)
    counts = {
        b: sum(
            1
            for c in calls
            if marks.slowdown + b * BUCKET <= c.at < marks.slowdown + (b + 1) * BUCKET
        )
        for b in buckets
    }
    peak = max(counts.values(), default=1) or 1
    histogram = []
    for b in buckets:
        lo, hi = marks.slowdown + b * BUCKET, marks.slowdown + (b + 1) * BUCKET
        inside = [s for s in run.samples if lo <= s.at < hi]
        states = "".join(STATE_LETTER[st] for st in sorted({s.breaker["tax"] for s in inside}))
        ages = [s.age for s in inside if s.age is not None]
        done = Counter(
            j.cls for j in run.jobs if j.state == "COMPLETED" and j.ended and lo <= j.ended < hi
        )
        fails = sum(
            1
            for j in run.jobs
            if j.cls == "tax" and j.state == "FAILED" and j.ended and lo <= j.ended < hi
        )
        waiting = sum(
            1
            for j in run.jobs
            if j.cls == "tax" and j.submitted < hi and (j.ended is None or j.ended >= hi)
        )
        count = counts[b]
        bar = "#" * math.ceil(count / peak * BAR_WIDTH) if count else ""
        done_cell = f"{done['orders-only']}/{done['tax']}"
        print(
            f"   {b * BUCKET:+6.0f}s {marks.phase((lo + hi) / 2)[:4]:<5} {count:>5}"
            f" {bar:<{BAR_WIDTH}} {states or '-':<3} {secs(max(ages)) if ages else '-':>6}"
            f" {done_cell:>7} {fails or '':>4} {waiting:>4}"
        )
        histogram.append(
            {
                "from": b * BUCKET,
                "calls": count,
                "breaker": states,
                "completions": dict(done),
                "tax_failed": fails,
                "tax_waiting": waiting,
            }
        )
    seconds = Counter(math.floor(c.at - marks.slowdown) for c in in_slow)
    base_seconds = Counter(
        math.floor(c.at - marks.slowdown) for c in calls if c.at < marks.slowdown
    )
    gaps = [b.at - a.at for a, b in zip(in_slow, in_slow[1:], strict=False)]
    wave_cv = cv(gaps)
    after_seconds = Counter(
        math.floor(c.at - marks.slowdown) for c in calls if c.at >= marks.recovery
    )
    max_second = max(seconds.values(), default=0)
    print(
        f"   waves: at most {max_second} calls in any 1s of the slowdown (baseline:"
        f" {max(base_seconds.values(), default=0)}; after it, deferred jobs coming back:"
        f" {max(after_seconds.values(), default=0)}); inter-call gaps in the slowdown: "
        + (
            f"mean {statistics.mean(gaps):.2f}s, min {min(gaps):.2f}s, CV {wave_cv:.2f}"
            if gaps and wave_cv is not None
            else "too few calls"
        )
    )
    first = [round(c.at - marks.slowdown, 2) for c in in_slow[:20]]
    print(
        "   first calls of the slowdown (arrival, s from its start): "
        + (" ".join(f"{c.at - marks.slowdown:.2f}" for c in in_slow[:20]) or "none")
    )
    return {
        "tax_calls_in_slowdown": len(in_slow),
        "tax_jobs_in_slowdown": len(tax_jobs_slow),
        "max_calls_one_job_of_slowdown": max(per_slow_job, default=0),
        "max_calls_in_one_second_slowdown": max_second,
        "max_calls_in_one_second_baseline": max(base_seconds.values(), default=0),
        "max_calls_in_one_second_after": max(after_seconds.values(), default=0),
        "gap_cv_slowdown": wave_cv,
        "first_calls_slowdown": first,
        "all_tax_calls": [[round(c.at - marks.slowdown, 3), c.status, c.key] for c in calls],
        "histogram": histogram,
    }


def print_queue(run: Run) -> dict[str, object]:
    marks = run.marks
    base = queue_ages(run.samples, marks.baseline, marks.slowdown)
    slow = queue_ages(run.samples, marks.slowdown, marks.recovery)
    after = [s for s in run.samples if s.at >= marks.recovery and s.age is not None]
    threshold = run.threshold if run.threshold is not None else 1.0
    base_p95 = pct(base, 95) if base else None
    pending = [s.pending for s in run.samples if s.pending is not None]
    slow_pending = [
        s.pending
        for s in run.samples
        if s.pending is not None and marks.slowdown <= s.at < marks.recovery
    ]
    recovered: float | None = None
    for i, sample in enumerate(after):
        if all(s.age is not None and s.age <= threshold for s in after[i:]):
            recovered = max(0.0, sample.at - marks.recovery)
            break
    aim = 2 * SLOW
    print()
    print(
        "4. validate queue, interactive: oldest ready age (the validator refreshes the gauge"
        " every 5s)"
    )
    print(
        f"   baseline p95 {secs(base_p95)}; max during the slowdown {secs(max(slow) if slow else None)}"
        f" (pending max {max(slow_pending) if slow_pending else '-'}; whole run"
        f" {max(pending) if pending else '-'}); threshold max(1.5 x baseline p95, 1s) = {threshold:.2f}s"
    )
    if recovered is None:
        verdict = "NOT back by the end of the window"
    else:
        verdict = "within" if recovered <= aim else "NOT within"
    print(
        "   back at or below it (and staying there) "
        + (f"{recovered:.1f}s after the slowdown ended" if recovered is not None else "never")
        + f" ({verdict} the aim of {aim:.0f}s = 2x the slowdown);"
        f" recovery window {marks.end - marks.recovery:.0f}s"
        + (" (ended early)" if run.recovery_ended_early else "")
    )
    print(
        "   (a job deferred for a source waits off the queue, as a scheduled copy, not as a"
        " ready message: the gauge does not count it; see the tax jobs waiting in section 3)"
    )
    return {
        "baseline_p95": base_p95,
        "slowdown_max": max(slow) if slow else None,
        "threshold": threshold,
        "recovered_after": recovered,
        "aim": aim,
        "slowdown_pending_max": max(slow_pending) if slow_pending else None,
    }


def oldest_unfinished(jobs: Sequence[JobRecord], at: float) -> float:
    """Seconds the oldest job submitted by ``at`` and not ended by then had
    waited: the backlog's age as clients see it, deferred jobs included
    (which the queue gauge does not count: they wait as redeliveries)."""
    waiting = [at - j.submitted for j in jobs if j.submitted <= at and (j.ended or math.inf) > at]
    return max(waiting, default=0.0)


def print_backlog(run: Run) -> dict[str, object]:
    marks = run.marks
    end = max((j.ended or 0.0) for j in run.jobs) if run.jobs else marks.end
    ticks = [marks.baseline + i for i in range(int(max(0.0, end - marks.baseline)) + 1)]
    ages = [(t, oldest_unfinished(run.jobs, t)) for t in ticks]
    warm = marks.baseline + min(5.0, BASELINE / 2)  # past the first arrivals
    base = [a for t, a in ages if warm <= t < marks.slowdown]
    slow = [a for t, a in ages if marks.slowdown <= t < marks.recovery]
    base_p95 = pct(base, 95) if base else None
    threshold = max(1.5 * (base_p95 or 0.0), 1.0)
    after = [(t, a) for t, a in ages if t >= marks.recovery and t <= marks.end]
    recovered: float | None = None
    for i, (t, _) in enumerate(after):
        if all(a <= threshold for _, a in after[i:]):
            recovered = max(0.0, t - marks.recovery)
            break
    aim = 2 * SLOW
    verdict = (
        "never back in the window"
        if recovered is None
        else f"back {recovered:.1f}s after the slowdown ended"
        + (" (within" if recovered <= aim else " (NOT within")
        + f" the aim of {aim:.0f}s = 2x the slowdown)"
    )
    print()
    print("5. backlog: the oldest job not yet ended, deferred ones included (every second)")
    print(
        f"   baseline p95 {secs(base_p95)}; max during the slowdown {secs(max(slow) if slow else None)};"
        f" threshold max(1.5 x baseline p95, 1s) = {threshold:.2f}s; {verdict}"
    )
    return {
        "baseline_p95": base_p95,
        "slowdown_max": max(slow) if slow else None,
        "threshold": threshold,
        "recovered_after": recovered,
        "aim": aim,
    }


def report(run: Run, header: dict[str, object]) -> dict[str, object]:
    calls = run.server.calls("tax")
    orders_calls = run.server.calls("orders")
    table = class_table(run)
    summary: dict[str, object] = {"settings": header}
    summary["orders_only"] = print_jobs(run, table)
    summary["classes"] = {
        phase: {cls: asdict(row) for cls, row in rows.items()} for phase, rows in table.items()
    }
    summary["breaker"] = print_breaker(run, calls)
    summary["calls"] = print_calls(run, calls, orders_calls)
    summary["queue"] = print_queue(run)
    summary["backlog"] = print_backlog(run)
    marks = run.marks
    summary["phases"] = {
        phase: [round(a - marks.slowdown, 3), round(b - marks.slowdown, 3)]
        for phase, (a, b) in ((p, marks.span(p)) for p in PHASES)
    }
    summary["jobs"] = [
        {
            **{k: v for k, v in asdict(j).items() if k not in ("submitted", "ended")},
            "phase": marks.phase(j.submitted),
            "submitted": round(j.submitted - marks.slowdown, 3),
            "ended": None if j.ended is None else round(j.ended - marks.slowdown, 3),
        }
        for j in run.jobs
    ]
    return summary


# -- the whole run -----------------------------------------------------------------------


def settings_header() -> dict[str, object]:
    return {
        "profile": PROFILE_NAME,
        "rate": RATE,
        "baseline": BASELINE,
        "slowdown": SLOW,
        "recovery_max": RECOVERY,
        "settle": SETTLE,
        "budget": BUDGET,
        "timeout": TIMEOUT,
        "fast_delay": FAST_DELAY,
        "slow_delay": SLOW_DELAY,
        **STACK_SETTINGS,
    }


async def setup(stack: Stack, server: SourceServer, folder: Path) -> tuple[AdmissionClient, str]:
    info = StackInfo.read(stack.data_dir)
    token_file = folder / "credentials" / "source-token"
    token_file.write_text(TOKEN + "\n")
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        made = await admin.create_tenant(f"sources-bench-{uuid.uuid4().hex[:6]}")
        for system, schema in (("orders", "order-lines@1"), ("tax", "tax-record@1")):
            server.require_token(system, TOKEN)
            server.behave(system, delay=FAST_DELAY)
            await admin.put_source_system(
                made.tenant.name,
                system,
                base_url=server.base_url(system),
                credential_ref=f"file:{token_file}",
                timeout=TIMEOUT,
                schema=schema,
            )
    client = AdmissionClient(info.endpoints["admission"], made.secret)
    cover = write_text_pdf(folder / "cover.pdf", ["Cover letter"])
    digest = (await client.upload(cover)).sha256
    return client, digest


async def drive(stack: Stack, server: SourceServer, folder: Path) -> dict[str, object]:
    client, cover = await setup(stack, server, folder)
    endpoints = tuple(e for e in stack_endpoints(stack.data_dir) if e.service == "validator")
    run = Run(server, client, cover, endpoints)
    try:
        print("warm-up: one job of each class (not counted)")
        for index, cls in enumerate(CLASSES):
            warm = await one_job(run, index, cls, warm=True)
            print(f"  {cls}: {warm.state} {warm.reason} in {secs(warm.latency)}")
        for system in ("orders", "tax"):
            server.behave(system, delay=FAST_DELAY)  # fail_times etc. reset; calls start now
        sampling = asyncio.create_task(sampler(run))
        run.marks.baseline = time.time()
        print(
            f"phases: baseline {BASELINE:g}s, slowdown {SLOW:g}s, recovery up to {RECOVERY:g}s;"
            f" {RATE:g} jobs/s"
        )
        arriving = asyncio.create_task(arrivals(run))
        await director(run)
        await arriving
        print(f"  waiting for {len(run.tasks)} jobs to end (at most {BUDGET + 60:.0f}s)")
        waited = time.time()
        await asyncio.gather(*run.tasks, return_exceptions=True)
        # A call is logged once answered: let the last slow ones be answered.
        await asyncio.sleep(max(0.0, run.marks.recovery + SLOW_DELAY + 0.5 - time.time()))
        print(f"  all ended {time.time() - waited:.1f}s after the last arrival")
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
        return report(run, settings_header())
    finally:
        for task in run.tasks:
            task.cancel()
        await client.close()


def main() -> None:
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print('sources bench (issue 19, "Slowdown"): one source system slows, the others go on')
    print(f"command: {command}" + ("  (make bench-sources)" if os.environ.get("MAKELEVEL") else ""))
    header = settings_header()
    print(
        f"settings: profile {PROFILE_NAME}; {RATE:g} jobs/s alternating orders-only / tax;"
        f" budget {BUDGET:g}s; phases baseline {BASELINE:g}s, slowdown {SLOW:g}s, recovery up to"
        f" {RECOVERY:g}s (ends once the queue age is back and tax's breaker closed for"
        f" {SETTLE:g}s)"
    )
    print(
        f"  sources: orders {FAST_DELAY:g}s throughout; tax {FAST_DELAY:g}s -> {SLOW_DELAY:g}s"
        f" -> {FAST_DELAY:g}s; both registered with a {TIMEOUT:g}s timeout"
        + (
            " (a slow answer is a timeout)"
            if TIMEOUT < SLOW_DELAY
            else " (a slow answer is NOT a timeout)"
        )
    )
    print(
        "  stack: "
        + " ".join(f"{k}={v}" for k, v in STACK_SETTINGS.items())
        + f"; tries per delivery {TRIES_PER_DELIVERY}"
    )
    with tempfile.TemporaryDirectory(prefix="quire-sources-") as folder:
        root = Path(KEEP or folder)
        root.mkdir(parents=True, exist_ok=True)
        with SourceServer() as server:
            credentials = Path(folder) / "credentials"  # the validators' only credential files
            credentials.mkdir()
            stack = Stack(
                root / "stack",
                env={**STACK_SETTINGS, "QUIRE_SOURCE_CREDENTIALS_DIR": str(credentials)},
            )
            started = time.monotonic()
            stack.start()
            print(f"stack up in {time.monotonic() - started:.1f}s; source server at {server.url}")
            try:
                summary = asyncio.run(drive(stack, server, Path(folder)))
            finally:
                stack.stop()
    summary["settings"] = header
    summary["command"] = command
    if JSON_PATH:
        Path(JSON_PATH).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"\nJSON summary: {JSON_PATH}")
    if KEEP:
        print(f"stack data and logs kept in {KEEP}/stack")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    main()
