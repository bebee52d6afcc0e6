"""Pipeline benchmark: N packets (3 PDFs, 12 pages each) through the embedded stack.

Prints completed jobs per second and p50/p95/p99 terminal latency (submit to
COMPLETED), and, in the same run on the same inputs, the throughput of the
same work done by the bare libraries in one process (sniff, open, merge,
sign), with the ratio between the two.

    make bench                 # BENCH_JOBS=40 by default
    BENCH_JOBS=200 make bench
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pdfs import write_text_pdf  # noqa: E402
from quire.blobstore import sha256_file  # noqa: E402
from quire.callers import CallerVerifier, prove  # noqa: E402
from quire.client import AdmissionClient, PacketItem  # noqa: E402
from quire.identity import IdentitySettings, ServiceIdentity, TrustStore  # noqa: E402
from quire.jobs import state_name  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402
from quire.wire import SIGNATURE_HEADER, WireSigner, WireVerifier  # noqa: E402

PAGES_PER_DOCUMENT = (4, 5, 3)  # 12 pages per packet
IN_FLIGHT = 16


def make_packets(folder: Path, count: int) -> list[list[Path]]:
    packets = []
    for index in range(count):
        packet = []
        for doc, pages in enumerate(PAGES_PER_DOCUMENT):
            texts = [f"packet {index} document {doc} page {page}" for page in range(pages)]
            packet.append(write_text_pdf(folder / f"p{index}-d{doc}.pdf", texts))
        packets.append(packet)
    return packets


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


async def run_pipeline(
    stack: Stack, packets: list[list[Path]]
) -> tuple[float, list[float], dict[str, int]]:
    info_endpoint = stack.endpoints["admission"]
    token = (stack.data_dir / "admission" / "dev-token").read_text().strip()
    outcomes: dict[str, int] = {}
    latencies: list[float] = []
    async with AdmissionClient(info_endpoint, token) as client:
        uploaded: list[list[str]] = []
        for packet in packets:
            uploaded.append([(await client.upload(path)).sha256 for path in packet])
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(digests: list[str]) -> None:
            async with gate:
                started = time.perf_counter()
                job = await client.submit([PacketItem(f"d{i}", d) for i, d in enumerate(digests)])
                job = await client.wait(job.name, timeout=600)
                latencies.append(time.perf_counter() - started)
                state = state_name(job.state)
                outcomes[state] = outcomes.get(state, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one(digests) for digests in uploaded))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, outcomes


def run_bare_libraries(
    packets: list[list[Path]], key_path: str, cert_path: str, out: Path
) -> float:
    """The same work, in one process, with no queues, databases or services."""
    import magic
    import pikepdf

    from quire.assembler.merge import PacketSource, assemble_packet
    from quire.signer.signing import sign_packet

    sniffer = magic.Magic(mime=True)
    started = time.perf_counter()
    for index, packet in enumerate(packets):
        sources = []
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
        packet_digest = assemble_packet(
            sources, str(merged), profile="simple", manifest_digest="0" * 64, workdir=str(out)
        ).sha256
        sign_packet(
            str(merged), packet_digest, str(out / f"signed-{index}.pdf"), key_path, cert_path
        )
    return time.perf_counter() - started


def wire_cost(data_dir: Path, samples: int = 2000) -> tuple[float, float, float]:
    """(messages per job, sign µs, verify µs) of the provenance every queue message
    carries: each is signed once by its producer and verified once by its
    consumer (job-gate entries count as messages). Measured on the run's own
    tasks and events with the stack's own keys."""
    with sqlite3.connect(f"file:{data_dir / 'audit' / 'audit.db'}?mode=ro", uri=True) as db:
        events = [bytes(row[0]) for row in db.execute("SELECT event FROM ledger")]
        jobs = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    with sqlite3.connect(f"file:{data_dir / 'admission' / 'admission.db'}?mode=ro", uri=True) as db:
        tasks = [bytes(row[0]) for row in db.execute("SELECT task FROM jobs")]
    # Four tasks (validate, assemble, sign, commit), the events, one gate claim.
    per_job = 4 + len(events) / max(jobs, 1) + 1
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
    return per_job, (signed - started) / samples * 1e6, (verified - signed) / samples * 1e6


def at_rest_cost(data_dir: Path, jobs: int) -> tuple[float, float, float, float]:
    """(sealed bytes, opened bytes, AES-GCM ms, plaintext-copy ms) per job of
    encryption at rest, on the run's own blobs with the stack's own data keys.

    A job's bytes pass the seal this often: its sources are sealed on upload
    and opened by the validator and the assembler; its packet is sealed by the
    assembler and opened by the signer; its artifact is sealed by the signer
    and opened by audit (to hash it) and by the download. The AES-GCM figure
    is the cipher alone; the copy figure is what the stages now also do for
    each opening that needs a file (decrypt, check the digest, write the
    plaintext into the attempt's private directory, remove it)."""
    from quire.sealing import Sealer, open_sealed, read_header
    from quire.storage import open_blob_store, tool_kek_settings

    store = open_blob_store(data_dir / "blobs", data_dir, tool_kek_settings(data_dir, {}))
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
                digest = hashlib.sha256(plain).hexdigest()
                started = time.perf_counter()
                for _ in range(opens):
                    store.materialize(key, digest, Path(scratch)).unlink()
                copy_seconds += time.perf_counter() - started
                sealed_bytes += seals * len(plain)
                opened_bytes += opens * len(plain)
    return (
        sealed_bytes / jobs,
        opened_bytes / jobs,
        cipher_seconds / jobs * 1000,
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


def main() -> None:
    jobs = int(os.environ.get("BENCH_JOBS", "40"))
    with tempfile.TemporaryDirectory(prefix="quire-bench-") as temp:
        if os.environ.get("BENCH_KEEP"):
            temp = tempfile.mkdtemp(prefix="quire-bench-kept-")
            print(f"keeping the stack data in {temp}")
        folder = Path(temp)
        (folder / "inputs").mkdir()
        (folder / "bare").mkdir()
        packets = make_packets(folder / "inputs", jobs)
        stack = Stack(folder / "stack")
        stack.start()
        try:
            elapsed, latencies, outcomes = asyncio.run(run_pipeline(stack, packets))
            per_job, sign_us, verify_us = wire_cost(folder / "stack")
            call_us = caller_proof_cost(folder / "stack")
            sealed, opened, cipher_ms, copy_ms = at_rest_cost(folder / "stack", jobs)
            keys = folder / "stack" / "signer" / "keys" / "v1"
            bare = run_bare_libraries(
                packets, str(keys / "key.pem"), str(keys / "cert.pem"), folder / "bare"
            )
        finally:
            stack.stop()
    pipeline_rate = jobs / elapsed
    bare_rate = jobs / bare
    print(f"jobs: {jobs} (3 PDFs, 12 pages each), outcomes: {outcomes}")
    print(f"pipeline: {pipeline_rate:.2f} completed jobs/s over {elapsed:.1f} s")
    print(
        "terminal latency: "
        f"p50 {percentile(latencies, 0.50) * 1000:.0f} ms, "
        f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
        f"mean {statistics.fmean(latencies) * 1000:.0f} ms"
    )
    print(f"bare libraries, one process: {bare_rate:.2f} jobs/s over {bare:.1f} s")
    print(f"ratio pipeline / bare libraries: {pipeline_rate / bare_rate:.2f}")
    wire_ms = per_job * (sign_us + verify_us) / 1000
    budget_ms = (os.cpu_count() or 1) / pipeline_rate * 1000
    print(
        f"credentials and verification: {per_job:.1f} signed messages per job, "
        f"sign {sign_us:.0f} us + verify {verify_us:.0f} us each = {wire_ms:.2f} ms CPU per job, "
        f"{wire_ms / budget_ms:.1%} of the machine's CPU per completed job "
        f"({budget_ms:.0f} ms on {os.cpu_count()} cores); NATS logins are checked once per "
        "connection (bcrypt), not per message"
    )
    print(f"caller proof on each service-to-service gRPC call: {call_us:.0f} us (make + check)")
    print(
        f"encryption at rest: {sealed / 1024:.0f} KiB sealed + {opened / 1024:.0f} KiB opened "
        f"per job; AES-256-GCM {cipher_ms:.3f} ms CPU per job "
        f"({cipher_ms / budget_ms:.2%} of the machine's CPU per completed job); "
        f"plaintext copies in private directories (decrypt, hash, write, remove) "
        f"{copy_ms:.2f} ms per job ({copy_ms / budget_ms:.1%})"
    )


if __name__ == "__main__":
    main()
