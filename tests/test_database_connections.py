"""quire.database: the database's own threads keep their SQLite connections.

Each of them begins its transactions on one connection it keeps, so a
failed transaction must leave nothing behind on it, a transaction begun
inside another must not be folded into the outer one, and closing the
database closes them all.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, select

from quire.database import Database, schema_transaction

pytestmark = pytest.mark.asyncio

metadata = MetaData()
notes = Table(
    "notes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("text", String(32), nullable=False),
)


def _database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'db.sqlite'}", metadata, threads=2)
    database.create_schema()
    return database


def _driver(connection: Connection) -> object:
    return connection.connection.driver_connection


async def test_the_writer_thread_begins_every_transaction_on_one_connection(
    tmp_path: Path,
) -> None:
    database = _database(tmp_path)
    try:
        first = await database.run(lambda c: c)
        second = await database.run(lambda c: c)
        assert first is second  # not a new Connection out of the pool each time
        readers = {id(await database.read(lambda c: c)) for _ in range(8)}
        assert id(first) not in readers  # reads keep connections of their own
        assert len(readers) <= 2  # one per reader thread at most
    finally:
        database.close()


async def test_a_failed_transaction_leaves_nothing_on_the_kept_connection(
    tmp_path: Path,
) -> None:
    database = _database(tmp_path)

    def write_then_fail(connection: Connection) -> None:
        connection.execute(notes.insert(), {"text": "rolled back"})
        raise RuntimeError("after the write")

    try:
        with pytest.raises(RuntimeError):
            await database.run(write_then_fail)
        await database.run(lambda c: c.execute(notes.insert(), {"text": "kept"}))
        texts = await database.read(lambda c: list(c.execute(select(notes.c.text)).scalars()))
        assert texts == ["kept"]  # and BEGIN IMMEDIATE found no transaction left open
    finally:
        database.close()


async def test_a_transaction_begun_inside_another_is_its_own(tmp_path: Path) -> None:
    """A read begun inside a read on the same thread gets a connection of its
    own (the kept one is busy), and a read inside a write sees only what is
    committed, not the outer transaction's own row."""
    database = _database(tmp_path)

    def read_inside_read(connection: Connection) -> bool:
        return database._read_transaction(  # noqa: SLF001 - the nested path itself
            lambda inner: _driver(inner) is not _driver(connection)
        )

    def write_and_read_inside(connection: Connection) -> list[str]:
        connection.execute(notes.insert(), {"text": "not yet committed"})
        return database._read_transaction(  # noqa: SLF001 - the nested path itself
            lambda inner: list(inner.execute(select(notes.c.text)).scalars())
        )

    try:
        assert await database.read(read_inside_read)
        assert await database.run(write_and_read_inside) == []
        assert await database.read(lambda c: list(c.execute(select(notes.c.text)).scalars())) == [
            "not yet committed"
        ]
    finally:
        database.close()


async def test_closing_the_database_closes_the_kept_connections(tmp_path: Path) -> None:
    database = _database(tmp_path)
    kept = await database.run(lambda c: c)
    await database.read(lambda c: c)
    database.close()
    assert kept.closed


def _may_write(path: Path) -> bool:
    """Whether another connection could take the write lock now (without waiting)."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


async def test_a_write_takes_the_lock_as_it_begins_and_a_read_never_does(
    tmp_path: Path,
) -> None:
    """Writes begin IMMEDIATE (two writers never deadlock upgrading a read lock),
    reads begin deferred (WAL readers never wait for the writer), and so does
    a schema change outside the database's threads."""
    database = _database(tmp_path)
    path = tmp_path / "db.sqlite"
    try:
        assert _may_write(path)
        assert not await database.run(lambda _c: _may_write(path))
        assert await database.read(lambda _c: _may_write(path))
        with schema_transaction(database):
            assert not _may_write(path)
        assert _may_write(path)
    finally:
        database.close()
