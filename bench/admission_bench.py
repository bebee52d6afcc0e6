"""The front door alone: SubmitJob rate and latency with pre-uploaded sources,
and upload throughput for 10 MiB files, with every downstream stage paused
(the validate consumers are paused in JetStream, so nothing is processed).

    make bench-admission          # BENCH_SUBMITS=1000, BENCH_UPLOADS=8
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.client import AdmissionClient, PacketItem, TenantAdminClient  # noqa: E402
from quire.runtime import connect_nats  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402
from quire.workqueue import PRIORITIES, WORK_STREAM, consumer_name  # noqa: E402

IN_FLIGHT = 16
UPLOAD_MIB = 10


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


async def pause_downstream(stack: Stack) -> None:
    nc = await connect_nats(stack.nats_url, "quire-bench", **stack.nats_login())
    js = nc.jetstream()
    until = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for priority in PRIORITIES:
        await js.pause_consumer(WORK_STREAM, consumer_name("validate", priority), until)
    await nc.close()


async def bench(stack: Stack, folder: Path, submits: int, uploads: int) -> None:
    info = stack.endpoints["admission"]
    operator = (stack.data_dir / "admission" / "operator-token").read_text().strip()
    async with TenantAdminClient(info, operator) as admin:
        tenant = await admin.create_tenant("bench", max_outstanding_jobs=10_000_000)
    await pause_downstream(stack)
    async with AdmissionClient(info, tenant.secret) as client:
        source = await client.upload(write_text_pdf(folder / "source.pdf", ["bench"]))
        items = [PacketItem("doc", source.sha256)]
        await client.submit(items)  # warm the path once
        latencies: list[float] = []
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one() -> None:
            async with gate:
                started = time.perf_counter()
                await client.submit(items, request_id=uuid.uuid4().hex)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(submits)))
        elapsed = time.perf_counter() - started
        print(
            f"SubmitJob: {submits / elapsed:.0f} submits/s over {elapsed:.1f} s ({IN_FLIGHT} in flight)"
        )
        print(
            f"SubmitJob latency: p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms"
        )

        alone: list[float] = []
        for _ in range(min(200, submits)):
            started = time.perf_counter()
            await client.submit(items, request_id=uuid.uuid4().hex)
            alone.append(time.perf_counter() - started)
        print(
            f"SubmitJob latency, one client at a time: p50 {percentile(alone, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(alone, 0.99) * 1000:.1f} ms"
        )

        files = []
        for index in range(uploads):
            path = folder / f"big-{index}.pdf"
            path.write_bytes(b"%PDF-1.7\n" + os.urandom(UPLOAD_MIB * 1024 * 1024 - 9))
            files.append(path)
        started = time.perf_counter()
        for path in files:
            await client.upload(path)
        elapsed = time.perf_counter() - started
        print(
            f"upload: {uploads * UPLOAD_MIB / elapsed:.0f} MiB/s "
            f"({uploads} files of {UPLOAD_MIB} MiB, one at a time, digest checked and fsynced)"
        )


def main() -> None:
    submits = int(os.environ.get("BENCH_SUBMITS", "1000"))
    uploads = int(os.environ.get("BENCH_UPLOADS", "8"))
    with tempfile.TemporaryDirectory(prefix="quire-door-") as temp:
        folder = Path(temp)
        stack = Stack(
            folder / "stack",
            env={
                "QUIRE_QUEUE_AGE_BUDGET_SECONDS": "86400",
                "QUIRE_MAX_UPLOAD_BYTES": str(64 * 1024 * 1024),
            },
        )
        stack.start()
        try:
            asyncio.run(bench(stack, folder, submits, uploads))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
