"""Quarantine-lane benchmark (issue 13, "what must be shown" 3): ordinary
one-page jobs alone, then the same number mixed with hostile ones (10 % of
the mix by default), on the embedded stack. Prints each run's ordinary p50
and p99 terminal latency and the ratio of the p99s, against the aim of 2x.

The hostile file is ``hostile.slow_lzw`` (tests/hostile.py): ~1 KiB whose one
stream costs ~12 s of CPU to measure, under every size cap, so it exhausts
the shared sandbox lane, then the quarantine lane, and ends REJECTED
PARSER_LIMIT_EXCEEDED.

    make bench-quarantine
    BENCH_ORDINARY=90 BENCH_HOSTILE=10 make bench-quarantine
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.client import AdmissionClient, PacketItem  # noqa: E402
from quire.jobs import state_name  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402
from quire.testing import hostile  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402

ORDINARY = int(os.environ.get("BENCH_ORDINARY", "36"))
HOSTILE = int(os.environ.get("BENCH_HOSTILE", "4"))
AIM = 2.0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def _run(client: AdmissionClient, digest: str) -> tuple[float, str]:
    started = time.monotonic()
    job = await client.submit([PacketItem("d", digest)])
    final = await client.wait(job.name, timeout=300)
    outcome = f"{state_name(final.state)} {final.reason_code}".strip()
    return time.monotonic() - started, outcome


async def measure(stack: Stack, folder: Path) -> None:
    token = (stack.data_dir / "admission" / "dev-token").read_text().strip()
    async with AdmissionClient(stack.endpoints["admission"], token) as client:
        ordinary = [
            (await client.upload(write_text_pdf(folder / f"o{n}.pdf", [f"ordinary {n}"]))).sha256
            for n in range(2 * ORDINARY)
        ]
        bad = [
            (await client.upload(hostile.slow_lzw(folder / f"h{n}.pdf"))).sha256
            for n in range(HOSTILE)
        ]
        clean = await asyncio.gather(*(_run(client, d) for d in ordinary[:ORDINARY]))
        # Hostile jobs first, then the ordinary ones while they are in the sandbox.
        hostile_runs = [asyncio.create_task(_run(client, d)) for d in bad]
        await asyncio.sleep(0.2)
        mixed = await asyncio.gather(*(_run(client, d) for d in ordinary[ORDINARY:]))
        refused = await asyncio.gather(*hostile_runs)

    print(f"{ORDINARY} ordinary one-page jobs, then {ORDINARY} more with {HOSTILE} hostile ones")
    for label, runs in (("clean", clean), ("mixed", mixed)):
        seconds = [s for s, _ in runs]
        outcomes = sorted({o for _, o in runs})
        print(
            f"  ordinary {label}: p50 {percentile(seconds, 0.5):.2f} s, "
            f"p99 {percentile(seconds, 0.99):.2f} s, outcomes {outcomes}"
        )
    print(
        f"  hostile: {sorted({o for _, o in refused})}, ended after "
        + ", ".join(f"{s:.1f} s" for s, _ in refused)
    )
    ratio = percentile([s for s, _ in mixed], 0.99) / percentile([s for s, _ in clean], 0.99)
    verdict = "meets" if ratio <= AIM else "misses"
    print(f"ordinary p99 mixed / clean: {ratio:.2f}x ({verdict} the aim of <= {AIM:.0f}x)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="quire-quarantine-bench-") as temp:
        folder = Path(temp)
        stack = Stack(folder / "stack")
        stack.start()
        try:
            asyncio.run(measure(stack, folder))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
