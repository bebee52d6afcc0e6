"""Group commit: concurrent writes share a transaction, and one failing write
rolls back only itself."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import MetaData, event, func, select

from quire.database import Database, savepoint
from quire.groupcommit import GroupCommit
from quire.leases import lease_table


async def test_one_failing_write_does_not_undo_the_others(tmp_path: Path) -> None:
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'g.db'}", metadata)
    database.create_schema()
    writes = GroupCommit(database)

    def insert(job: str):  # type: ignore[no-untyped-def]
        def work(session) -> str:  # type: ignore[no-untyped-def]
            session.execute(table.insert().values(job=job, token=1, updated_at=datetime.now(UTC)))
            if job == "jobs/bad":
                raise ValueError("refused")
            return job

        return work

    names = [f"jobs/{n:02d}" for n in range(20)] + ["jobs/bad"]
    results = await asyncio.gather(
        *(writes.run(insert(name)) for name in names), return_exceptions=True
    )
    assert results[:-1] == names[:-1]
    assert isinstance(results[-1], ValueError)
    stored = database.transaction(
        lambda s: s.execute(select(func.count()).select_from(table)).scalar_one()
    )
    assert stored == 20


async def test_a_lone_write_commits_at_once(tmp_path: Path) -> None:
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'g.db'}", metadata)
    database.create_schema()
    writes = GroupCommit(database)
    now = datetime.now(UTC)
    await asyncio.wait_for(
        writes.run(lambda s: s.execute(table.insert().values(job="j", token=1, updated_at=now))),
        timeout=2,
    )
    with pytest.raises(ValueError):
        await writes.run(lambda s: (_ for _ in ()).throw(ValueError("x")))


async def test_a_group_without_failures_needs_no_savepoints(tmp_path: Path) -> None:
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'g.db'}", metadata)
    statements: list[str] = []
    # Every statement SQLite runs, those sent to the driver as they are too.
    event.listen(
        database.engine,
        "connect",
        lambda driver, _record: driver.set_trace_callback(
            lambda sql: statements.append(sql.split()[0].upper())
        ),
    )
    database.create_schema()
    statements.clear()
    writes = GroupCommit(database)
    now = datetime.now(UTC)

    def insert(job: str):  # type: ignore[no-untyped-def]
        return lambda s: s.execute(table.insert().values(job=job, token=1, updated_at=now))

    await asyncio.gather(*(writes.run(insert(f"jobs/{n:02d}")) for n in range(30)))
    assert statements.count("INSERT") == 30
    assert "SAVEPOINT" not in statements and "RELEASE" not in statements
    assert statements.count("BEGIN") < 30, "writes that arrived together shared a transaction"


def test_a_savepoint_undoes_only_its_own_writes(tmp_path: Path) -> None:
    """On SQLite the savepoint goes to the driver as it is; what its block
    wrote is undone when the block raises, what came before stays, and an
    inner savepoint's failure leaves its outer one's writes."""
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'g.db'}", metadata)
    database.create_schema()
    now = datetime.now(UTC)

    def insert(session, job: str) -> None:  # type: ignore[no-untyped-def]
        session.execute(table.insert().values(job=job, token=1, updated_at=now))

    def work(session) -> None:  # type: ignore[no-untyped-def]
        insert(session, "kept")
        with pytest.raises(ValueError):
            with savepoint(session):
                insert(session, "undone")
                raise ValueError("refused")
        with savepoint(session):
            insert(session, "outer")
            with pytest.raises(ValueError):
                with savepoint(session):
                    insert(session, "inner")
                    raise ValueError("refused")

    database.transaction(work)
    stored = database.transaction(lambda s: {row.job for row in s.execute(select(table.c.job))})
    assert stored == {"kept", "outer"}


def test_a_savepoint_needs_its_transaction(tmp_path: Path) -> None:
    """Where SQLite has rolled the whole transaction back, a savepoint is
    refused (it would begin a transaction its release commits), and a block's
    error is what its savepoint raises even when there is nothing to roll
    back to."""
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'g.db'}", metadata)
    database.create_schema()
    now = datetime.now(UTC)

    def work(session) -> None:  # type: ignore[no-untyped-def]
        driver = session.connection.driver_connection
        with pytest.raises(LookupError):
            with savepoint(session):
                session.execute(table.insert().values(job="lost", token=1, updated_at=now))
                driver.execute("ROLLBACK")  # as SQLite does on a full disk
                raise LookupError("the block's own error")
        with pytest.raises(RuntimeError):
            with savepoint(session):
                session.execute(table.insert().values(job="never", token=1, updated_at=now))

    database.transaction(work)
    assert database.transaction(lambda s: list(s.execute(select(table.c.job)))) == []
