"""Admission's per-request and periodic reads do not grow with a tenant's
history. A tenant's stored upload bytes are one row, moved with every source
added or forgotten, so the quota check at upload reads it instead of summing
every source the tenant holds; the recount (and the migration that made the
row) brings it back to the sum of the sources. The outstanding count, the
dispatch sweep, the reconciler and the end tracker read jobs through partial
indexes of the few jobs they look for (SQLite's own query plans say so);
``make bench-history`` times them all as the history grows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command

from quire.admission import tables
from quire.admission.batches.dispatch import _plan
from quire.admission.batches.finishes import _watched
from quire.admission.jobs.dispatch import undispatched
from quire.admission.jobs.outstanding import count_outstanding
from quire.admission.jobs.reconciler import _unfinished
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.storagepolicy import forget_source, stored_bytes, summed_bytes
from quire.admission.tenants.storageusage import UsageRecount
from quire.admission.uploads.gate import StoredSource, remember, remember_all
from quire.database import Database
from quire.migrations import _config
from quire.schema import upgrade_schema


def _database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    database.create_schema()
    database.transaction(
        lambda s: s.execute(
            tables.tenants.insert(),
            [
                {"id": tenant, "name": tenant, "created_at": datetime.now(UTC)}
                for tenant in ("t1", "t2")
            ],
        )
    )
    return database


def _keep(database: Database, tenant: str, sha: str, size: int) -> None:
    source = StoredSource(sha * 64, size, "application/pdf")
    database.transaction(lambda s: remember(s, tenant, source, f"sources/{tenant}/{sha}"))


def _both(database: Database, tenant: str) -> tuple[int, int]:
    return database.transaction(lambda s: (stored_bytes(s, tenant), summed_bytes(s, tenant)))


def test_sources_added_and_forgotten_move_the_count_once_each(tmp_path: Path) -> None:
    database = _database(tmp_path)
    assert _both(database, "t1") == (0, 0)
    _keep(database, "t1", "a", 100)
    _keep(database, "t1", "a", 100)  # the same bytes again: stored once, counted once
    _keep(database, "t1", "b", 30)
    _keep(database, "t2", "a", 7)
    assert _both(database, "t1") == (130, 130)
    assert _both(database, "t2") == (7, 7)
    assert database.transaction(lambda s: forget_source(s, "t1", "a" * 64))
    assert not database.transaction(lambda s: forget_source(s, "t1", "a" * 64))
    assert _both(database, "t1") == (30, 30)
    assert _both(database, "t2") == (7, 7)


def test_sources_remembered_together_count_only_those_new_to_the_tenant(
    tmp_path: Path,
) -> None:
    """An inline packet's sources are recorded in one statement; bytes another
    request recorded first are not counted again."""
    database = _database(tmp_path)
    _keep(database, "t1", "a", 100)
    kept = [
        (StoredSource(sha * 64, size, "application/pdf"), f"sources/t1/{sha}")
        for sha, size in (("a", 100), ("b", 30), ("c", 5))
    ]
    database.transaction(lambda s: remember_all(s, "t1", kept))
    assert _both(database, "t1") == (135, 135)
    database.transaction(lambda s: remember_all(s, "t1", kept))  # all known: nothing moves
    assert _both(database, "t1") == (135, 135)


def test_the_recount_corrects_what_a_previous_release_added_uncounted(tmp_path: Path) -> None:
    database = _database(tmp_path)
    _keep(database, "t1", "a", 100)
    database.transaction(  # as a replica of the release before the count would
        lambda s: s.execute(
            tables.sources.insert().values(
                tenant="t1",
                sha256="c" * 64,
                size_bytes=50,
                content_type="application/pdf",
                blob_key="sources/t1/c",
                created_at=datetime.now(UTC),
            )
        )
    )
    assert _both(database, "t1") == (100, 150)
    recount = UsageRecount(database)
    assert asyncio.run(recount.recount()) == 1
    assert _both(database, "t1") == (150, 150)
    assert asyncio.run(recount.recount()) == 0
    assert _both(database, "t2") == (0, 0)


def test_the_migration_fills_the_count_from_the_sources_already_stored(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    with database.engine.begin() as connection:
        command.upgrade(_config(tables.MIGRATIONS, connection, tables.metadata), "0006")
        now = datetime.now(UTC).isoformat()
        connection.exec_driver_sql(
            "INSERT INTO tenants (id, name, created_at) VALUES ('t1', 't1', ?), ('t2', 't2', ?)",
            (now, now),
        )
        for sha, size in (("a", 10), ("b", 32)):
            connection.exec_driver_sql(
                "INSERT INTO sources (tenant, sha256, size_bytes, content_type, blob_key,"
                " created_at) VALUES ('t1', ?, ?, 'application/pdf', 'k', ?)",
                (sha * 64, size, now),
            )
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    assert _both(database, "t1") == (42, 42)
    assert _both(database, "t2") == (0, 0)
    database.close()


def _with_history(tmp_path: Path, jobs: int = 3000) -> Database:
    """t1 with ``jobs`` ended jobs, five not, one open batch and an endpoint."""
    database = _database(tmp_path)
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)

    def fill(session) -> None:  # type: ignore[no-untyped-def]
        session.execute(
            tables.jobs.insert(),
            [
                {
                    "job": f"jobs/{index:028x}",
                    "tenant": "t1",
                    "request_id": f"r{index}",
                    "manifest_digest": "m" * 64,
                    "item_count": 1,
                    "task": b"t",
                    "accepted_event": b"e",
                    "created_at": long_ago,
                    "dispatched_at": None if index < 5 else long_ago,
                    "finished_at": None if index < 5 else long_ago,
                    "end_recorded_at": None if index < 5 else long_ago,
                }
                for index in range(jobs)
            ],
        )
        session.execute(
            tables.notification_endpoints.insert().values(
                tenant="t1", url="https://x.invalid/", secret_sealed=b"s", created_at=long_ago
            )
        )
        session.execute(
            tables.batches.insert(),
            [
                {
                    "batch": f"batches/{index:08x}",
                    "tenant": "t1",
                    "request_id": f"b{index}",
                    "packet_count": 1,
                    "state": "DISPATCHING" if index == 0 else "DONE",
                    "next_index": 1,
                    "dispatched_count": 1,
                    "cancelled_undispatched": 0,
                    "terminal_count": 0 if index == 0 else 1,
                    "created_at": long_ago,
                    "updated_at": long_ago,
                    "finished_at": None if index == 0 else long_ago,
                }
                for index in range(jobs // 10)
            ],
        )

    database.transaction(fill)
    return database


def _plans_of(database: Database, read, table: str = "jobs") -> list[str]:  # type: ignore[no-untyped-def]
    """SQLite's plan of each statement ``read`` runs against ``table``, as
    SQLite itself saw it run (its own statements go to the driver directly,
    ``quire.driversql``, past SQLAlchemy's events)."""
    statements: list[str] = []

    def seen(statement: str) -> None:
        if f" {table}" in statement and statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    def traced(connection):  # type: ignore[no-untyped-def]
        driver = connection.connection.driver_connection
        driver.set_trace_callback(seen)
        try:
            return read(connection)
        finally:
            driver.set_trace_callback(None)

    database.transaction(traced)
    assert statements, f"the read touched the {table} table"
    with database.engine.connect() as connection:
        return [
            " / ".join(row[3] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
            for sql in statements
        ]


def _bounded(plan: str, table: str) -> bool:
    """No step of ``plan`` reads every row of ``table``: it searches an
    index, or scans only a partial one (which holds just what is looked for)."""
    partial = {
        index.name
        for index in getattr(tables, table).indexes
        if index.dialect_options["sqlite"]["where"] is not None
    }
    for step in plan.split(" / "):
        if step.startswith(f"SCAN {table}") and not any(
            step.endswith(f"INDEX {name}") for name in partial
        ):
            return False
    return True


@pytest.mark.parametrize(
    ("read", "index"),
    [
        (lambda s: count_outstanding(s, "t1"), "ix_jobs_outstanding"),
        (lambda s: undispatched(s, datetime.now(UTC)), "ix_jobs_undispatched"),
        (lambda s: _unfinished(s, datetime.now(UTC), ""), "ix_jobs_unfinished"),
        (lambda s: _watched(s, after="", limit=100), "ix_jobs_unrecorded"),
    ],
    ids=["outstanding", "dispatch-sweep", "reconciler", "end-tracker"],
)
def test_reads_of_the_few_jobs_they_look_for_use_a_partial_index(
    tmp_path: Path,
    read,
    index: str,  # type: ignore[no-untyped-def]
) -> None:
    database = _with_history(tmp_path)
    plans = _plans_of(database, read)
    assert any(index in plan for plan in plans), plans
    assert all(_bounded(plan, "jobs") for plan in plans), plans


@pytest.mark.parametrize(
    "read",
    [
        lambda s: _plan(s, AdmissionSettings()),
        lambda s: _watched(s, after="", limit=100),
    ],
    ids=["batch-dispatcher-plan", "end-tracker"],
)
def test_reads_of_unfinished_batches_use_their_partial_index(
    tmp_path: Path,
    read,  # type: ignore[no-untyped-def]
) -> None:
    database = _with_history(tmp_path)
    plans = _plans_of(database, read, "batches")
    assert any("ix_batches_unfinished" in plan for plan in plans), plans
    assert all(_bounded(plan, "batches") for plan in plans), plans
