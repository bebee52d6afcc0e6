"""Slow uploads at full size, with the default limits: many tenants each open
many uploads that send their first 4 KiB and then a byte a second, while a
bystander tenant keeps uploading. Prints how many were held and refused (by
reason), how long the held ones stayed open, the bystander's upload latency,
and admission's memory and descriptors before, at the peak and after.

    make bench-slow-uploads   # BENCH_SLOW_UPLOADS=2000 over BENCH_SLOW_TENANTS=32

With the defaults, 32 tenants hold 16 uploads each (``QUIRE_MAX_TENANT_UPLOADS``)
and the rest are refused; from 64 tenants on, together they reach the
process's 1024 uploads (``QUIRE_MAX_UPLOADS_IN_FLIGHT``) and the bystander is
refused too, with a retry hint, until the idle limit closes them. A refused
upload is heard out (read until the caller stops, bounded) so that its client
reports the reason; past ``QUIRE_MAX_UPLOADS_IN_FLIGHT`` refused uploads heard
out at once, the answer goes at once, and grpc's asyncio client may then
report ``CANCELLED`` or ``INTERNAL`` (no reason) for an answer that landed
during one of its writes.

``BENCH_IDLE_SECONDS`` (default: the service default, 30 s) sets
``QUIRE_UPLOAD_IDLE_SECONDS`` for the stack.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent

from quire.admission.v1 import admission_service_pb2 as pb  # noqa: E402
from quire.client import AdmissionClient, TenantAdminClient  # noqa: E402
from quire.grpcstatus import reason_of  # noqa: E402
from quire.stack.supervisor import Stack, StackInfo  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402

PREFIX_BYTES = 4096
DECLARED_BYTES = 64 * 1024


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def process_figures(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def slow_upload(client: AdmissionClient, max_seconds: int) -> tuple[float, str]:
    """First 4 KiB, then a byte a second; returns seconds open and the outcome."""
    data = b"%PDF-1.7\n%" + os.urandom(DECLARED_BYTES - 10)
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        content_type="application/pdf",
    )

    async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
        yield pb.UploadSourceRequest(header=header)
        yield pb.UploadSourceRequest(chunk=data[:PREFIX_BYTES])
        for offset in range(PREFIX_BYTES, PREFIX_BYTES + max_seconds):
            await asyncio.sleep(1.0)
            yield pb.UploadSourceRequest(chunk=data[offset : offset + 1])

    started = time.monotonic()
    try:
        await client.upload_stream(requests())
        outcome = "OK"
    except grpc.aio.AioRpcError as error:
        outcome = f"{error.code().name} {reason_of(error)}"
    return time.monotonic() - started, outcome


async def sample(pid: int, tmp_dir: Path, done: asyncio.Event) -> list[tuple[int, int, int]]:
    samples = []
    while not done.is_set():
        rss, fds = process_figures(pid)
        samples.append((rss, fds, len(os.listdir(tmp_dir))))
        await asyncio.sleep(0.2)
    return samples


async def bystander(
    client: AdmissionClient, folder: Path, done: asyncio.Event
) -> tuple[list[float], collections.Counter[str]]:
    """Uploads one small PDF every half second until ``done``; latencies of those
    stored, and how the others were refused."""
    latencies: list[float] = []
    refused: collections.Counter[str] = collections.Counter()
    while not done.is_set():
        path = write_text_pdf(folder / "bystander.pdf", [f"bystander {uuid.uuid4().hex}"])
        started = time.monotonic()
        try:
            await client.upload(path)
            latencies.append(time.monotonic() - started)
        except grpc.aio.AioRpcError as error:
            refused[f"{error.code().name} {reason_of(error)}"] += 1
        await asyncio.sleep(0.5)
    return latencies, refused


async def bench(stack: Stack, folder: Path, uploads: int, tenants: int, idle: float) -> None:
    info = StackInfo.read(stack.data_dir)
    address = info.endpoints["admission"]
    async with TenantAdminClient(address, info.operator_token()) as admin:
        secrets = [(await admin.create_tenant(f"slow-{i}")).secret for i in range(tenants)]
        victim = (await admin.create_tenant("bystander")).secret
    clients = [AdmissionClient(address, secret) for secret in secrets]
    victim_client = AdmissionClient(address, victim)
    try:
        await victim_client.upload(write_text_pdf(folder / "warm.pdf", ["warm"]))
        pid = stack.pid("admission")
        before = process_figures(pid)
        done = asyncio.Event()
        sampler = asyncio.create_task(sample(pid, stack.data_dir / "blobs" / ".tmp", done))
        victim_task = asyncio.create_task(bystander(victim_client, folder, done))
        max_seconds = int(idle * 3) + 10
        started = time.monotonic()
        results = await asyncio.gather(
            *(slow_upload(clients[i % tenants], max_seconds) for i in range(uploads))
        )
        elapsed = time.monotonic() - started
        await asyncio.sleep(1.0)
        done.set()
        samples, (latencies, refused) = await sampler, await victim_task
        after = process_figures(pid)
    finally:
        for client in (*clients, victim_client):
            await client.close()

    outcomes = collections.Counter(outcome for _seconds, outcome in results)
    held = [seconds for seconds, outcome in results if outcome.endswith("UPLOAD_IDLE_TIMEOUT")]
    print(f"{uploads} slow uploads from {tenants} tenants, idle limit {idle:g} s: {dict(outcomes)}")
    if held:
        print(
            f"held ones open for p50 {percentile(held, 0.5):.1f} s, "
            f"max {max(held):.1f} s; all answered within {elapsed:.1f} s"
        )
    if latencies:
        print(
            f"bystander uploads stored: {len(latencies)}, "
            f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
    print(f"bystander uploads refused: {dict(refused) or 'none'}")
    print(
        f"admission RSS KiB before/peak/after: {before[0]}/{max(s[0] for s in samples)}/"
        f"{after[0]}; fds before/peak/after: {before[1]}/{max(s[1] for s in samples)}/{after[1]};"
        f" temporary files peak/after: {max(s[2] for s in samples)}/{samples[-1][2]}"
    )


def main() -> None:
    uploads = int(os.environ.get("BENCH_SLOW_UPLOADS", "2000"))
    tenants = int(os.environ.get("BENCH_SLOW_TENANTS", "32"))
    idle = os.environ.get("BENCH_IDLE_SECONDS", "")
    env = {"QUIRE_DRAIN_SECONDS": "5"}
    if idle:
        env["QUIRE_UPLOAD_IDLE_SECONDS"] = idle
    with tempfile.TemporaryDirectory(prefix="quire-slow-") as temp:
        folder = Path(temp)
        stack = Stack(folder / "stack", env=env)
        stack.start()
        try:
            asyncio.run(bench(stack, folder, uploads, tenants, float(idle or "30")))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
