"""``make load``: the workload-class load harness (issue 14).

Starts the embedded stack in a temporary directory and, in order:

1. measures the idle stack's CPU for a few seconds (subtracted later);
2. calibrates: each class alone, a few jobs two at a time, recording CPU per
   process kind, peak sandbox-worker memory, temporary space and lock waits
   for that class only;
3. estimates the machine's capacity for the mix from (2) and runs an open-loop
   schedule scaled to it: a steady plateau, a burst above capacity, a
   recovery plateau, a high plateau, then a drain with no arrivals; queues,
   processes and the ledger are sampled throughout;
4. writes report.md, the PNG plots and results.json to the report directory.

Environment (all optional):
    LOAD_PROFILE=full|tiny        tiny: small files, seconds-long phases (tests)
    LOAD_REPORT_DIR=path          default ./load-report
    LOAD_MIX=contract=0.4,...     shares of the arrival mix
    LOAD_CAPACITY=jobs/s          skip the estimate, scale the phases to this
    LOAD_WORKSHEET=contract=20,...  jobs/s per class for the capacity worksheet
    LOAD_TARGET_UTIL=0.7          utilisation the worksheet sizes replicas for
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from bench.load import report  # noqa: E402
from bench.load.arrivals import Arrival, Phase, parse_mix, schedule  # noqa: E402
from bench.load.corpus import CLASSES, Shape, Work, build  # noqa: E402
from bench.load.sampler import LedgerReader, ProcSampler, QueueSampler  # noqa: E402
from quire.client import (  # noqa: E402
    INLINE_LIMIT_BYTES,
    AdmissionClient,
    PacketItem,
    TenantAdminClient,
    inline_source,
)
from quire.grpcstatus import reason_of  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402

DEFAULT_MIX = "contract=0.40,invoice=0.25,scan=0.12,lease=0.08,malformed=0.15"


@dataclass(frozen=True)
class Profile:
    name: str
    shape: Shape
    calibration: dict[str, int]
    idle_seconds: float
    # (name, kind, seconds, multiple of the estimated capacity)
    phases: tuple[tuple[str, str, float, float], ...]
    drain_seconds: float
    rate_cap: float


PROFILES = {
    "full": Profile(
        "full",
        Shape(),
        {"contract": 8, "lease": 3, "scan": 4, "invoice": 8, "malformed": 6},
        4.0,
        (
            ("steady", "plateau", 30.0, 0.35),
            ("burst", "burst", 10.0, 1.2),
            ("recover", "plateau", 25.0, 0.35),
            ("high", "plateau", 30.0, 0.7),
        ),
        120.0,
        40.0,
    ),
    "tiny": Profile(
        "tiny",
        Shape(lease_pages=20, scan_pages=1, scan_pixels=(300, 400), invoice_lines=(5, 20)),
        dict.fromkeys(CLASSES, 1),
        1.0,
        (
            # 7 s in all: every class still arrives (the mix is dealt in
            # order; lease's first turn is the eighth arrival) at any estimated
            # capacity from 2.25 jobs/s up, as with the 9 s of 3/2/4 before.
            ("steady", "plateau", 2.0, 0.3),
            ("burst", "burst", 3.0, 1.0),
            ("recover", "plateau", 2.0, 0.3),
        ),
        30.0,
        6.0,
    ),
}


@dataclass
class JobRecord:
    cls: str
    phase: str
    arrival: float  # wall clock, scheduled
    expect: str
    submitted: float | None = None
    job: str = ""
    refused: str = ""
    uploaded_bytes: int = 0


@dataclass
class Calibration:
    cls: str
    jobs: int
    seconds: float
    cpu: dict[str, float]  # CPU seconds per job per process kind, idle removed
    worker_rss_mib: dict[str, float]
    tmp_peak_mib: float
    lock_wait_seconds: dict[str, float]
    outcomes: dict[str, int] = field(default_factory=dict)


def job_key(name: str) -> str:
    return name.removeprefix("jobs/")


class Corpus:
    def __init__(self, folder: Path, shape: Shape) -> None:
        self.folder, self.shape = folder, shape
        self.counters = dict.fromkeys(CLASSES, 0)

    def next(self, cls: str) -> Work:
        self.counters[cls] += 1
        return build(cls, self.counters[cls], self.folder / cls, self.shape)


async def submit(client: AdmissionClient, work: Work, record: JobRecord) -> None:
    """Submit ``work`` as a client would: in one call when its sources fit
    inline (``INLINE_LIMIT_BYTES``), else each uploaded first."""
    try:
        record.uploaded_bytes = sum(source.path.stat().st_size for source in work.sources)
        inline = []
        if record.uploaded_bytes <= INLINE_LIMIT_BYTES:
            inline = [inline_source(s.path.read_bytes(), s.content_type) for s in work.sources]
            digests = [source.header.sha256 for source in inline]
        else:
            uploaded = await asyncio.gather(
                *(client.upload(source.path, source.content_type) for source in work.sources)
            )
            digests = [source.sha256 for source in uploaded]
        job = await client.submit(
            [
                PacketItem(source.document_id, digest)
                for source, digest in zip(work.sources, digests, strict=True)
            ],
            ruleset=work.ruleset,
            inline=list({source.header.sha256: source for source in inline}.values()),
        )
    except grpc.aio.AioRpcError as error:
        record.refused = reason_of(error) or error.code().name
        return
    record.submitted = time.time()
    record.job = job_key(job.name)


async def wait_terminal(ledger: LedgerReader, jobs: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(job in ledger.terminal for job in jobs):
            return
        await asyncio.sleep(0.2)


async def calibrate(
    client: AdmissionClient,
    corpus: Corpus,
    profile: Profile,
    procs: ProcSampler,
    ledger: LedgerReader,
) -> tuple[dict[str, float], list[Calibration]]:
    procs.mark()
    before = procs.cpu()
    await asyncio.sleep(profile.idle_seconds)
    idle_window = procs.mark()
    after = procs.cpu()
    idle_seconds = time.monotonic() - idle_window.started
    idle = {kind: (after[kind] - before.get(kind, 0.0)) / idle_seconds for kind in after}
    results = []
    for cls in CLASSES:
        count = profile.calibration.get(cls, 0)
        if not count:
            continue
        works = [corpus.next(cls) for _ in range(count)]
        gate = asyncio.Semaphore(2)
        records = [JobRecord(cls, "calibration", 0.0, w.expect) for w in works]

        async def one(work: Work, record: JobRecord, gate: asyncio.Semaphore = gate) -> None:
            async with gate:
                record.arrival = time.time()
                await submit(client, work, record)
                if record.job:
                    await wait_terminal(ledger, [record.job], 300)

        procs.mark()
        start_cpu = procs.cpu()
        started = time.monotonic()
        await asyncio.gather(*(one(w, r) for w, r in zip(works, records, strict=True)))
        # Audit's last transitions, and the CPU they cost, land just after.
        await asyncio.sleep(0.5)
        seconds = time.monotonic() - started
        end_cpu = procs.cpu()
        window = procs.mark()
        cpu = {
            kind: max(0.0, end_cpu[kind] - start_cpu.get(kind, 0.0) - idle.get(kind, 0) * seconds)
            / count
            for kind in end_cpu
        }
        outcomes: dict[str, int] = {}
        for record in records:
            state = record.refused and f"refused {record.refused}"
            if record.job:
                event = ledger.terminal.get(record.job)
                state = event.to_state if event else "unfinished"
            outcomes[state] = outcomes.get(state, 0) + 1
        ticks = max(window.lock_ticks, 1)
        wall = time.monotonic() - window.started
        results.append(
            Calibration(
                cls,
                count,
                seconds,
                cpu,
                {s: kib / 1024 for s, kib in window.worker_rss_kib.items()},
                window.tmp_bytes / 2**20,
                {s: n / ticks * wall for s, n in window.lock_samples.items()},
                outcomes,
            )
        )
        print(
            f"  calibrated {cls}: {count} jobs in {seconds:.1f} s, "
            f"{sum(cpu.values()) * 1000:.0f} ms CPU per job, outcomes {outcomes}",
            flush=True,
        )
    return idle, results


async def drive(
    client: AdmissionClient, corpus: Corpus, arrivals: list[Arrival], expect_end: float
) -> tuple[list[JobRecord], float]:
    """Submit every arrival at its scheduled time (open loop)."""
    works = [corpus.next(a.cls) for a in arrivals]  # generated before the clock starts
    loop = asyncio.get_running_loop()
    start_loop = loop.time() + 1.0
    start_wall = time.time() + (start_loop - loop.time())
    records: list[JobRecord] = []
    tasks = []
    for arrival, work in zip(arrivals, works, strict=True):
        record = JobRecord(arrival.cls, arrival.phase, start_wall + arrival.at, work.expect)
        records.append(record)
        delay = start_loop + arrival.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(submit(client, work, record)))
    await asyncio.gather(*tasks)
    del expect_end
    return records, start_wall


def phases_for(profile: Profile, capacity: float) -> list[Phase]:
    return [
        Phase(name, kind, seconds, min(profile.rate_cap, max(0.2, share * capacity)))
        for name, kind, seconds, share in profile.phases
    ]


def estimate_capacity(calibrations: list[Calibration], mix: dict[str, float]) -> float:
    """Jobs/s of the mix the machine's cores could carry, from the solo CPU costs."""
    cost = {c.cls: sum(c.cpu.values()) for c in calibrations}
    per_job = sum(share * cost.get(cls, 0.0) for cls, share in mix.items())
    return (os.cpu_count() or 1) / per_job if per_job > 0 else 5.0


async def run(stack: Stack, profile: Profile, corpus: Corpus, mix: dict[str, float]) -> dict:  # type: ignore[type-arg]
    info = stack.start()
    data_dir = stack.data_dir
    assert stack.nats is not None
    nats = stack.nats
    procs = ProcSampler(stack.pid, lambda: nats.pid, data_dir / "blobs" / ".tmp")
    queues = QueueSampler(stack.nats_url, stack.nats_login())
    ledger = LedgerReader(data_dir / "audit" / "audit.db")
    procs.start()
    queues.start()
    ledger.start()
    try:
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            tenant = await admin.create_tenant("load-harness", max_outstanding_jobs=1_000_000)
        async with AdmissionClient(info.endpoints["admission"], tenant.secret) as client:
            print("calibrating each class alone ...", flush=True)
            idle, calibrations = await calibrate(client, corpus, profile, procs, ledger)
            capacity = float(os.environ.get("LOAD_CAPACITY", "0")) or estimate_capacity(
                calibrations, mix
            )
            phases = phases_for(profile, capacity)
            arrivals = schedule(phases, mix)
            print(
                f"estimated capacity for the mix: {capacity:.2f} jobs/s; "
                + ", ".join(f"{p.name} {p.seconds:.0f} s at {p.rate:.2f}/s" for p in phases)
                + f"; {len(arrivals)} arrivals",
                flush=True,
            )
            procs.mark()
            cpu_before = procs.cpu()
            load_started = time.time()
            records, start_wall = await drive(
                client, corpus, arrivals, sum(p.seconds for p in phases)
            )
            arrivals_done = time.time()
            print(f"arrivals done; draining (up to {profile.drain_seconds:.0f} s) ...", flush=True)
            await wait_terminal(ledger, [r.job for r in records if r.job], profile.drain_seconds)
            await asyncio.sleep(1.5)  # a few more queue samples at rest
            ledger.poll()
            load_ended = time.time()
            cpu_after = procs.cpu()
            load_window = procs.mark()
    finally:
        queues.stop()
        procs.stop()
        ledger.stop()
        restarts = {
            s: stack.restarts(s) for s in ("admission", "validator", "assembler", "signer", "audit")
        }
        log_dir = data_dir / "logs"
        busy_logs = {
            p.stem: sum(
                line.count("database is locked")
                for line in p.read_text(errors="replace").splitlines()
            )
            for p in log_dir.glob("*.log")
        }
        stack.stop()
    ticks = max(load_window.lock_ticks, 1)
    wall = load_ended - load_started
    return {
        "profile": profile.name,
        "cores": os.cpu_count(),
        "mix": mix,
        "capacity_estimate": capacity,
        "phases": [asdict(p) for p in phases],
        "start_wall": start_wall,
        "arrivals_done": arrivals_done,
        "load_started": load_started,
        "load_ended": load_ended,
        "idle_cpu_per_second": idle,
        "calibrations": [asdict(c) for c in calibrations],
        "records": [asdict(r) for r in records],
        "events": {
            job: [asdict(e) for e in events]
            for job, events in ledger.events.items()
            if job in {r.job for r in records if r.job}
        },
        "queue_samples": queues.samples,
        "queue_errors": queues.errors,
        "proc_series": procs.series,
        "load_cpu": {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after},
        "load_worker_rss_mib": {s: v / 1024 for s, v in load_window.worker_rss_kib.items()},
        "worker_hwm_mib": {s: v / 1024 for s, v in procs.peak_hwm_kib.items()},
        "load_tmp_peak_mib": load_window.tmp_bytes / 2**20,
        "load_lock_wait_seconds": {
            s: n / ticks * wall for s, n in load_window.lock_samples.items()
        },
        "database_locked_log_lines": busy_logs,
        "restarts": restarts,
    }


def main() -> None:
    started = time.monotonic()
    profile = PROFILES[os.environ.get("LOAD_PROFILE", "full")]
    mix = parse_mix(os.environ.get("LOAD_MIX", DEFAULT_MIX))
    out = Path(os.environ.get("LOAD_REPORT_DIR", "load-report")).resolve()
    worksheet = parse_mix_rates(os.environ.get("LOAD_WORKSHEET", ""))
    target = float(os.environ.get("LOAD_TARGET_UTIL", "0.7"))
    print(f"load harness, profile {profile.name}, mix {mix}, report -> {out}", flush=True)
    with tempfile.TemporaryDirectory(prefix="quire-load-") as temp:
        folder = Path(temp)
        corpus = Corpus(folder / "corpus", profile.shape)
        stack = Stack(folder / "stack")
        results = asyncio.run(run(stack, profile, corpus, mix))
    results["harness_seconds"] = time.monotonic() - started
    verdict = report.write(results, out, worksheet=worksheet, target_utilisation=target)
    print(verdict, flush=True)
    print(f"report: {out / 'report.md'} ({time.monotonic() - started:.0f} s in all)")


def parse_mix_rates(text: str) -> dict[str, float]:
    rates: dict[str, float] = {}
    for part in text.split(","):
        if part.strip():
            name, _, rate = part.partition("=")
            rates[name.strip()] = float(rate)
    return rates


if __name__ == "__main__":
    main()
