"""Ledger benchmark: appends per second (one transaction each, as the events
consumer commits them, and in groups of 1,000), and the time to verify a
ledger of 100,000 entries.

    make bench-ledger           # BENCH_LEDGER_ENTRIES=100000
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from quire.audit import ledger, tables
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.pipeline import HISTORY_BEFORE_COMPLETION, State
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("bench", "bench", "0")
STATES = (*HISTORY_BEFORE_COMPLETION, State.COMPLETED)
"""A completed job's states, in the order the pipeline records them."""


def _events(count: int, offset: int = 0) -> list[queue_pb2.TransitionEvent]:
    events = []
    for index in range(count):
        job = f"jobs/{(offset + index) // len(STATES):012x}"
        state = STATES[(offset + index) % len(STATES)]
        task = queue_pb2.JobTask(
            job=job, tenant=f"t{(offset + index) % 4}", manifest_digest="m" * 64, sources=[]
        )
        events.append(FACTORY.transition(task, "", state, attempt=1, lease_token=1))
    return events


def main() -> None:
    total = int(os.environ.get("BENCH_LEDGER_ENTRIES", "100000"))
    with tempfile.TemporaryDirectory(prefix="quire-ledger-") as temp:
        database = Database(f"sqlite:///{Path(temp) / 'audit.db'}", tables.metadata)
        database.create_schema()
        single = _events(2000)
        started = time.perf_counter()
        for event in single:
            database.transaction(lambda s, e=event: ledger.append(s, e))
        one_each = len(single) / (time.perf_counter() - started)
        print(f"appends: {one_each:.0f}/s, one transaction (and fsync) each")

        rest = _events(total - len(single), offset=len(single))
        started = time.perf_counter()
        for start in range(0, len(rest), 1000):
            chunk = rest[start : start + 1000]
            database.transaction(lambda s, c=chunk: [ledger.append(s, e) for e in c])
        grouped = len(rest) / (time.perf_counter() - started)
        print(f"appends: {grouped:.0f}/s in transactions of 1,000")

        started = time.perf_counter()
        report = database.transaction(lambda s: verify_ledger(s, []))
        elapsed = time.perf_counter() - started
        assert report.ok and report.entries == total
        print(
            f"verification of {report.entries:,} entries in {report.chains} chains: {elapsed:.2f} s"
        )


if __name__ == "__main__":
    main()
