"""A tenant's stored upload bytes are one row, moved with every source added
or forgotten, so the quota check at upload reads it instead of summing every
source the tenant holds; the recount (and the migration that made the row)
brings it back to the sum of the sources."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from alembic import command

from quire.admission import tables
from quire.admission.storagepolicy import forget_source, stored_bytes, summed_bytes
from quire.admission.storageusage import UsageRecount
from quire.admission.uploads import StoredSource, _remember
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
    database.transaction(lambda s: _remember(s, tenant, source, f"sources/{tenant}/{sha}"))


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
