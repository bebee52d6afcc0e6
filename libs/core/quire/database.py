"""Per-service database: SQLAlchemy over SQLite (WAL) by default, PostgreSQL by URL.

Transactions run on a small thread pool so the event loop never blocks on
I/O. Work in a transaction gets its ``Connection`` (SQLAlchemy Core; Quire
maps no objects, so an ORM ``Session`` would only add its own bookkeeping to
every statement, about a fifth of a small transaction's CPU).
SQLite has one writer: its write transactions go through one thread, in
order, rather than several threads taking turns at the lock (a waiter sleeps
in SQLite's busy handler for milliseconds after the lock is free). Reads
still run side by side under WAL.
Statement parameters are hidden from SQLAlchemy's error messages: they can
hold tenant data, and error text must be safe to log.
SQLite write transactions start with ``BEGIN IMMEDIATE`` so that a
read-then-write (a lease increment, a chain append) cannot interleave with
another writer; PostgreSQL gets the same effect from row locks.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, MetaData, Table, bindparam, create_engine, event

__all__ = ["Database", "insert_if_absent", "as_utc"]

READ_ONLY = "quire_read_only"

T = TypeVar("T")


def _sqlite_engine(url: str) -> Engine:
    path = url.removeprefix("sqlite:///")
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"timeout": 30, "check_same_thread": False},
        hide_parameters=True,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY):
            connection.exec_driver_sql("BEGIN")  # WAL readers never wait for the writer
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class Database:
    """One service's database and the threads that talk to it."""

    def __init__(
        self,
        url: str,
        metadata: MetaData,
        *,
        threads: int = 4,
        transactions: Callable[[str], Callable[[], None]] | None = None,
    ) -> None:
        """``transactions``, if given, maps "write" and "read" to what to call
        once per transaction of that kind (a counter's ``inc``)."""
        single_writer = url.startswith("sqlite")
        if single_writer:
            self.engine = _sqlite_engine(url)
        else:
            self.engine = create_engine(
                url, pool_pre_ping=True, pool_size=threads, hide_parameters=True
            )
        self._metadata = metadata
        self._count_write = transactions("write") if transactions else _nothing
        self._count_read = transactions("read") if transactions else _nothing
        self._read_engine = self.engine.execution_options(**{READ_ONLY: True})
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="db")
        self._writer = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="db-write")
            if single_writer
            else self._executor
        )

    def create_schema(self) -> None:
        """Create missing tables; existing ones are left as they are."""
        self._metadata.create_all(self.engine)

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction on the calling thread."""
        with self.engine.begin() as connection:
            return work(connection)

    async def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction on the database's writer thread(s)."""
        loop = asyncio.get_running_loop()
        self._count_write()
        return await loop.run_in_executor(self._writer, self.transaction, work)

    def _read_transaction(self, work: Callable[[Connection], T]) -> T:
        with self._read_engine.begin() as connection:
            return work(connection)

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work``, which only reads, in one transaction that takes no write lock."""
        loop = asyncio.get_running_loop()
        self._count_read()
        return await loop.run_in_executor(self._executor, self._read_transaction, work)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._executor.shutdown(wait=True)
        self.engine.dispose()


def _nothing() -> None:
    pass


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; Quire stores them in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def insert_if_absent(connection: Connection, table: Table, values: dict[str, Any]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when a row was inserted."""
    statement = _insert_if_absent(table, connection.dialect.name, tuple(sorted(values)))
    return connection.execute(statement, values).first() is not None


@functools.lru_cache(maxsize=256)
def _insert_if_absent(table: Table, dialect: str, columns: tuple[str, ...]) -> Any:
    """The statement, built once per table, dialect and set of columns (building
    it on every call costs more CPU than running it)."""
    # The dialect's module is imported here, by name: a service on SQLite never
    # loads PostgreSQL's (about 45 ms of every service start).
    module = importlib.import_module(
        "sqlalchemy.dialects.postgresql"
        if dialect == "postgresql"
        else "sqlalchemy.dialects.sqlite"
    )
    key = next(iter(table.primary_key.columns))
    values: dict[str, Any] = {column: bindparam(column) for column in columns}
    return module.insert(table).values(values).on_conflict_do_nothing().returning(key)
