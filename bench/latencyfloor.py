"""SubmitJob's durable floor: how long what a submit must make durable takes,
on the stack's own file system beside the stack, with no service code.

A submit may be answered only once nothing it accepted can be lost. With
the local blob store (DESIGN.md's storage rules), the packet's sources are
kept as blobs (written, fsync'd, renamed into place, their directory
fsync'd), and then the job is committed (SQLite, WAL, ``synchronous=FULL``).
The blobs come first because the job's row names them: a row committed ahead
of them could name bytes a crash had lost. This probe times that chain, and
the commit alone:

- ``commit``: one write transaction of one statement through
  ``quire.database`` (the storage layer every service uses, its writer
  thread included) on SQLite as every service configures it;
- ``sources + commit``: the packet's sources written and fsync'd at once
  (one thread each, so the file system may join their flushes), renamed
  into place and their directory fsync'd once, then the same transaction.

The two alternate at a steady rate, in a process of their own: this file run
as a script, which imports nothing of the bench's and says when it is ready,
so its start is not inside what it measures. No gRPC, protobuf, queue
publish or service code. What it measures under load includes what the
stack's own durable writes make the disk wait for, since they share it:
the floor of SubmitJob as designed, on this file system, beside this stack.

    python bench/latencyfloor.py FOLDER SECONDS RATE SIZE...

prints ``ready``, then the latencies as JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DurableFloor", "ProbeRun", "durable_floor", "lower_bound", "start_probe"]

READY = "ready"
START_SECONDS = 60.0
"""How long the probe's process may take to start, and to answer past its run."""


@dataclass
class DurableFloor:
    """Seconds each chain took, in the order they ran."""

    commit: list[float] = field(default_factory=list)
    sources: list[float] = field(default_factory=list)
    blob_bytes: int = 0
    """Bytes the chains kept as blobs (what a caller can check was written)."""
    commits: int = 0


def lower_bound(values: list[float], share: float, confidence: float) -> float | None:
    """A value the ``share`` quantile of what ``values`` sample is at least,
    with probability ``confidence``, whatever the distribution: the k-th
    smallest value, for the largest k at which at least k of the samples
    fall at or below that quantile with that probability (a binomial
    tail). None when there are too few samples for any k."""
    count = len(values)
    at_least = 0.0
    for rank in range(count, 0, -1):
        at_least += math.comb(count, rank) * share**rank * (1 - share) ** (count - rank)
        if at_least >= confidence:
            return sorted(values)[rank - 1]
    return None


def durable_floor(
    folder: Path,
    seconds: float,
    rate: float,
    sizes: list[int],
    *,
    ready: Callable[[], None] = lambda: None,
) -> DurableFloor:
    """Alternate the two chains ``rate`` times a second for ``seconds`` in
    ``folder`` (on the file system to measure); their latencies. ``ready``
    is called once everything is set up, just before the first chain."""
    from floor import counter_database, keep_file, sync_folder

    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    database, bump, _look = counter_database(folder / "floor.db")
    payloads = [os.urandom(size) for size in sizes]
    floor = DurableFloor()

    async def run(threads: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(threads, sync_folder, blobs)  # the pool's threads started
        ready()
        ends = time.monotonic() + seconds
        index = 0
        while time.monotonic() < ends:
            started = time.perf_counter()
            with_sources = index % 2 == 1
            if with_sources:
                await asyncio.gather(
                    *(
                        loop.run_in_executor(threads, keep_file, blobs, f"{index}-{part}", data)
                        for part, data in enumerate(payloads)
                    )
                )
                await loop.run_in_executor(threads, sync_folder, blobs)
                floor.blob_bytes += sum(sizes)
            await database.run(lambda c: c.execute(bump))
            floor.commits += 1
            took = time.perf_counter() - started
            (floor.sources if with_sources else floor.commit).append(took)
            index += 1
            await asyncio.sleep(max(0.0, 1 / rate - took))

    try:
        with ThreadPoolExecutor(max(1, len(sizes))) as threads:
            asyncio.run(run(threads))
    finally:
        database.close()
    return floor


class ProbeRun:
    """``durable_floor`` running as a process of its own (this file as a
    script, so it imports nothing of the bench's), started and ready to time."""

    def __init__(self, folder: Path, seconds: float, rate: float, sizes: list[int]) -> None:
        self._seconds = seconds
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(folder), str(seconds), str(rate), *map(str, sizes)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], START_SECONDS)
        line = self._process.stdout.readline() if ready else ""
        if line.strip() != READY:
            self._process.kill()
            self._process.wait(timeout=10)
            raise RuntimeError(
                f"the latency floor's probe did not start (exit code {self._process.returncode})"
            )

    def result(self) -> DurableFloor:
        """Its latencies, once it has run its time (raises if it ended without them)."""
        try:
            out, _ = self._process.communicate(timeout=self._seconds + START_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
            raise RuntimeError("the latency floor's probe did not answer") from None
        if self._process.returncode != 0 or not out.strip():
            raise RuntimeError(
                "the latency floor's probe ended without an answer "
                f"(exit code {self._process.returncode})"
            )
        return DurableFloor(**json.loads(out))


def start_probe(folder: Path, seconds: float, rate: float, sizes: list[int]) -> ProbeRun:
    """Start ``durable_floor`` in a process of its own and wait until it is
    ready to time (its imports and setup done); ``.result()`` waits for it."""
    return ProbeRun(folder, seconds, rate, sizes)


def main(argv: list[str]) -> None:
    folder, seconds, rate, *sizes = argv
    floor = durable_floor(
        Path(folder),
        float(seconds),
        float(rate),
        [int(size) for size in sizes],
        ready=lambda: print(READY, flush=True),
    )
    print(json.dumps(dataclasses.asdict(floor)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
