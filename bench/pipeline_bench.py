"""Pipeline benchmark: N packets (3 PDFs, 12 pages each) through the embedded stack.

In one run, on the same inputs, it prints:

- Quire's completed jobs per second (closed loop, 16 jobs in flight, after 32
  unmeasured warm-up jobs) and the terminal latency (submit to COMPLETED),
  p50/p95/p99; the same again with a second replica of every stage, warmed
  the same way;
- the machine's limit: the same work done by the bare libraries (sniff, open,
  merge, sign) in one process per core at once, packets/s summed over the
  processes, and Quire's share of it (aim >= 0.35); the one-process figure too;
- CPU milliseconds per job for every process kind (the five service main
  processes, their sandbox workers, nats-server, the bench client) over the
  upload and pipeline phase, read from ``/proc`` (``bench/procstats.py`` says
  how, and what it cannot see), the machine-wide CPU from ``/proc/stat``, and
  the total against the bare libraries' CPU per packet (aim <= 3x);
- the budget table: each process kind's CPU per job beside its budget (a
  sandbox's budget is for its overhead beyond the bare library work it
  does), and a budget line that fails for any process over its budget;
- resident memory of each service process after the run and its peak during
  it, sandbox workers on their own (flag above 150 MiB);
- single-job latency on the idle stack, 20 jobs one after another (aim p50 <=
  60 ms);
- SubmitJob latency under open-loop arrivals at 80 % of the measured rate
  (aim p99 <= 10 ms), and whether those jobs all completed;
- SubmitJob's durable floor (``bench/latencyfloor.py``): the packet's
  sources kept as blobs and then a commit, timed with no Quire code on the
  idle stack and beside a second open-loop pass at the same rate, against
  that aim;
- what signing/verification, encryption at rest and caller proofs cost;
- the design's skeleton (``bench/skeleton.py``): five processes doing only
  the parts the design requires of a job, with no Quire code and no PDF
  work, on the same volume and packets; its CPU per job by process beside
  Quire's budgets, and whether it leaves the CPU, share and idle aims any
  room.

    make bench                 # BENCH_JOBS=40 by default
    BENCH_JOBS=200 make bench
    make profile               # the same, with a flame graph per service in profiles/
                               # (BENCH_PROFILE_DIR; py-spy, bench/flamegraphs.py;
                               # BENCH_PROFILE_FORMAT=collapsed writes stacks as text;
                               # BENCH_PROFILE_GIL=1 samples only the thread holding the GIL;
                               # BENCH_PROFILE_RATE samples per second, 50)
    BENCH_PERF=1 make bench    # also each process kind's CPU per job by code
                               # (interpreter, kernel, SQLite, gRPC, ...: perf
                               # across the machine, bench/cpusplit.py)
    BENCH_LOAD_SECONDS=15      # length of the open-loop phase
    BENCH_PAGES=200            # one 200-page document per packet (make load's lease
                               # class) instead of 3 documents of 4, 5 and 3 pages
    BENCH_INLINE=0             # upload each source first instead of sending
                               # the packet inside SubmitJob
    BENCH_IN_FLIGHT=64         # jobs the closed loop keeps in flight (16); above 16
                               # raise QUIRE_MAX_TENANT_UPLOADS too, for inline packets
    BENCH_WARMUP=0             # warm-up jobs before each throughput phase (2 x in flight)
    BENCH_FS=tmpdir            # keep the stack's data in TMPDIR, not on a fresh ext4
                               # volume of the bench's own (bench/volume.py; needs root;
                               # BENCH_KEEP implies it)

Every figure is wall-clock or CPU on whatever else the machine is doing; the
machine-wide CPU counts other users' processes too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import math
import multiprocessing
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cpusplit  # noqa: E402
from costmodel import (  # noqa: E402
    cost_parts,
    count_blobs,
    nats_traffic,
    print_parts,
    print_traffic,
    scrape_transactions,
    stream_messages,
    traffic_between,
    transactions_between,
    write_document,
)
from flamegraphs import RATE, recording  # noqa: E402
from floor import Floor, blob_floor, commit_floor, messaging_floor, rpc_floor  # noqa: E402
from latencyfloor import DurableFloor, lower_bound, start_probe  # noqa: E402
from procstats import (  # noqa: E402
    LOOP,
    TICK_SECONDS,
    TreeSampler,
    machine_busy_ticks,
    own_cpu_seconds,
    thread_role_ticks,
)
from replicas import SCALED, second_replicas  # noqa: E402
from skeleton import Skeleton, skeleton_floor  # noqa: E402
from volume import bench_file_system  # noqa: E402

from quire.admission.v1 import admission_service_pb2 as pb  # noqa: E402
from quire.blobstore import sha256_file  # noqa: E402
from quire.callers import CallerVerifier, prove  # noqa: E402
from quire.client import AdmissionClient, PacketItem, inline_source  # noqa: E402
from quire.identity import IdentitySettings, ServiceIdentity, TrustStore  # noqa: E402
from quire.jobgate import GATE_BUCKET  # noqa: E402
from quire.jobs import state_name  # noqa: E402
from quire.pipeline import State  # noqa: E402
from quire.settings import SERVICES  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402
from quire.threadnames import ROLES  # noqa: E402
from quire.type import job_pb2  # noqa: E402
from quire.wire import SIGNATURE_HEADER, WireSigner, WireVerifier  # noqa: E402
from quire.workqueue import EVENTS_STREAM, WORK_STREAM  # noqa: E402

PAGES_PER_DOCUMENT = tuple(
    int(pages) for pages in os.environ.get("BENCH_PAGES", "4,5,3").split(",")
)
"""Pages of each document of a packet: 3 documents, 12 pages by default;
``BENCH_PAGES=200`` is ``make load``'s lease class, one 200-page document."""
PACKET_SOURCES = len(PAGES_PER_DOCUMENT)
IN_FLIGHT = int(os.environ.get("BENCH_IN_FLIGHT", "16"))
FLOOR_MESSAGES = 3000
FLOOR_CALLS = 2000
FLOOR_TRANSACTIONS = 1000
FLOOR_BLOBS = 300
PROBE_RATE = 10.0
"""Durable chains a second the latency floor's probe makes (``bench/latencyfloor.py``)."""
SKELETON_PASSES = 3
"""Measured passes of the design's skeleton; the cheapest is kept (a slow
spell of the machine must not make the design look dearer than it is)."""
FLOOR_CONFIDENCE = 0.95
"""How sure the verdict must be that the floor's p99 is over the aim (a
distribution-free bound from the chains' order statistics)."""
PROBE_PASSES = 2
"""How many times the open-loop phase's length the floor's own pass runs: about
150 chains of each kind at the default 15 s, so its p99 is not the largest one."""
IDLE_PROBE_SECONDS = 3.0
IDLE_JOBS = 20
WARMUP_JOBS = int(os.environ.get("BENCH_WARMUP", str(2 * IN_FLIGHT)))
"""Jobs run, unmeasured, before each throughput phase: a process's first jobs
pay once for what it keeps (compiled statements, imports its code makes on
first use, connections), and a replica started for the phase would pay it
inside the measurement; both phases measure the steady state."""
LOAD_SHARE = 0.8
MIB = 1024 * 1024
RSS_LIMIT = 150 * MIB
LEASE_CLASS = PAGES_PER_DOCUMENT == (200,)
"""``make load``'s lease class: one 200-page document per packet."""
AIM_SHARE = 0.6 if LEASE_CLASS else 0.35
"""Completed jobs/s over the bare libraries' packets/s on every core (the
lease class's PDF work is most of each job, so its aim is higher)."""
DOCUMENT_SECTION = (
    "" if PAGES_PER_DOCUMENT == (4, 5, 3) else "200-page packets" if LEASE_CLASS else None
)
"""The generated section of ``BENCH_DOCS`` this packet class writes (the
standard packet's has no label; ``costmodel.write_document``); None for
any other packet, which has none."""
AIM_CPU = 3.0
"""CPU per job, every process, over the bare libraries' CPU per packet."""
AIM_IDLE_P50 = 0.060
AIM_SUBMIT_P99 = 0.010
BUDGET_MS = {
    "admission": 6.0,
    "validator": 3.0,
    "assembler": 3.0,
    "signer": 3.0,
    "audit": 4.0,
    "nats-server": 4.0,
    "client": 2.0,
    "workers:validator": 1.0,
    "workers:assembler": 1.0,
    "workers:signer": 1.0,
}
"""CPU ms per job each process kind may spend; a sandbox's is its overhead
beyond the bare library work it does (``BARE_PART``). They sum, with the bare
work, to about the CPU aim."""
BARE_PART = {"workers:validator": "open", "workers:assembler": "merge", "workers:signer": "sign"}
"""Which part of the bare libraries' work each sandbox does."""
INLINE = os.environ.get("BENCH_INLINE", "1") != "0"


def make_packets(folder: Path, count: int, prefix: str = "p") -> list[list[Path]]:
    packets = []
    for index in range(count):
        packet = []
        for doc, pages in enumerate(PAGES_PER_DOCUMENT):
            texts = [f"{prefix} packet {index} document {doc} page {page}" for page in range(pages)]
            packet.append(write_text_pdf(folder / f"{prefix}{index}-d{doc}.pdf", texts))
        packets.append(packet)
    return packets


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def spread(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.50) * 1000:.1f} ms, "
        f"p99 {percentile(values, 0.99) * 1000:.1f} ms, "
        f"max {max(values) * 1000:.1f} ms"
    )


def client_for(stack: Stack) -> AdmissionClient:
    token = (stack.data_dir / "admission" / "dev-token").read_text().strip()
    return AdmissionClient(stack.endpoints["admission"], token)


@dataclass(frozen=True)
class Packet:
    """A packet ready to submit: its sources' digests, and the sources
    themselves when they travel inside SubmitJob (``BENCH_INLINE``, the
    default: a small packet costs one call) rather than uploaded first."""

    digests: list[str]
    inline: list[pb.InlineSource]


def items(digests: list[str]) -> list[PacketItem]:
    return [PacketItem(f"d{i}", d) for i, d in enumerate(digests)]


async def submit(client: AdmissionClient, packet: Packet) -> job_pb2.Job:
    return await client.submit(items(packet.digests), inline=packet.inline)


async def upload_all(client: AdmissionClient, packets: list[list[Path]]) -> list[Packet]:
    """Each packet's sources uploaded, or read to travel inline."""
    if INLINE:
        ready = []
        for packet in packets:
            sources = [inline_source(path.read_bytes()) for path in packet]
            ready.append(Packet([s.header.sha256 for s in sources], sources))
        return ready
    return [
        Packet([(await client.upload(path)).sha256 for path in packet], []) for packet in packets
    ]


async def run_pipeline(
    client: AdmissionClient, uploaded: list[Packet]
) -> tuple[float, list[float], dict[str, int]]:
    outcomes: dict[str, int] = {}
    latencies: list[float] = []
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(packet: Packet) -> None:
        async with gate:
            started = time.perf_counter()
            job = await submit(client, packet)
            job = await client.wait(job.name, timeout=600)
            latencies.append(time.perf_counter() - started)
            state = state_name(job.state)
            outcomes[state] = outcomes.get(state, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(one(packet) for packet in uploaded))
    return time.perf_counter() - started, latencies, outcomes


async def warm_up(client: AdmissionClient, packets: list[list[Path]]) -> None:
    """``packets`` through the stack, unmeasured; every one must complete."""
    _elapsed, _latencies, outcomes = await run_pipeline(client, await upload_all(client, packets))
    if outcomes.get(State.COMPLETED, 0) != len(packets):
        raise SystemExit(f"warm-up jobs did not all complete: {outcomes}")


async def idle_latency(client: AdmissionClient, uploaded: list[Packet]) -> list[float]:
    """Submit to COMPLETED for one job at a time, seen through WatchJob (the
    client's ``wait``), as a client sees it: no polling interval in the figure."""
    latencies = []
    for packet in uploaded:
        started = time.perf_counter()
        job = await submit(client, packet)
        job = await client.wait(job.name, timeout=120)
        if state_name(job.state) != State.COMPLETED:
            raise RuntimeError(f"{job.name} ended {state_name(job.state)}")
        latencies.append(time.perf_counter() - started)
    return latencies


REFUSED = "REFUSED (RESOURCE_EXHAUSTED)"
"""An open-loop arrival admission refused: too many of the tenant's jobs outstanding."""


async def open_loop(
    client: AdmissionClient, uploaded: list[Packet], rate: float
) -> tuple[list[float], float, dict[str, int], float]:
    """Arrivals every 1/rate s whatever the stack does (open loop). Returns the
    SubmitJob RPC latencies, the worst lateness of an arrival against its
    schedule, the jobs' outcomes and the time from the last arrival until the
    last job ended."""
    rpc: list[float] = []
    outcomes: dict[str, int] = {}
    late = 0.0

    async def one(packet: Packet) -> None:
        started = time.perf_counter()
        try:
            job = await submit(client, packet)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            # The stack fell behind the arrivals (a slower spell of the
            # machine than the one its rate was measured in) and admission
            # refused work it could not finish: an answer, counted as one.
            rpc.append(time.perf_counter() - started)
            outcomes[REFUSED] = outcomes.get(REFUSED, 0) + 1
            return
        rpc.append(time.perf_counter() - started)
        job = await client.wait(job.name, timeout=600)
        state = state_name(job.state)
        outcomes[state] = outcomes.get(state, 0) + 1

    tasks = []
    origin = time.perf_counter()
    for index, packet in enumerate(uploaded):
        due = origin + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        late = max(late, time.perf_counter() - due)
        tasks.append(asyncio.create_task(one(packet)))
    last_arrival = time.perf_counter()
    await asyncio.gather(*tasks)
    return rpc, late, outcomes, time.perf_counter() - last_arrival


def _cpu_self_and_children() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_bare_libraries(
    packets: list[list[Path]],
    key_path: str,
    cert_path: str,
    out: Path,
    barrier: Any = None,
    parts: dict[str, float] | None = None,
) -> tuple[float, float]:
    """The same work, in one process, with no queues, databases or services.
    Returns (wall seconds, CPU seconds of this process and its children);
    ``parts`` gets the CPU seconds of each part ("open": hash, sniff and
    open; "merge"; "sign")."""
    import magic
    import pikepdf

    from quire.assembler.merge import PacketSource, assemble_packet
    from quire.signer.signing import sign_packet

    sniffer = magic.Magic(mime=True)
    if barrier is not None:
        barrier.wait(timeout=300)
    cpu = _cpu_self_and_children()
    started = time.perf_counter()
    split = parts if parts is not None else {}
    for name in ("open", "merge", "sign"):
        split.setdefault(name, 0.0)
    for index, packet in enumerate(packets):
        sources = []
        mark = time.process_time()
        for position, path in enumerate(packet):
            digest, _ = sha256_file(path)
            with open(path, "rb") as handle:
                assert sniffer.from_buffer(handle.read(65536)) == "application/pdf"
            with pikepdf.open(path, attempt_recovery=False) as pdf:
                assert not pdf.is_encrypted and len(pdf.pages) > 0
            sources.append(
                PacketSource(position, f"d{position}", digest, "application/pdf", str(path))
            )
        merged = out / f"merged-{index}.pdf"
        mark = _part(split, "open", mark)
        packet_digest = assemble_packet(
            sources, str(merged), profile="simple", manifest_digest="0" * 64, workdir=str(out)
        ).sha256
        mark = _part(split, "merge", mark)
        sign_packet(
            str(merged), packet_digest, str(out / f"signed-{index}.pdf"), key_path, cert_path
        )
        _part(split, "sign", mark)
    return time.perf_counter() - started, _cpu_self_and_children() - cpu


def _part(parts: dict[str, float], name: str, since: float) -> float:
    now = time.process_time()
    parts[name] += now - since
    return now


_BARRIER: Any = None


def _set_barrier(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _bare_in_pool(
    packets: list[list[Path]], key_path: str, cert_path: str, out: Path
) -> tuple[float, float]:
    out.mkdir(parents=True, exist_ok=True)
    return run_bare_libraries(packets, key_path, cert_path, out, _BARRIER)


def run_bare_per_core(
    packets: list[list[Path]], key_path: str, cert_path: str, out: Path, processes: int
) -> list[tuple[float, float]]:
    """The bare work in ``processes`` processes at once (spawned, so nothing of
    this process's gRPC or threads is forked), each over all the packets; they
    start their loops together at a barrier, after their imports."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    with concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context, initializer=_set_barrier, initargs=(barrier,)
    ) as pool:
        futures = [
            pool.submit(_bare_in_pool, packets, key_path, cert_path, out / f"process-{n}")
            for n in range(processes)
        ]
        return [future.result() for future in futures]


def wire_cost(data_dir: Path, samples: int = 2000) -> tuple[float, float, int]:
    """(sign µs, verify µs, mean payload bytes) of the provenance every queue
    message carries: each is signed once by its producer and verified once by
    its consumer (job-gate entries count as messages). Measured on the run's
    own tasks and events with the stack's own keys."""
    with sqlite3.connect(f"file:{data_dir / 'audit' / 'audit.db'}?mode=ro", uri=True) as db:
        events = [bytes(row[0]) for row in db.execute("SELECT event FROM ledger")]
    with sqlite3.connect(f"file:{data_dir / 'admission' / 'admission.db'}?mode=ro", uri=True) as db:
        tasks = [bytes(row[0]) for row in db.execute("SELECT task FROM jobs")]
    signer = WireSigner(ServiceIdentity.load(IdentitySettings.from_env("validator", data_dir, {})))
    verifier = WireVerifier(TrustStore.load(data_dir / "identity"))
    payloads = [(tasks + events)[i % len(tasks + events)] for i in range(samples)]
    subject = "quire.work.assemble.interactive"
    started = time.perf_counter()
    headers = [{SIGNATURE_HEADER: signer.header(subject, payload)} for payload in payloads]
    signed = time.perf_counter()
    for payload, header in zip(payloads, headers, strict=True):
        verifier.producer(subject, payload, header)
    verified = time.perf_counter()
    mean_bytes = round(statistics.fmean(len(payload) for payload in tasks + events))
    return (
        (signed - started) / samples * 1e6,
        (verified - signed) / samples * 1e6,
        mean_bytes,
    )


def at_rest_cost(data_dir: Path, jobs: int) -> tuple[float, float, float, float, float]:
    """(sealed bytes, opened bytes, AES-GCM ms, plaintext copies, plaintext-copy
    ms) per job of encryption at rest, on the run's own blobs with the stack's
    own data keys.

    A job's bytes pass the seal this often: its sources are sealed on upload
    and opened by the validator and the assembler; its packet is sealed by the
    assembler and opened by the signer; its artifact is sealed by the signer
    and opened by audit (to hash it) and by the download. The AES-GCM figure
    is the cipher alone. A stage's opening of a source or a packet over the
    sandbox's in-memory bound (``in_memory_bytes``, the stack's default) also
    needs a file: the copy figure is that work (decrypt, check the digest,
    write the plaintext into the attempt's private directory, remove it),
    for those openings only. Smaller documents go to the sandbox as bytes,
    and the artifact's openings (audit's hash, the download) stream."""
    from quire.cli.retention import open_blobs
    from quire.sealing import Sealer, open_sealed, read_header
    from quire.settings import SandboxSettings

    in_memory = SandboxSettings.model_fields["in_memory_bytes"].default
    copies = 0

    store = open_blobs(data_dir, {})
    passes = {"sources": (1, 2), "assembled": (1, 1), "signed": (1, 2)}
    sealed_bytes = opened_bytes = 0
    cipher_seconds = copy_seconds = 0.0
    with tempfile.TemporaryDirectory(prefix="quire-at-rest-") as scratch:
        for kind, (seals, opens) in passes.items():
            for path in sorted((data_dir / "blobs" / kind).rglob("*")):
                if not path.is_file():
                    continue
                key = path.relative_to(data_dir / "blobs").as_posix()
                plain = b"".join(store.read_plain(key))
                sealed = path.read_bytes()
                header = read_header(io.BytesIO(sealed))
                data_key = store.keys.for_reading(header.tenant, header.key_version)
                started = time.perf_counter()
                for _ in range(seals):
                    sealer = Sealer(header.tenant, header.key_version, data_key)
                    sealer.update(plain)
                    sealer.finish()
                for _ in range(opens):
                    handle = io.BytesIO(sealed)
                    b"".join(open_sealed(handle, read_header(handle), data_key))
                cipher_seconds += time.perf_counter() - started
                if kind != "signed" and len(plain) > in_memory:
                    digest = hashlib.sha256(plain).hexdigest()
                    started = time.perf_counter()
                    for _ in range(opens):
                        store.materialize(key, digest, Path(scratch)).unlink()
                    copy_seconds += time.perf_counter() - started
                    copies += opens
                sealed_bytes += seals * len(plain)
                opened_bytes += opens * len(plain)
    return (
        sealed_bytes / jobs,
        opened_bytes / jobs,
        cipher_seconds / jobs * 1000,
        copies / jobs,
        copy_seconds / jobs * 1000,
    )


def caller_proof_cost(data_dir: Path, samples: int = 2000) -> float:
    """µs to make and check one ``quire-caller`` proof (every service-to-service call)."""
    identity = ServiceIdentity.load(IdentitySettings.from_env("admission", data_dir, {}))
    verifier = CallerVerifier(TrustStore.load(data_dir / "identity"))
    method = "/quire.audit.v1.AuditService/GetJob"
    started = time.perf_counter()
    for _ in range(samples):
        verifier.verify(prove(identity, method), method)
    return (time.perf_counter() - started) / samples * 1e6


KIND_ORDER = (
    *SERVICES,
    *(f"workers:{service}" for service in SERVICES),
    "nats-server",
    "client",
)


QUIET_SHARE = 0.10
"""The machine counts as quiet when under this share of its CPU is busy for a second."""
QUIET_WAIT_SECONDS = 60.0


def wait_for_quiet(cores: int) -> str:
    """Wait (at most ``QUIET_WAIT_SECONDS``) until the machine is quiet, so
    that a run started right after another (``make bench`` runs two) does
    not measure the other's aftermath; says how long it waited."""
    started = time.perf_counter()
    while True:
        ticks = machine_busy_ticks()
        time.sleep(1.0)
        busy = (machine_busy_ticks() - ticks) * TICK_SECONDS / cores
        waited = time.perf_counter() - started
        if busy <= QUIET_SHARE:
            return f"quiet after {waited:.0f} s"
        if waited >= QUIET_WAIT_SECONDS:
            return f"still {busy:.0%} busy after {waited:.0f} s: the figures may suffer"


def main() -> None:
    # Data kept after the run stays where it can be read: not on the bench's
    # volume, which goes with the run.
    print(f"the machine: {wait_for_quiet(os.cpu_count() or 1)}")
    with bench_file_system("tmpdir" if os.environ.get("BENCH_KEEP") else None) as where:
        run(where)


def run(where: str) -> None:
    """The whole bench, its temporary files (the stack's data among them) on ``where``."""
    jobs = int(os.environ.get("BENCH_JOBS", "40"))
    load_seconds = float(os.environ.get("BENCH_LOAD_SECONDS", "15"))
    cores = os.cpu_count() or 1
    print(
        f"command: BENCH_JOBS={jobs} BENCH_LOAD_SECONDS={load_seconds:g} "
        f"{sys.executable} {' '.join(sys.argv)}  ({cores} cores, "
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at start)"
    )
    print(f"file system: {where} (BENCH_FS)")
    with tempfile.TemporaryDirectory(prefix="quire-bench-") as temp:
        if os.environ.get("BENCH_KEEP"):
            temp = tempfile.mkdtemp(prefix="quire-bench-kept-")
            print(f"keeping the stack data in {temp}")
        folder = Path(temp)
        (folder / "inputs").mkdir()
        (folder / "bare").mkdir()
        packets = make_packets(folder / "inputs", jobs)
        idle_packets = make_packets(folder / "inputs", IDLE_JOBS, prefix="idle")
        warm_packets = make_packets(folder / "inputs", WARMUP_JOBS, prefix="warm")
        replica_warm_packets = make_packets(folder / "inputs", WARMUP_JOBS, prefix="warm2")
        stack = Stack(folder / "stack")
        stack.start()
        try:
            assert stack.nats is not None and stack.nats.pid is not None
            roots = {stack.pid(service): service for service in SERVICES}
            roots[stack.nats.pid] = "nats-server"
            sampler = TreeSampler(roots)

            async def warmed() -> None:
                async with client_for(stack) as client:
                    await warm_up(client, warm_packets)

            asyncio.run(warmed())

            async def throughput() -> Any:
                async with client_for(stack) as client:
                    uploaded = await upload_all(client, packets)
                    marks["uploaded"] = (
                        time.perf_counter(),
                        own_cpu_seconds(),
                        machine_busy_ticks(),
                    )
                    return uploaded, await run_pipeline(client, uploaded)

            marks: dict[str, tuple[float, float, int]] = {}
            profiles = os.environ.get("BENCH_PROFILE_DIR", "")
            profiled = {pid: kind for pid, kind in roots.items() if kind in SERVICES}
            metered = {service: stack.metrics_endpoints[service] for service in SERVICES}
            transactions0 = scrape_transactions(metered)
            counted = (WORK_STREAM, EVENTS_STREAM, f"KV_{GATE_BUCKET}")
            login = stack.nats_login()
            messages0 = asyncio.run(stream_messages(stack.nats_url, login, counted))
            traffic0 = nats_traffic(stack.nats.monitor_port) if stack.nats else {}
            threads0 = {kind: thread_role_ticks(pid, ROLES) for pid, kind in profiled.items()}
            sampler.start()
            client0, machine0 = own_cpu_seconds(), machine_busy_ticks()
            phase_started = time.perf_counter()
            collapsed = os.environ.get("BENCH_PROFILE_FORMAT", "svg") == "collapsed"
            by_code = os.environ.get("BENCH_PERF", "") == "1"
            with (
                (
                    recording(
                        profiled,
                        Path(profiles),
                        collapsed=collapsed,
                        gil=os.environ.get("BENCH_PROFILE_GIL", "") == "1",
                        rate=int(os.environ.get("BENCH_PROFILE_RATE", RATE)),
                    )
                    if profiles
                    else nullcontext()
                ),
                cpusplit.sampling(folder / "perf") if by_code else nullcontext() as perf_data,
            ):
                _uploaded, (elapsed, latencies, outcomes) = asyncio.run(throughput())
            phase_seconds = time.perf_counter() - phase_started
            client_cpu, machine = own_cpu_seconds() - client0, machine_busy_ticks() - machine0
            sampler.stop()
            code_samples = (
                cpusplit.split(
                    cpusplit.script_lines(perf_data), {**sampler.kinds(), os.getpid(): "client"}
                )
                if perf_data is not None
                else {}
            )
            by_thread = {
                kind: _ticks_between(threads0[kind], thread_role_ticks(pid, ROLES))
                for pid, kind in profiled.items()
            }
            cpu = sampler.cpu_seconds()
            cpu["client"] = client_cpu
            memory = sampler.memory()
            upload_marks = marks["uploaded"]
            transactions = transactions_between(transactions0, scrape_transactions(metered))
            blobs_per_job = count_blobs(folder / "stack" / "blobs") / jobs
            messages = asyncio.run(stream_messages(stack.nats_url, login, counted)) - messages0
            messages_per_job = messages / jobs
            traffic = (
                traffic_between(traffic0, nats_traffic(stack.nats.monitor_port))
                if stack.nats
                else {}
            )

            keys = folder / "stack" / "signer" / "keys" / "v1"
            key, cert = str(keys / "key.pem"), str(keys / "cert.pem")
            bare_parts: dict[str, float] = {}
            bare_one, bare_one_cpu = run_bare_libraries(
                packets, key, cert, folder / "bare", parts=bare_parts
            )
            per_core = run_bare_per_core(packets, key, cert, folder / "bare", cores)

            completed_rate = outcomes.get(State.COMPLETED, 0) / elapsed
            load_count = max(1, round(LOAD_SHARE * completed_rate * load_seconds))
            load_packets = make_packets(folder / "inputs", load_count, prefix="load")
            # The floor's pass runs twice as long, for twice the probe's chains.
            probe_count = PROBE_PASSES * load_count
            probe_packets = make_packets(folder / "inputs", probe_count, prefix="probe")
            source_sizes = [path.stat().st_size for path in load_packets[0]]
            probes = folder / "latency-floor"

            async def afterwards() -> Any:
                async with client_for(stack) as client:
                    idle_uploaded = await upload_all(client, idle_packets)
                    load_uploaded = await upload_all(client, load_packets)
                    probe_uploaded = await upload_all(client, probe_packets)
                    await asyncio.sleep(1.0)
                    idle_probe = await asyncio.to_thread(
                        start_probe, probes / "idle", IDLE_PROBE_SECONDS, PROBE_RATE, source_sizes
                    )
                    idle_floor = await asyncio.to_thread(idle_probe.result)
                    idle = await idle_latency(client, idle_uploaded)
                    rate = max(LOAD_SHARE * completed_rate, 0.1)
                    loaded = await open_loop(client, load_uploaded, rate)
                    # The floor under load: the same arrivals again, the probe
                    # beside them (not beside the pass the aim is measured on).
                    probe = await asyncio.to_thread(
                        start_probe,
                        probes / "load",
                        len(probe_uploaded) / rate,
                        PROBE_RATE,
                        source_sizes,
                    )
                    floor_pass = await open_loop(client, probe_uploaded, rate)
                    load_floor = await asyncio.to_thread(probe.result)
                    return idle, loaded, (idle_floor, load_floor, floor_pass[0], floor_pass[2])

            idle, (rpc, late, load_outcomes, drain), durable = asyncio.run(afterwards())
            replica_packets = make_packets(folder / "inputs", jobs, prefix="replicas")

            async def with_replicas() -> Any:
                async with second_replicas(stack) as extra, client_for(stack) as client:
                    await warm_up(client, replica_warm_packets)
                    ready = await upload_all(client, replica_packets)
                    both = TreeSampler({**roots, **extra})
                    both.start()
                    ticks = machine_busy_ticks()
                    result = await run_pipeline(client, ready)
                    ticks = machine_busy_ticks() - ticks
                    both.stop()
                    return result, ticks, both.cpu_seconds()

            (replica_elapsed, _latencies, replica_outcomes), replica_ticks, replica_cpu = (
                asyncio.run(with_replicas())
            )
            replica_rate = replica_outcomes.get(State.COMPLETED, 0) / replica_elapsed
            sign_us, verify_us, message_bytes = wire_cost(folder / "stack")
            per_job = messages_per_job
            call_us = caller_proof_cost(folder / "stack")
            call_floor = rpc_floor(
                stack.endpoints["admission"], stack.pid("admission"), FLOOR_CALLS, IN_FLIGHT
            )
            # Every job whose blobs are in the store: the warm-ups, both
            # throughput phases, the idle jobs and both open-loop passes.
            all_jobs = 2 * (WARMUP_JOBS + jobs) + IDLE_JOBS + load_count + probe_count
            sealed, opened, cipher_ms, copies, copy_ms = at_rest_cost(folder / "stack", all_jobs)
            restarts = {service: stack.restarts(service) for service in SERVICES}
        finally:
            stack.stop()
        message_floor = messaging_floor(FLOOR_MESSAGES, message_bytes, IN_FLIGHT)
        (folder / "floor").mkdir()
        write_ms, read_ms = commit_floor(folder / "floor", FLOOR_TRANSACTIONS)
        blob_ms = blob_floor(folder / "floor", FLOOR_BLOBS)
        skeleton = skeleton_floor(
            folder / "skeleton",
            packets,
            IN_FLIGHT,
            min(WARMUP_JOBS, len(packets)),
            idle=IDLE_JOBS,
            passes=SKELETON_PASSES,
        )

    pipeline_rate = outcomes.get(State.COMPLETED, 0) / elapsed
    print(
        f"jobs: {jobs} ({len(PAGES_PER_DOCUMENT)} PDFs of {'+'.join(map(str, PAGES_PER_DOCUMENT))}"
        f" pages each), outcomes: {outcomes}"
    )
    if any(restarts.values()):
        print(f"service restarts during the run: {restarts}")
    print(
        f"pipeline: {pipeline_rate:.2f} completed jobs/s over {elapsed:.1f} s ({IN_FLIGHT} in flight)"
    )
    print(
        "terminal latency: "
        f"p50 {percentile(latencies, 0.50) * 1000:.0f} ms, "
        f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
        f"mean {statistics.fmean(latencies) * 1000:.0f} ms"
    )

    print()
    print("== the machine's limit: bare libraries (sniff, open, merge, sign), same packets")
    print(f"bare libraries, one process: {jobs / bare_one:.2f} packets/s over {bare_one:.1f} s")
    at_once = sum(jobs / wall for wall, _ in per_core)
    # What the machine can do is the more of the two: a slow spell while the
    # processes ran at once must not flatter Quire's share of it.
    limit = max(at_once, cores * jobs / bare_one)
    print(
        f"bare libraries, {cores} processes at once (one per core): "
        + " + ".join(f"{jobs / wall:.2f}" for wall, _ in per_core)
        + f" = {at_once:.2f} packets/s; the limit is the more of that and {cores} x one "
        f"process's, {limit:.2f} packets/s"
    )
    ratio = pipeline_rate / limit
    cpu_limit = cores * jobs * cores / sum(c for _, c in per_core)
    print(
        f"cross-check from CPU time, not wall clock: {cores} cores / bare CPU per packet = "
        f"{cpu_limit:.2f} packets/s (the wall-clock limit falls below this when other work "
        "shares the machine)"
    )
    print(
        f"two replicas of {', '.join(SCALED)}: {replica_rate:.2f} completed jobs/s "
        f"({replica_outcomes}) against one replica's {pipeline_rate:.2f}: "
        f"{replica_rate / pipeline_rate:.2f}x (aim >= 1: "
        f"{'met' if replica_rate >= pipeline_rate else 'NOT met'}); machine-wide CPU "
        f"{replica_ticks * TICK_SECONDS / jobs * 1000:.1f} ms per job against "
        f"{machine * TICK_SECONDS / jobs * 1000:.1f}, the machine "
        f"{replica_ticks * TICK_SECONDS / replica_elapsed / cores:.0%} busy against "
        f"{machine * TICK_SECONDS / phase_seconds / cores:.0%}"
    )
    print(
        "CPU ms per job by process kind, one replica -> two (both replicas together): "
        + ", ".join(
            f"{kind} {cpu.get(kind, 0.0) / jobs * 1000:.1f} -> "
            f"{replica_cpu.get(kind, 0.0) / jobs * 1000:.1f}"
            for kind in sorted(set(cpu) | set(replica_cpu))
            if kind != "client" and max(cpu.get(kind, 0.0), replica_cpu.get(kind, 0.0)) > 0
        )
    )
    print(
        f"Quire / machine's limit: {pipeline_rate:.2f} / {limit:.2f} = {ratio:.2f} "
        f"(aim >= {AIM_SHARE:.2f}: {'met' if ratio >= AIM_SHARE else 'NOT met'}); "
        f"Quire / one process: {pipeline_rate * bare_one / jobs:.2f}"
    )

    print()
    print("== CPU per job, upload + pipeline phase (/proc, sampled every 0.2 s)")
    bare_cores_ms = sum(c for _, c in per_core) / (jobs * cores) * 1000
    bare_one_ms = bare_one_cpu / jobs * 1000
    # The work's price is the lower of the two measurements: the machine's
    # speed moves within a run, and a slow spell in either must not flatter
    # Quire's ratio (the two measured 28.9 and 43.5 ms for the same packets).
    bare_ms = min(bare_cores_ms, bare_one_ms)
    total_ms = sum(cpu.values()) / jobs * 1000
    print(f"{'kind':<22}{'CPU ms/job':>12}{'share':>8}")
    for kind in [*KIND_ORDER, *sorted(set(cpu) - set(KIND_ORDER))]:
        if kind not in cpu or (kind.startswith("workers:") and cpu[kind] == 0):
            continue
        ms = cpu[kind] / jobs * 1000
        label = (
            kind.replace("workers:", "sandbox workers ") if kind.startswith("workers:") else kind
        )
        print(f"{label:<22}{ms:>12.1f}{ms / total_ms:>8.1%}")
    print(f"{'total':<22}{total_ms:>12.1f}{1:>8.0%}")
    thread_rows = print_threads(by_thread, jobs)
    if by_code:
        print()
        print("== CPU per job by code (perf across the machine, each kind's CPU shared by samples)")
        if code_samples:
            per_kind = {kind: seconds / jobs * 1000 for kind, seconds in cpu.items()}
            for line in cpusplit.report(code_samples, per_kind):
                print(line)
        else:
            print("no samples: perf is missing here, or may not sample the whole machine")
    upload_seconds = upload_marks[0] - phase_started
    upload_machine_ms = (upload_marks[2] - machine0) * TICK_SECONDS / jobs * 1000
    upload_client_ms = (upload_marks[1] - client0) / jobs * 1000
    print(
        f"of the client's {cpu['client'] / jobs * 1000:.1f} ms/job, the /proc sampler took "
        f"{sampler.own_cpu_seconds / jobs * 1000:.1f}; the uploads ({upload_seconds:.1f} s of "
        f"the {phase_seconds:.1f} s phase) took {upload_machine_ms:.1f} ms/job machine-wide, "
        f"{upload_client_ms:.1f} of it in the client"
    )
    machine_ms = machine * TICK_SECONDS / jobs * 1000
    print(
        f"machine-wide (/proc/stat, every process on the machine): {machine_ms:.1f} ms/job "
        f"over {phase_seconds:.1f} s"
    )
    print(
        f"bare libraries: {bare_cores_ms:.1f} ms CPU/packet ({cores} processes at once), "
        f"{bare_one_ms:.1f} ms (one process); the ratios take the lower, {bare_ms:.1f} ms"
    )
    print(
        f"Quire total / bare: {total_ms:.1f} / {bare_ms:.1f} = {total_ms / bare_ms:.2f}x "
        f"(aim <= {AIM_CPU:g}x: {'met' if total_ms / bare_ms <= AIM_CPU else 'NOT met'}); "
        f"machine-wide / bare: {machine_ms / bare_ms:.2f}x"
    )

    print()
    client_own = cpu["client"] - sampler.own_cpu_seconds
    budget_rows = print_budgets(
        {**cpu, "client": client_own},
        {part: seconds / jobs * 1000 for part, seconds in bare_parts.items()},
        jobs,
        skeleton,
    )

    print()
    print_traffic(traffic, jobs)

    print()
    print("== resident memory (VmRSS): right after the run, and the peak while sampling it")
    print(f"{'process':<34}{'after MiB':>10}{'peak MiB':>10}")
    for kind in KIND_ORDER:
        if kind not in memory:
            continue
        now, peak, count = memory[kind]
        if kind.startswith("workers:"):
            label = f"sandbox workers {kind[8:]} ({count} procs)"
            print(f"{label:<34}{now / MIB:>10.0f}{peak / MIB:>10.0f}  (sum; peak of one)")
        else:
            flag = "  ABOVE 150 MiB" if max(now, peak) > RSS_LIMIT else ""
            print(f"{kind:<34}{now / MIB:>10.0f}{peak / MIB:>10.0f}{flag}")
    services_over = [k for k in SERVICES if k in memory and max(memory[k][:2]) > RSS_LIMIT]
    print(f"service processes above 150 MiB: {', '.join(services_over) or 'none'}")

    print()
    print(f"== idle stack, {IDLE_JOBS} single jobs one after another (seen through WatchJob)")
    p50 = percentile(idle, 0.5)
    print(
        f"submit to COMPLETED: {spread(idle)} "
        f"(aim p50 <= {AIM_IDLE_P50 * 1000:.0f} ms: {'met' if p50 <= AIM_IDLE_P50 else 'NOT met'})"
    )

    print()
    load_rate = max(LOAD_SHARE * pipeline_rate, 0.1)
    print(
        f"== open loop at {LOAD_SHARE:.0%} of the measured rate: {load_rate:.2f} arrivals/s, "
        f"{len(rpc)} jobs over {len(rpc) / load_rate:.1f} s "
        f"({'sources inline in SubmitJob' if INLINE else 'sources uploaded beforehand'})"
    )
    p99 = percentile(rpc, 0.99)
    print(
        f"SubmitJob RPC: {spread(rpc)} (aim p99 <= {AIM_SUBMIT_P99 * 1000:.0f} ms: "
        f"{'met' if p99 <= AIM_SUBMIT_P99 else 'NOT met'}); "
        f"latest arrival {late * 1000:.1f} ms behind schedule"
    )
    completed = load_outcomes.get(State.COMPLETED, 0)
    print(
        f"jobs: {load_outcomes}; {'all' if completed == len(rpc) else 'NOT all'} completed, "
        f"the last {drain:.1f} s after the last arrival"
    )
    idle_floor, load_floor, probe_rpc, probe_outcomes = durable
    print()
    floor_p99 = print_durable_floor(
        idle_floor, load_floor, load_rate, probe_rpc, probe_outcomes, keeps_sources=INLINE
    )

    print()
    wire_ms = per_job * (sign_us + verify_us) / 1000
    budget_ms = cores / pipeline_rate * 1000
    print(
        f"credentials and verification: {per_job:.1f} signed messages per job, "
        f"sign {sign_us:.0f} us + verify {verify_us:.0f} us each = {wire_ms:.2f} ms CPU per job, "
        f"{wire_ms / budget_ms:.1%} of the machine's CPU per completed job "
        f"({budget_ms:.0f} ms on {cores} cores); NATS logins are checked once per "
        "connection (bcrypt), not per message"
    )
    print(f"caller proof on each service-to-service gRPC call: {call_us:.0f} us (make + check)")
    print(
        f"encryption at rest: {sealed / 1024:.0f} KiB sealed + {opened / 1024:.0f} KiB opened "
        f"per job; AES-256-GCM {cipher_ms:.3f} ms CPU per job "
        f"({cipher_ms / budget_ms:.2%} of the machine's CPU per completed job); "
        f"plaintext copies in private directories (documents over the sandbox's in-memory "
        f"bound: decrypt, hash, write, remove) {copies:.1f} per job, "
        f"{copy_ms:.2f} ms per job ({copy_ms / budget_ms:.1%})"
    )

    print()
    print_floor(
        bare_ms, total_ms, per_job, message_bytes, message_floor, call_floor, wire_ms, cores
    )

    print()
    skeleton_rows = print_skeleton(skeleton, bare_ms, total_ms, limit, cores, bare_one / jobs)

    print()
    writes = sum(kinds.get("write", 0.0) for kinds in transactions.values()) / jobs
    reads = sum(kinds.get("read", 0.0) for kinds in transactions.values()) / jobs
    print(
        "database transactions per job, write + read: "
        + ", ".join(
            f"{service} {kinds.get('write', 0) / jobs:.1f} + {kinds.get('read', 0) / jobs:.1f}"
            for service, kinds in transactions.items()
        )
    )
    print(
        f"a write transaction {write_ms:.3f} ms CPU, a read {read_ms:.3f} ms "
        f"(quire.database on SQLite, its thread included); a kept blob {blob_ms:.3f} ms"
    )
    cost_rows = print_parts(
        cost_parts(
            messages=per_job,
            message_ms=message_floor.total_ms,
            calls=(0 if INLINE else PACKET_SOURCES) + 2,
            call_ms=call_floor.total_ms,
            writes=writes,
            write_ms=write_ms,
            reads=reads,
            read_ms=read_ms,
            blobs=blobs_per_job,
            blob_ms=blob_ms,
            signatures_ms=wire_ms,
            pdf_ms=bare_ms,
        ),
        total_ms,
    )
    document = os.environ.get("BENCH_DOCS", "")
    if document and DOCUMENT_SECTION is None:
        print(f"\n{document} not written: its sections are the standard and the lease class")
    elif document:
        headline = [
            "| figure | measured | aim |",
            "|---|---|---|",
            f"| completed jobs/s ÷ bare libraries on every core | {ratio:.2f} "
            f"({pipeline_rate:.1f} / {limit:.1f}) | ≥ {AIM_SHARE:.2f} |",
            f"| CPU per job, every process ÷ bare libraries | {total_ms / bare_ms:.2f}x "
            f"({total_ms:.1f} / {bare_ms:.1f} ms) | ≤ {AIM_CPU:g}x |",
            *skeleton_rows["cpu"],
            f"| idle single job, submit to `COMPLETED` (p50) | {p50 * 1000:.0f} ms "
            f"| ≤ {AIM_IDLE_P50 * 1000:.0f} ms |",
            *skeleton_rows["idle"],
            f"| `SubmitJob` p99 at {LOAD_SHARE:.0%} of measured capacity | {p99 * 1000:.1f} ms "
            f"| ≤ {AIM_SUBMIT_P99 * 1000:.0f} ms |",
            f"| its floor: {'sources kept, then ' if INLINE else ''}the job committed, no "
            f"service code, beside the stack (p99 at {LOAD_SHARE:.0%}) | "
            f"{floor_p99 * 1000:.1f} ms | under {AIM_SUBMIT_P99 * 1000:.0f} ms, or the aim "
            "above cannot be met |",
            f"| completed jobs/s, two replicas of every stage ÷ one | "
            f"{replica_rate / pipeline_rate:.2f} ({replica_rate:.1f} / {pipeline_rate:.1f}) | ≥ 1 |",
        ]
        per_service = [
            "| service | write transactions per job | read transactions per job |",
            "|---|---|---|",
            *(
                f"| {service} | {kinds.get('write', 0) / jobs:.1f} "
                f"| {kinds.get('read', 0) / jobs:.1f} |"
                for service, kinds in transactions.items()
            ),
        ]
        write_document(
            ROOT / document,
            [
                "### Figures against the aims",
                "",
                *headline,
                "",
                "### CPU budget per job, by process",
                "",
                *budget_rows,
                "",
                "### Cost model per job",
                "",
                *cost_rows,
                "",
                "### Database transactions per job, by service",
                "",
                *per_service,
                "",
                "### CPU per job in each service process, by thread",
                "",
                *thread_rows,
            ],
            f"BENCH_JOBS={jobs} make bench"
            if not DOCUMENT_SECTION
            else f"BENCH_PAGES={','.join(map(str, PAGES_PER_DOCUMENT))} BENCH_JOBS={jobs} "
            "python bench/pipeline_bench.py",
            where,
            label=DOCUMENT_SECTION or "",
        )
        print(f"\nwrote the generated section of {document}")


THREAD_COLUMNS = (LOOP, *ROLES, "other")


def _ticks_between(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """CPU seconds by thread role between two ``thread_role_ticks`` readings."""
    return {
        role: max(0, ticks - before.get(role, 0)) * TICK_SECONDS for role, ticks in after.items()
    }


def print_threads(by_thread: dict[str, dict[str, float]], jobs: int) -> list[str]:
    """Each service process's CPU per job by thread role (``quire.threadnames``):
    its event loop, database writes and reads, calls into sandbox workers,
    blob and file work, and the rest (gRPC's core, metrics, tracing). Returns
    the same as Markdown rows."""
    print()
    print("== CPU per job in each service process, by thread (ms; /proc/<pid>/task)")
    print(f"{'kind':<12}" + "".join(f"{column:>12}" for column in THREAD_COLUMNS))
    rows = [
        "| process | " + " | ".join(THREAD_COLUMNS) + " |",
        "|---|" + "---|" * len(THREAD_COLUMNS),
    ]
    for kind in SERVICES:
        if kind not in by_thread:
            continue
        values = [by_thread[kind].get(column, 0.0) / jobs * 1000 for column in THREAD_COLUMNS]
        print(f"{kind:<12}" + "".join(f"{value:>12.2f}" for value in values))
        rows.append(f"| {kind} | " + " | ".join(f"{value:.2f}" for value in values) + " |")
    return rows


def print_budgets(
    cpu: dict[str, float], bare_part_ms: dict[str, float], jobs: int, skeleton: Skeleton
) -> list[str]:
    """Each process kind's CPU per job beside its budget and beside what the
    design's skeleton (``bench/skeleton.py``) spent in the same process kind; a
    sandbox's measured figure is its overhead beyond the bare library part it
    does. Returns the table as Markdown rows too."""
    print("== CPU budget per job (ms; a sandbox's figure is beyond the bare library work)")
    print(f"{'process':<22}{'measured':>10}{'skeleton':>10}{'budget':>8}")
    rows = [
        "| process | CPU ms per job | the skeleton's | budget | |",
        "|---|---|---|---|---|",
    ]
    over, under_skeleton = [], []
    for kind, budget in BUDGET_MS.items():
        ms = cpu.get(kind, 0.0) / jobs * 1000
        label = kind
        if kind in BARE_PART:
            part = BARE_PART[kind]
            ms -= bare_part_ms.get(part, 0.0)
            label = f"sandbox {kind[8:]} - {part}"
        least = skeleton.ms_per_job(kind) if kind in skeleton.cpu_seconds else None
        flags = []
        if ms > budget:
            over.append(kind)
            flags.append("over")
        if least is not None and least > budget:
            under_skeleton.append(kind)
            flags.append("budget below the skeleton")
        shown = "—" if least is None else f"{least:.1f}"
        print(f"{label:<22}{ms:>10.1f}{shown:>10}{budget:>8.1f}  {'; '.join(flags).upper()}")
        rows.append(f"| {label} | {ms:.1f} | {shown} | {budget:.1f} | {'; '.join(flags)} |")
    parts = ", ".join(f"{part} {ms:.1f}" for part, ms in bare_part_ms.items())
    print(f"bare library parts, one process: {parts} ms per packet")
    line = f"budget line: {'met' if not over else 'FAILED'}" + (
        f" ({len(over)} over: {', '.join(over)})" if over else ""
    )
    if under_skeleton:
        line += f"; the skeleton alone spends more than the budget of {', '.join(under_skeleton)}"
    print(line)
    return [*rows, "", f"Bare library parts, one process: {parts} ms per packet; {line}."]


def skeleton_bounds(
    skeleton_ms: float, bare_ms: float, limit: float, cores: int
) -> tuple[float, float]:
    """The least CPU ratio and the greatest share of the machine's ``limit``
    (packets/s) any Quire could reach if it spent no more than the skeleton's
    CPU per job beside the bare work: ``(skeleton + bare) / bare``, and every
    core busy with nothing else, ``cores / (skeleton + bare)`` against the limit."""
    least = skeleton_ms + bare_ms
    return least / bare_ms, cores / least * 1000 / limit


def print_skeleton(
    skeleton: Skeleton,
    bare_ms: float,
    total_ms: float,
    limit: float,
    cores: int,
    bare_seconds: float,
) -> dict[str, list[str]]:
    """The design's skeleton against the room the CPU, share and idle aims
    leave; returns its rows for the figures table, by aim ("cpu", "idle")."""
    print("== the design's skeleton: five processes, the design's parts, no Quire code")
    print(
        f"{skeleton.jobs} jobs, {skeleton.rate:.1f} jobs/s with no PDF work, the cheapest of "
        f"{len(skeleton.pass_ms)} passes ("
        + ", ".join(f"{ms:.2f}" for ms in skeleton.pass_ms)
        + " ms per job) "
        f"({skeleton.ledger_entries} ledger entries, {skeleton.left_in_streams} messages "
        "left on its streams); CPU ms per job: "
        + ", ".join(f"{kind} {skeleton.ms_per_job(kind):.2f}" for kind in skeleton.cpu_seconds)
        + f"; total {skeleton.total_ms:.2f}"
    )
    ratio, share = skeleton_bounds(skeleton.total_ms, bare_ms, limit, cores)
    cpu_room = (AIM_CPU - 1) * bare_ms
    cpu_verdict = "leaves room" if ratio <= AIM_CPU else "CANNOT be met in this design"
    share_verdict = "leaves room" if share >= AIM_SHARE else "CANNOT be met in this design"
    print(
        f"the skeleton with the bare work: {ratio:.2f}x the bare libraries' CPU at the least "
        f"(CPU aim <= {AIM_CPU:g}x, room {cpu_room:.2f} ms, the skeleton "
        f"{skeleton.total_ms / cpu_room:.2f}x it: {cpu_verdict}); {share:.2f} of "
        f"the limit at the most (share aim >= {AIM_SHARE:.2f}: {share_verdict}); Quire "
        f"spends {total_ms - bare_ms - skeleton.total_ms:.1f} ms per job more than the "
        f"skeleton ({total_ms:.1f} against {skeleton.total_ms + bare_ms:.1f} with the bare work)"
    )
    rows: dict[str, list[str]] = {"idle": []}
    rows["cpu"] = [
        f"| the design's skeleton: CPU per job with no PDF work (five processes, the "
        f"design's parts, no Quire code) | {skeleton.total_ms:.1f} ms | ≤ {cpu_room:.1f} ms "
        f"({AIM_CPU - 1:g} x bare), or the CPU aim cannot be met |",
        f"| the most share the skeleton leaves (its CPU and the bare work on every core) | "
        f"{share:.2f} | ≥ {AIM_SHARE:.2f}, or the share aim cannot be met |",
    ]
    if skeleton.idle_seconds:
        # One packet's bare work in one process (wall clock) after the idle
        # skeleton's p50: what an idle job would take were Quire's code to cost
        # nothing beyond the skeleton's and the stages' work no more than the
        # libraries'.
        idle_ms = percentile(list(skeleton.idle_seconds), 0.5) * 1000
        least_ms = idle_ms + bare_seconds * 1000
        # Not a proof either way when over: the skeleton keeps its fsyncs in turn.
        verdict = (
            "leaves room"
            if least_ms <= AIM_IDLE_P50 * 1000
            else "over it, though the skeleton does not overlap its fsyncs"
        )
        print(
            f"idle skeleton, {len(skeleton.idle_seconds)} jobs one after another: "
            f"{spread(list(skeleton.idle_seconds))}; with one packet's bare work "
            f"({bare_seconds * 1000:.1f} ms) {least_ms:.1f} ms (aim p50 <= "
            f"{AIM_IDLE_P50 * 1000:.0f} ms: {verdict})"
        )
        rows["idle"].append(
            f"| the idle skeleton's submit to completed (p50), and one packet's bare work "
            f"| {idle_ms:.1f} + {bare_seconds * 1000:.1f} ms | ≤ {AIM_IDLE_P50 * 1000:.0f} ms "
            "leaves the idle aim room |"
        )
    return rows


def print_durable_floor(
    idle: DurableFloor,
    loaded: DurableFloor,
    rate: float,
    submits: list[float],
    outcomes: dict[str, int],
    *,
    keeps_sources: bool = True,
) -> float:
    """What a submit must make durable before it answers, timed on the idle
    stack and beside a second open-loop pass at ``rate`` (whose SubmitJob
    latencies are ``submits``), against the aim on SubmitJob's p99; the
    floor's p99 under load (NaN without samples). A submit that
    ``keeps_sources`` (they travel inside it) keeps them before its commit;
    one whose sources were uploaded beforehand only commits."""
    print(
        "== SubmitJob's durable floor: the packet's sources kept as blobs, then the job "
        "committed, with no service code (bench/latencyfloor.py)"
    )
    for label, floor in (("idle stack", idle), (f"at {LOAD_SHARE:.0%} load", loaded)):
        print(
            f"{label}: sources + commit {_spread_of(floor.sources)}; "
            f"the commit alone {_spread_of(floor.commit)} "
            f"({len(floor.sources)} + {len(floor.commit)} chains)"
        )
    completed = outcomes.get(State.COMPLETED, 0)
    total = sum(outcomes.values())
    print(
        f"(under load: a second open-loop pass at {rate:.2f} arrivals/s, the probe making "
        f"{PROBE_RATE:g} chains/s beside it; SubmitJob in that pass {_spread_of(submits)}; "
        f"{completed} of its {total} jobs completed)"
    )
    chain, samples = (
        ("sources + commit", loaded.sources) if keeps_sources else ("the commit", loaded.commit)
    )
    if not samples:
        print("the floor has no samples under load: no verdict")
        return math.nan
    floor_p99 = percentile(samples, 0.99)
    bound = lower_bound(samples, 0.99, FLOOR_CONFIDENCE)
    room = AIM_SUBMIT_P99 - floor_p99
    if room > 0:
        verdict = f"leaves {room * 1000:.1f} ms for the call and the services' code"
    elif bound is not None and bound > AIM_SUBMIT_P99:
        verdict = (
            "is below the floor: SubmitJob as designed cannot meet it on this file system "
            "beside this stack"
        )
    else:
        verdict = f"is below the floor's p99, but not with {FLOOR_CONFIDENCE:.0%} confidence"
    known = (
        f", at least {bound * 1000:.1f} ms with {FLOOR_CONFIDENCE:.0%} confidence"
        if bound is not None
        else ""
    )
    print(
        f"aim p99 <= {AIM_SUBMIT_P99 * 1000:.0f} ms against the p99 of {chain} under load, "
        f"{floor_p99 * 1000:.1f} ms ({len(samples)} chains{known}): the aim {verdict}"
    )
    return floor_p99


def _spread_of(values: list[float]) -> str:
    return spread(values) if values else "no samples"


def print_floor(
    bare_ms: float,
    total_ms: float,
    messages: float,
    message_bytes: int,
    message: Floor,
    call: Floor,
    wire_ms: float,
    cores: int,
) -> None:
    """What the design's per-job messages and calls cost with no Quire code
    around them, against what the aims leave for everything but the PDF work."""
    # SubmitJob (carrying the sources, or after an upload per source), WatchJob.
    uploads = 0 if INLINE else PACKET_SOURCES
    calls = uploads + 2
    messaging_ms = messages * message.total_ms
    calls_ms = calls * call.total_ms
    floor_ms = messaging_ms + calls_ms + wire_ms
    print("== the design's floor: one queue message per job step, one RPC per call")
    print(
        f"a queue message on a nats-server as the stack runs it (file store, sync_interval "
        f"always), {message_bytes} B, published with an ack, fetched in batches of "
        f"{IN_FLIGHT}, acked: nats-server {message.server_ms:.3f} + client library "
        f"{message.client_ms:.3f} = {message.total_ms:.3f} ms CPU"
    )
    print(
        f"an empty gRPC call (health check on admission), {IN_FLIGHT} at once: service "
        f"{call.server_ms:.3f} + client {call.client_ms:.3f} = {call.total_ms:.3f} ms CPU"
    )
    print(
        f"per job: {messages:.1f} messages = {messaging_ms:.2f} ms, {calls} calls "
        f"({uploads} uploads, SubmitJob, WatchJob) = {calls_ms:.2f} ms, message "
        f"signatures {wire_ms:.2f} ms: floor {floor_ms:.2f} ms CPU per job, before any "
        "database write, blob, lease or Quire code"
    )
    cpu_room = (AIM_CPU - 1) * bare_ms
    rate_room = (1 / AIM_SHARE - 1) * bare_ms
    print(
        f"room the aims leave beside the bare work ({bare_ms:.1f} ms): CPU aim "
        f"{AIM_CPU - 1:g} x bare = {cpu_room:.2f} ms, throughput aim (1/{AIM_SHARE:g} - 1) x "
        f"bare = {rate_room:.2f} ms; the floor is {floor_ms / cpu_room:.2f}x and "
        f"{floor_ms / rate_room:.2f}x that; Quire's whole overhead is {total_ms - bare_ms:.1f} ms "
        f"({(total_ms - bare_ms) / floor_ms:.1f}x the floor)"
    )
    best_rate = cores / (bare_ms + floor_ms) * 1000
    bare_rate = cores / bare_ms * 1000
    print(
        f"so on this machine the design cannot pass {best_rate:.1f} packets/s of the bare "
        f"{bare_rate:.1f} (from CPU): {best_rate / bare_rate:.2f} of the limit at best"
    )


if __name__ == "__main__":
    main()
