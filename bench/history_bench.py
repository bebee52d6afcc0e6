"""Admission's reads that must not grow with a tenant's history, as it grows:
the storage quota check at each upload, the outstanding-job count at each
submission, and the periodic reads of the dispatch sweep, the reconciler and
the end tracker. Each is timed as it runs now and as it ran before: the sum
over every source, the end tracker's single union over the jobs, and the
other queries without the partial job indexes.

    make bench-history            # BENCH_HISTORY_JOBS=100000 (also sources)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, union_all

from quire.admission import tables
from quire.admission.batches.finishes import _watched
from quire.admission.jobs.dispatch import undispatched
from quire.admission.jobs.outstanding import count_outstanding
from quire.admission.jobs.reconciler import _unfinished
from quire.admission.tenants.storagepolicy import stored_bytes, summed_bytes
from quire.database import Database

READS = 30
OUTSTANDING = 10
"""Jobs of the tenant not yet finished, dispatched or recorded: what the reads look for."""
NEW_INDEXES = (
    "ix_jobs_outstanding",
    "ix_jobs_unfinished",
    "ix_jobs_undispatched",
    "ix_jobs_unrecorded",
)


def _watched_as_before(session: Connection) -> Any:
    """The end tracker's read as it was: one union over the jobs, ordered by name."""
    jobs, batches, endpoints = tables.jobs, tables.batches, tables.notification_endpoints
    columns = (jobs.c.job, jobs.c.tenant, jobs.c.bundle_id, jobs.c.batch)
    children = (
        select(*columns)
        .join(batches, batches.c.batch == jobs.c.batch)
        .where(batches.c.finished_at.is_(None), jobs.c.end_recorded_at.is_(None))
    )
    notified = (
        select(*columns)
        .join(endpoints, endpoints.c.tenant == jobs.c.tenant)
        .where(
            jobs.c.batch.is_(None),
            jobs.c.end_recorded_at.is_(None),
            jobs.c.created_at >= endpoints.c.created_at,
        )
    )
    both = union_all(children, notified).subquery()
    return list(
        session.execute(select(both).where(both.c.job > "").order_by(both.c.job).limit(500))
    )


def _median_ms(database: Database, read: Callable[[Connection], Any]) -> float:
    took = []
    for _ in range(READS):
        started = time.perf_counter()
        database.transaction(read)
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


def _grow(database: Database, held: int, size: int, now: datetime) -> None:
    """Jobs and sources up to ``size``; all but the first OUTSTANDING jobs ended."""
    long_ago = now - timedelta(days=30)

    def job(index: int) -> dict[str, Any]:
        ended = index >= OUTSTANDING
        return {
            "job": f"jobs/{index:028x}",
            "tenant": "t1",
            "request_id": f"r{index}",
            "manifest_digest": "m" * 64,
            "item_count": 3,
            "task": b"t" * 300,
            "accepted_event": b"e" * 200,
            "created_at": long_ago,
            "dispatched_at": long_ago if ended else None,
            "finished_at": long_ago if ended else None,
            "end_recorded_at": long_ago if ended else None,
        }

    def source(index: int) -> dict[str, Any]:
        return {
            "tenant": "t1",
            "sha256": f"{index:064x}",
            "size_bytes": 10,
            "content_type": "application/pdf",
            "blob_key": "k",
            "created_at": long_ago,
        }

    for start in range(held, size, 50_000):
        end = min(size, start + 50_000)
        database.transaction(
            lambda s, a=start, b=end: (
                s.execute(tables.jobs.insert(), [job(i) for i in range(a, b)]),
                s.execute(tables.sources.insert(), [source(i) for i in range(a, b)]),
            )
        )


def main() -> None:
    largest = int(os.environ.get("BENCH_HISTORY_JOBS", "100000"))
    sizes = [n for n in (1_000, 10_000, 100_000, 1_000_000) if n <= largest] or [largest]
    reads: dict[str, Callable[[Connection], Any]] = {
        "quota check (each upload)": lambda s: stored_bytes(s, "t1"),
        "outstanding count (each submission)": lambda s: count_outstanding(s, "t1"),
        "dispatch sweep (every 5 s)": lambda s: undispatched(s, datetime.now(UTC)),
        "reconciler (each round)": lambda s: _unfinished(s, datetime.now(UTC), ""),
        "end tracker (each poll)": lambda s: _watched(s, after="", limit=500),
    }
    before = dict(
        reads,
        **{
            "quota check (each upload)": lambda s: summed_bytes(s, "t1"),
            "end tracker (each poll)": _watched_as_before,
        },
    )
    indexes = {index.name: index for index in tables.jobs.indexes if index.name in NEW_INDEXES}
    with tempfile.TemporaryDirectory(prefix="quire-history-") as folder:
        database = Database(f"sqlite:///{folder}/admission.db", tables.metadata)
        database.create_schema()
        now = datetime.now(UTC)
        database.transaction(
            lambda s: (
                s.execute(tables.tenants.insert().values(id="t1", name="t1", created_at=now)),
                s.execute(
                    tables.notification_endpoints.insert().values(
                        tenant="t1",
                        url="https://example.invalid/",
                        secret_sealed=b"s",
                        created_at=now - timedelta(days=60),
                    )
                ),
            )
        )
        held = 0
        for size in sizes:
            _grow(database, held, size, now)
            held = size
            database.transaction(
                lambda s: s.execute(
                    tables.tenant_usage.insert().prefix_with("OR REPLACE"),
                    {"tenant": "t1", "stored_bytes": summed_bytes(s, "t1")},
                )
            )
            now_ms = {name: _median_ms(database, read) for name, read in reads.items()}
            with database.engine.begin() as connection:
                for index in indexes.values():
                    index.drop(connection)
            before_ms = {name: _median_ms(database, read) for name, read in before.items()}
            with database.engine.begin() as connection:
                for index in indexes.values():
                    index.create(connection)
            print(
                f"\n{size:,} jobs and {size:,} stored uploads of one tenant ({OUTSTANDING} jobs unfinished)"
            )
            print(f"  {'read':38s} {'now':>10s} {'before':>11s}")
            for name in reads:
                print(f"  {name:38s} {now_ms[name]:7.3f} ms {before_ms[name]:8.3f} ms")
        database.close()


if __name__ == "__main__":
    main()
