"""SubmitJob's durable floor: how long what any accepted submit must make
durable takes, on the stack's own file system, with no Quire code around it.

A submit may be answered only once nothing it accepted can be lost: the
packet's sources are kept as blobs (DESIGN.md's storage rules: written,
fsync'd, promoted atomically, their directory fsync'd), and then the job is
committed (SQLite, WAL, ``synchronous=FULL``). The job's row names its
sources, so the blobs come first: a row committed ahead of them could name
bytes a crash had lost. This probe times that chain, and the commit alone,
as the bench's stack runs beside it:

- ``commit``: one write transaction through ``quire.database`` on SQLite as
  every service configures it (its writer thread included);
- ``sources + commit``: the packet's sources written and fsync'd at once
  (one thread each, so the file system may join their flushes), renamed
  into place and their directory fsync'd once, then the same transaction.

The two alternate at a steady rate, in a process of their own (spawned, so
that its threads share nothing with the bench's client). No gRPC, no
protobuf, no queue publish, no Quire code: a lower bound for SubmitJob's
latency at the same moment, which the aim on ``SubmitJob``'s p99 must leave
room above.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DurableFloor", "ProbeRun", "durable_floor", "start_probe"]


@dataclass
class DurableFloor:
    """Seconds each chain took, in the order they ran."""

    commit: list[float] = field(default_factory=list)
    sources: list[float] = field(default_factory=list)
    blob_bytes: int = 0
    """Bytes the chains kept as blobs (what a caller can check was written)."""
    commits: int = 0


def durable_floor(folder: Path, seconds: float, rate: float, sizes: list[int]) -> DurableFloor:
    """Alternate the two chains ``rate`` times a second for ``seconds`` in
    ``folder`` (on the file system to measure); their latencies."""
    from floor import counter_database

    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    database, bump, _look = counter_database(folder / "floor.db")
    payloads = [os.urandom(size) for size in sizes]
    floor = DurableFloor()

    def keep(name: str, data: bytes) -> None:
        temporary = blobs / f".tmp-{name}"
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, blobs / name)

    def sync_directory() -> None:
        directory = os.open(blobs, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    async def run(threads: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        ends = time.monotonic() + seconds
        index = 0
        while time.monotonic() < ends:
            started = time.perf_counter()
            with_sources = index % 2 == 1
            if with_sources:
                await asyncio.gather(
                    *(
                        loop.run_in_executor(threads, keep, f"{index}-{part}", data)
                        for part, data in enumerate(payloads)
                    )
                )
                await loop.run_in_executor(threads, sync_directory)
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


def _serve(folder: str, seconds: float, rate: float, sizes: list[int], answer: Any) -> None:
    answer.put(durable_floor(Path(folder), seconds, rate, sizes))


class ProbeRun:
    """``durable_floor`` running in a process of its own."""

    def __init__(self, folder: Path, seconds: float, rate: float, sizes: list[int]) -> None:
        # The child imports this module (and ``floor``) by name, from the
        # path it is given at its start.
        here = str(Path(__file__).resolve().parent)
        if here not in sys.path:
            sys.path.insert(0, here)
        context = multiprocessing.get_context("spawn")
        self._answer = context.Queue()
        self._process = context.Process(
            target=_serve, args=(str(folder), seconds, rate, sizes, self._answer), daemon=True
        )
        self._process.start()
        self._seconds = seconds

    def result(self) -> DurableFloor:
        """Its latencies, once it has run its time (raises if it died)."""
        deadline = time.monotonic() + self._seconds + 60
        try:
            while True:
                try:
                    floor: DurableFloor = self._answer.get(timeout=0.5)
                    return floor
                except queue.Empty:
                    if not self._process.is_alive() and self._answer.empty():
                        # Its answer is in the pipe before it exits, if it gave one.
                        raise RuntimeError(
                            "the latency floor's probe ended without an answer"
                        ) from None
                    if time.monotonic() > deadline:
                        raise RuntimeError("the latency floor's probe did not answer") from None
        finally:
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()


def start_probe(folder: Path, seconds: float, rate: float, sizes: list[int]) -> ProbeRun:
    """Start ``durable_floor`` in a spawned process; ``.result()`` waits for it."""
    return ProbeRun(folder, seconds, rate, sizes)
