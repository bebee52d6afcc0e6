"""The storage quota check at upload, as a tenant's stored sources grow: the
usage row it reads now against the sum over every source row it used to run.

    make bench-quota              # BENCH_QUOTA_SOURCES=100000
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from quire.admission import tables
from quire.admission.storagepolicy import stored_bytes, summed_bytes
from quire.database import Database

READS = 50


def _median_ms(database: Database, read: Callable[[Session, str], int]) -> float:
    took = []
    for _ in range(READS):
        started = time.perf_counter()
        database.transaction(lambda s: read(s, "t1"))
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


def main() -> None:
    largest = int(os.environ.get("BENCH_QUOTA_SOURCES", "100000"))
    sizes = [n for n in (1_000, 10_000, 100_000, 1_000_000) if n <= largest] or [largest]
    with tempfile.TemporaryDirectory(prefix="quire-quota-") as folder:
        database = Database(f"sqlite:///{folder}/admission.db", tables.metadata)
        database.create_schema()
        now = datetime.now(UTC)
        database.transaction(
            lambda s: s.execute(tables.tenants.insert().values(id="t1", name="t1", created_at=now))
        )
        held = 0
        print(f"{'sources':>9}  {'usage row (now)':>16}  {'sum over sources (before)':>26}")
        for size in sizes:
            rows = [
                {
                    "tenant": "t1",
                    "sha256": f"{index:064x}",
                    "size_bytes": 10,
                    "content_type": "application/pdf",
                    "blob_key": "k",
                    "created_at": now,
                }
                for index in range(held, size)
            ]
            database.transaction(lambda s, r=rows: s.execute(tables.sources.insert(), r))
            held = size
            now_ms, before_ms = (
                _median_ms(database, stored_bytes),
                _median_ms(database, summed_bytes),
            )
            print(f"{size:>9}  {now_ms:>13.3f} ms  {before_ms:>23.3f} ms")
        database.close()


if __name__ == "__main__":
    main()
