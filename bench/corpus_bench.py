"""Corpus benchmark: every file of the shared corpus as a one-document job.

Starts the embedded stack in a temporary directory, creates a tenant with a
high outstanding-jobs limit, uploads and submits every corpus file (bounded
concurrency) and waits for each job to end. Beside it, poppler's ``pdfinfo``
classifies each file: "pdfinfo-valid" when it exits 0 and does not report
``Encrypted: yes``, "clean" when in addition it writes nothing to stderr.

Prints the outcome counts, the false-rejection rate (pdfinfo-valid files that
did not end COMPLETED; issue 13 aims at <= 2 %) and MALFORMED_PDF's share of
it, validation time per job from the audit ledger (VALIDATING entered to
left), terminal latency, and the peak RSS of the validator's sandbox worker
processes. Then, off the stack: every signed artifact drawn by pdfium beside
its original (files whose signed output shows a page visibly other than the
original: issue 36 aims at 0), and the validator's inspection CPU per file
(``inspect_source`` with repair and the second reader, one process per core).

    make bench-corpus                          # the whole corpus
    BENCH_CORPUS_LIMIT=200 make bench-corpus   # the first 200 files (sorted)

The corpus is read in place (QUIRE_CORPUS, default ../shared/corpus); nothing
is copied into the repository.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.pipeline import State
from quire.stack.supervisor import Stack, StackInfo
from quire.type import job_pb2, queue_pb2

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("QUIRE_CORPUS", ROOT.parent / "shared" / "corpus")).resolve()
IN_FLIGHT = int(os.environ.get("BENCH_CORPUS_IN_FLIGHT", "6"))
JOB_TIMEOUT_SECONDS = 300.0
PDFINFO_TIMEOUT_SECONDS = 30.0
SAMPLE_SECONDS = 0.2
AIM = 0.02
# Refusals by the ruleset's policy rather than by damage: counted above as
# false rejections all the same, and shown apart.
POLICY_REASONS = {"ACTIVE_CONTENT", "TOO_MANY_PAGES"}
SPAWN = multiprocessing.get_context("spawn")
"""Worker processes started afresh: the bench's own threads (the RSS sampler)
must not be forked into them."""
CHANGED = 0.002
"""Share of a page's pixels that must move for the page to count as visibly
other (as in tests/test_accepted_corpus_signs.py)."""
MOVED = 0.01


@dataclass(frozen=True)
class Outcome:
    state: str
    reason: str
    job: str
    latency: float | None  # submit to terminal, seconds
    artifact: str = ""  # the signed PDF, downloaded, for a COMPLETED job


@dataclass(frozen=True)
class Pdfinfo:
    valid: bool
    clean: bool
    note: str


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def run_pdfinfo(path: Path) -> Pdfinfo:
    try:
        done = subprocess.run(
            ["/usr/bin/pdfinfo", str(path)],
            capture_output=True,
            timeout=PDFINFO_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Pdfinfo(False, False, "timeout")
    encrypted = any(
        line.split(b":", 1)[1].strip().startswith(b"yes")
        for line in done.stdout.splitlines()
        if line.startswith(b"Encrypted:")
    )
    valid = done.returncode == 0 and not encrypted
    note = "encrypted" if encrypted else f"exit {done.returncode}"
    return Pdfinfo(valid, valid and not done.stderr.strip(), note)


class RssSampler(threading.Thread):
    """Samples VmRSS (and VmHWM) of every descendant of one process."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.peak_rss_kib = 0
        self.peak_sum_kib = 0
        self.hwm_kib: dict[int, int] = {}  # pid -> last VmHWM seen
        self.seen: dict[int, str] = {}  # pid -> name
        self.samples = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def _descendants(self) -> list[int]:
        children: dict[int, list[int]] = collections.defaultdict(list)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children[ppid].append(int(entry))
        found, todo = [], [self.root_pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_SECONDS):
            total = 0
            for pid in self._descendants():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if "VmRSS" not in fields:
                    continue  # a zombie
                rss = int(fields["VmRSS"].split()[0])
                hwm = int(fields.get("VmHWM", "0 kB").split()[0])
                if pid not in self.seen:
                    self.seen[pid] = _command(pid) or fields.get("Name", "?").strip()
                self.hwm_kib[pid] = max(self.hwm_kib.get(pid, 0), hwm)
                self.peak_rss_kib = max(self.peak_rss_kib, rss)
                total += rss
            self.peak_sum_kib = max(self.peak_sum_kib, total)
            self.samples += 1


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)[:80]


def declared_type(path: Path) -> str:
    return "application/json" if path.suffix == ".json" else "application/pdf"


async def submit_all(info: StackInfo, files: list[Path], artifacts: Path) -> dict[Path, Outcome]:
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        tenant = await admin.create_tenant("corpus-bench", max_outstanding_jobs=100_000)
    outcomes: dict[Path, Outcome] = {}
    gate = asyncio.Semaphore(IN_FLIGHT)
    done = 0

    async with AdmissionClient(info.endpoints["admission"], tenant.secret) as client:

        async def one(path: Path) -> None:
            nonlocal done
            async with gate:
                try:
                    source = await client.upload(path, declared_type(path))
                except grpc.aio.AioRpcError as error:
                    outcomes[path] = Outcome(
                        "REFUSED", reason_of(error) or error.code().name, "", None
                    )
                else:
                    started = time.monotonic()
                    try:
                        job = await client.submit([PacketItem("doc", source.sha256)])
                    except grpc.aio.AioRpcError as error:
                        reason = reason_of(error) or error.code().name
                        outcomes[path] = Outcome("SUBMIT-REFUSED", reason, "", None)
                    else:
                        try:
                            job = await client.wait(job.name, timeout=JOB_TIMEOUT_SECONDS)
                            state, reason = state_name(job.state), job.reason_code
                            if job.reason_detail:
                                reason = f"{reason}/{job.reason_detail}"
                        except TimeoutError:
                            state, reason = "TIMEOUT", f"> {JOB_TIMEOUT_SECONDS:.0f} s"
                        latency = time.monotonic() - started
                        signed = ""
                        if state == State.COMPLETED:
                            target = artifacts / f"{source.sha256}.pdf"
                            await client.download(job.name, target)
                            signed = str(target)
                        outcomes[path] = Outcome(state, reason, job.name, latency, signed)
                done += 1
                if done % 100 == 0:
                    print(f"  ... {done}/{len(files)} ended", flush=True)

        await asyncio.gather(*(one(path) for path in files))
    return outcomes


def from_ledger(
    data_dir: Path, jobs: set[str], wait: float = 60.0
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Per job: first entry into VALIDATING to the last transition out of it,
    and the damage codes of the sources the validator repaired, from audit's
    ledger (read-only). Waits a little for audit to catch up."""
    deadline = time.monotonic() + wait
    while True:
        entered: dict[str, float] = {}
        left: dict[str, float] = {}
        repaired: dict[str, list[str]] = {}
        uri = f"file:{data_dir / 'audit' / 'audit.db'}?mode=ro"
        with sqlite3.connect(uri, uri=True) as db:
            rows = [bytes(row[0]) for row in db.execute("SELECT event FROM ledger")]
        for raw in rows:
            event = queue_pb2.TransitionEvent()
            event.ParseFromString(raw)
            at = event.occur_time.seconds + event.occur_time.nanos / 1e9
            if event.to_state == job_pb2.JOB_STATE_VALIDATING:
                entered[event.job] = min(entered.get(event.job, at), at)
            if event.from_state == job_pb2.JOB_STATE_VALIDATING:
                left[event.job] = max(left.get(event.job, at), at)
            if event.repairs:
                repaired[event.job] = [code for r in event.repairs for code in r.warnings]
        result = {job: left[job] - entered[job] for job in entered if job in left}
        if jobs <= result.keys() or time.monotonic() > deadline:
            return result, repaired
        time.sleep(1.0)


def main() -> None:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file())
    if not files:
        sys.exit(f"corpus not found or empty at {CORPUS}")
    limit = int(os.environ.get("BENCH_CORPUS_LIMIT", "0"))
    if limit:
        files = files[:limit]
    print(f"corpus: {CORPUS}, {len(files)} files, {IN_FLIGHT} jobs in flight")

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        infos = dict(zip(files, pool.map(run_pdfinfo, files), strict=True))
    print(f"pdfinfo over the corpus: {time.perf_counter() - started:.1f} s")

    with tempfile.TemporaryDirectory(prefix="quire-corpus-bench-") as temp:
        data_dir = Path(temp) / "stack"
        artifacts = Path(temp) / "artifacts"
        artifacts.mkdir()
        stack = Stack(data_dir)
        info = stack.start()
        try:
            validator_pid = stack.pid("validator")
            sampler = RssSampler(validator_pid)
            sampler.start()
            started = time.perf_counter()
            try:
                outcomes = asyncio.run(submit_all(info, files, artifacts))
            finally:
                sampler.stop()
            elapsed = time.perf_counter() - started
            jobs = {o.job for o in outcomes.values() if o.job}
            validating, repaired = from_ledger(data_dir, jobs)
            restarts = stack.restarts("validator")
            same_validator = stack.pid("validator") == validator_pid
        finally:
            stack.stop()

        report(
            files, infos, outcomes, validating, repaired, sampler, elapsed, restarts, same_validator
        )
        faithful(outcomes)
    inspection_cpu(files)


def _change(pair: tuple[str, str]) -> float | None:
    from quire.validator.secondreader import visible_change

    shares = visible_change(*pair)
    return None if shares is None else max(shares, default=0.0)


def faithful(outcomes: dict[Path, Outcome]) -> None:
    """Each signed artifact against its original, as pdfium draws them."""
    signed = [
        (p, o.artifact)
        for p, o in outcomes.items()
        if o.artifact and declared_type(p) == "application/pdf"
    ]
    with ProcessPoolExecutor(os.cpu_count() or 2, mp_context=SPAWN) as pool:
        changes = list(pool.map(_change, [(str(p), a) for p, a in signed], chunksize=8))
    unreadable = [p for (p, _), c in zip(signed, changes, strict=True) if c is None]
    changed = sorted(
        (
            (c, p)
            for (p, _), c in zip(signed, changes, strict=True)
            if c is not None and c > CHANGED
        ),
        reverse=True,
    )
    moved = [p for c, p in changed if c > MOVED]
    print()
    print(
        f"signed artifacts drawn beside their originals (pdfium, form fields drawn): "
        f"{len(signed)}; a page visibly other (> {CHANGED:.1%} of its pixels moved): "
        f"{len(changed)}, of which more than {MOVED:.0%}: {len(moved)}; "
        f"unreadable to pdfium: {len(unreadable)}"
    )
    for share, path in changed[:10]:
        print(f"  {share:6.2%}  {path.relative_to(CORPUS)}")
    for path in unreadable[:10]:
        print(f"  unreadable  {path.relative_to(CORPUS)}")


def _inspection_seconds(path: str) -> float:
    import hashlib

    from quire.validator.inspection import inspect_source

    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    with tempfile.TemporaryDirectory() as work:
        started = time.process_time()
        inspect_source(path, digest, "application/pdf", None, str(Path(work) / "clean.pdf"))
        return time.process_time() - started


def inspection_cpu(files: list[Path]) -> None:
    """The validator's inspection CPU per PDF, off the stack."""
    pdfs = [str(p) for p in files if p.suffix.lower() == ".pdf"]
    with ProcessPoolExecutor(os.cpu_count() or 2, mp_context=SPAWN) as pool:
        seconds = list(pool.map(_inspection_seconds, pdfs, chunksize=8))
    print(
        f"validator inspection CPU per PDF ({len(pdfs)} files, repair and second reader "
        f"included): p50 {percentile(seconds, 0.5) * 1000:.1f} ms, "
        f"p95 {percentile(seconds, 0.95) * 1000:.1f} ms, max {max(seconds) * 1000:.0f} ms, "
        f"total {sum(seconds):.1f} s"
    )


def report(
    files: list[Path],
    infos: dict[Path, Pdfinfo],
    outcomes: dict[Path, Outcome],
    validating: dict[str, float],
    repaired: dict[str, list[str]],
    sampler: RssSampler,
    elapsed: float,
    restarts: int,
    same_validator: bool,
) -> None:
    print()
    print(f"files: {len(files)}, run {elapsed:.0f} s ({len(files) / elapsed:.2f} files/s)")
    counts = collections.Counter(f"{o.state} {o.reason}".strip() for o in outcomes.values())
    print("outcomes:")
    for key, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {count:5d}  {key}")

    valid = [p for p in files if infos[p].valid]
    clean = [p for p in valid if infos[p].clean]
    print(
        f"pdfinfo: {len(valid)} valid (exit 0, not encrypted), {len(clean)} of them clean "
        f"(no stderr); {len(files) - len(valid)} not valid"
    )
    for label, group in (("pdfinfo-valid", valid), ("pdfinfo-clean", clean)):
        false = [p for p in group if outcomes[p].state != State.COMPLETED]
        rate = len(false) / len(group) if group else 0.0
        verdict = "meets" if rate <= AIM else "misses"
        print(
            f"false rejections among {label}: {len(false)}/{len(group)} = {rate:.1%} "
            f"({verdict} the aim of <= {AIM:.0%})"
        )
        reasons = collections.Counter(
            f"{outcomes[p].state} {outcomes[p].reason}".strip() for p in false
        )
        for key, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
            print(f"  {count:5d}  {key}")
        policy = [p for p in false if outcomes[p].reason.split("/")[0] in POLICY_REASONS]
        if policy:
            rest = len(false) - len(policy)
            print(
                f"  (without the {len(policy)} refused by policy, "
                f"{'/'.join(sorted(POLICY_REASONS))}: {rest}/{len(group)} = "
                f"{rest / len(group):.1%})"
            )
        malformed = [p for p in false if outcomes[p].reason.startswith("MALFORMED_PDF")]
        print(
            f"  (MALFORMED_PDF alone: {len(malformed)}/{len(group)} = {len(malformed) / len(group):.1%})"
        )
    completed = {o.job for o in outcomes.values() if o.state == State.COMPLETED}
    fixed = [codes for job, codes in repaired.items() if job in completed]
    print(f"COMPLETED after a repair (ruleset policy normalize): {len(fixed)}; damage repaired:")
    damage = collections.Counter(code for codes in fixed for code in set(codes))
    for code, count in sorted(damage.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {count:5d}  {code}")
    accepted_invalid = [
        p for p in files if not infos[p].valid and outcomes[p].state == State.COMPLETED
    ]
    print(f"COMPLETED although pdfinfo refused or found encryption: {len(accepted_invalid)}")
    for path in accepted_invalid[:10]:
        print(f"  {path.relative_to(CORPUS)}  [pdfinfo {infos[path].note}]")

    times = [validating[o.job] for o in outcomes.values() if o.job in validating]
    missing = sum(1 for o in outcomes.values() if o.job and o.job not in validating)
    if times:
        print(
            f"validation time per job (ledger, VALIDATING entered to left; {len(times)} jobs"
            f"{f', {missing} without both transitions' if missing else ''}): "
            f"p50 {percentile(times, 0.50) * 1000:.0f} ms, "
            f"p99 {percentile(times, 0.99) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
        )
    latencies = [o.latency for o in outcomes.values() if o.latency is not None]
    if latencies:
        print(
            f"terminal latency (submit to terminal, {len(latencies)} jobs): "
            f"p50 {percentile(latencies, 0.50) * 1000:.0f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
    print(
        f"validator descendants: {len(sampler.seen)} processes seen in "
        f"{sampler.samples} samples every {SAMPLE_SECONDS} s; peak VmRSS of one "
        f"{sampler.peak_rss_kib / 1024:.0f} MiB, peak sum {sampler.peak_sum_kib / 1024:.0f} MiB; "
        f"highest VmHWM seen {max(sampler.hwm_kib.values(), default=0) / 1024:.0f} MiB"
    )
    hwms = sorted(sampler.hwm_kib.items(), key=lambda item: -item[1])
    print("  VmHWM per descendant, highest first:")
    for pid, kib in hwms[:20]:
        print(f"    pid {pid}: {kib / 1024:.0f} MiB  {sampler.seen.get(pid, '?')}")
    if len(hwms) > 20:
        print(f"    ... {len(hwms) - 20} more")
    print(f"validator restarts: {restarts}, same validator pid at the end: {same_validator}")

    false_valid = [p for p in valid if outcomes[p].state != State.COMPLETED]
    false_valid.sort(key=lambda p: (-len(str(p.relative_to(CORPUS))), str(p)))
    print("falsely rejected pdfinfo-valid files (10 longest paths):")
    for path in false_valid[:10]:
        outcome = outcomes[path]
        tag = "clean" if infos[path].clean else "warns"
        print(f"  {path.relative_to(CORPUS)}  [{outcome.state} {outcome.reason}; pdfinfo {tag}]")

    slow = sorted(
        (p for p in false_valid if outcomes[p].job in validating),
        key=lambda p: -validating[outcomes[p].job],
    )
    print("falsely rejected pdfinfo-valid files (10 longest validation times):")
    for path in slow[:10]:
        outcome = outcomes[path]
        print(
            f"  {validating[outcome.job] * 1000:6.0f} ms  {path.relative_to(CORPUS)}  "
            f"[{outcome.state} {outcome.reason}]"
        )


if __name__ == "__main__":
    main()
