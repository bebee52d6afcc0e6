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
On SQLite each of the database's own threads keeps one connection open and
begins its transactions on it: taking a connection from the pool and giving
it back (with the pool's reset) cost about a third of a small transaction's
CPU. Other threads, and a transaction begun inside another, take one from
the pool as before; PostgreSQL always does (its pool checks a connection
is alive before handing it out).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    select,
)

from quire.driversql import DriverStatement
from quire.threadnames import named_pool

__all__ = [
    "Database",
    "savepoint",
    "insert_if_absent",
    "insert_each_if_absent",
    "upsert_insert",
    "as_utc",
    "database_now",
]

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

    return engine


def begin_on_driver(connection: Connection, *, read_only: bool = False) -> None:
    """Begin SQLite's transaction on a connection SQLAlchemy has just begun
    (pysqlite begins none itself): ``BEGIN IMMEDIATE`` takes the write lock at
    once, so two writers never deadlock upgrading; a read-only ``BEGIN`` never
    waits for the writer (WAL). Nothing on other databases, whose drivers
    begin their own.

    Called here rather than from a ``begin`` event: any listener on the engine's
    connection events makes SQLAlchemy dispatch four events around every
    statement, which costs more than many of the statements."""
    if connection.dialect.name == "sqlite":
        driver: Any = connection.connection.driver_connection
        driver.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")


_SAVEPOINT = "quire_savepoint"


@contextmanager
def savepoint(connection: Connection) -> Iterator[None]:
    """A savepoint in the connection's transaction: what the block writes is
    undone if it raises (and the exception goes on), what came before stays.
    On SQLite its three statements go to the driver as they are: SQLAlchemy
    compiles ``SAVEPOINT`` and ``RELEASE`` anew each time, which cost a
    quarter of a small transaction's CPU. Savepoints nest (SQLite's name a
    savepoint opened later hides, so the innermost is the one released or
    rolled back to). Elsewhere it is SQLAlchemy's ``begin_nested``."""
    if connection.dialect.name != "sqlite":
        with connection.begin_nested():
            yield
        return
    driver: Any = connection.connection.driver_connection
    if not driver.in_transaction:
        # SQLite rolled the whole transaction back (a full disk, say): a
        # savepoint now would begin one of its own, which its release commits.
        raise RuntimeError("a savepoint outside any transaction")
    driver.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        yield
    except BaseException as error:
        try:
            driver.execute(f"ROLLBACK TO {_SAVEPOINT}")
            driver.execute(f"RELEASE {_SAVEPOINT}")
        except Exception:  # noqa: BLE001 - the transaction is gone: the block's error is the cause
            raise error from None
        raise
    driver.execute(f"RELEASE {_SAVEPOINT}")


@contextmanager
def schema_transaction(database: Database) -> Iterator[Connection]:
    """One write transaction outside the database's threads (schema changes)."""
    with database.engine.begin() as connection:
        begin_on_driver(connection)
        yield connection


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
        self._kept = threading.local()
        self._kept_all: list[Connection] = []
        self._kept_lock = threading.Lock()
        keeps = self._keep_connections if single_writer else None
        self._executor = named_pool("db", threads, keeps)
        self._writer = named_pool("db-write", 1, keeps) if single_writer else self._executor

    def _keep_connections(self) -> None:
        """On one of the database's own threads: it keeps its connections."""
        self._kept.connections = {}

    def _kept_connection(self, engine: Engine) -> Connection | None:
        """This thread's own open connection to ``engine``, if it keeps one and
        no transaction is open on it (one begun inside another gets its own)."""
        connections: dict[int, Connection] | None = getattr(self._kept, "connections", None)
        if connections is None:
            return None
        connection = connections.get(id(engine))
        if connection is None or connection.closed or connection.invalidated:
            connection = engine.connect()
            connections[id(engine)] = connection
            with self._kept_lock:
                self._kept_all.append(connection)
        if connection.in_transaction():
            return None
        return connection

    def _begin(self, engine: Engine, work: Callable[[Connection], T]) -> T:
        read_only = engine is self._read_engine
        connection = self._kept_connection(engine)
        if connection is None:
            with engine.begin() as connection:
                begin_on_driver(connection, read_only=read_only)
                return work(connection)
        with connection.begin():
            begin_on_driver(connection, read_only=read_only)
            return work(connection)

    def create_schema(self) -> None:
        """Create missing tables; existing ones are left as they are."""
        self._metadata.create_all(self.engine)

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction on the calling thread."""
        return self._begin(self.engine, work)

    async def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction on the database's writer thread(s)."""
        loop = asyncio.get_running_loop()
        self._count_write()
        return await loop.run_in_executor(self._writer, self.transaction, work)

    def _read_transaction(self, work: Callable[[Connection], T]) -> T:
        return self._begin(self._read_engine, work)

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work``, which only reads, in one transaction that takes no write lock."""
        loop = asyncio.get_running_loop()
        self._count_read()
        return await loop.run_in_executor(self._executor, self._read_transaction, work)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._executor.shutdown(wait=True)
        with self._kept_lock:
            kept, self._kept_all = self._kept_all, []
        for connection in kept:
            connection.close()
        self.engine.dispose()


def _nothing() -> None:
    pass


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; Quire stores them in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def database_now(connection: Connection, clock: Callable[[], datetime] | None = None) -> datetime:
    """Now, by the clock every replica of a service shares: the database
    server's (PostgreSQL's ``now()``, the start of the caller's transaction)
    when it has one; else ``clock`` (this process's, by default), which on
    SQLite is the only writer's anyway (one process, one host).

    Leases that several replicas judge are judged on it, so a replica
    whose own clock is skewed neither takes a live lease nor gives up its
    own early."""
    if connection.dialect.name == "postgresql":
        return as_utc(connection.execute(select(func.now())).scalar_one())
    return clock() if clock is not None else datetime.now(UTC)


def insert_if_absent(connection: Connection, table: Table, values: dict[str, Any]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when a row was inserted."""
    statement = _insert_if_absent(table, connection.dialect.name, tuple(sorted(values)))
    return statement.first(connection, values) is not None


def insert_each_if_absent(
    connection: Connection, table: Table, rows: list[dict[str, Any]], returning: str
) -> set[Any]:
    """``insert_if_absent`` for each of ``rows`` (all with the same columns),
    in one statement; the ``returning`` column of the rows inserted."""
    if not rows:
        return set()
    statement = _insert_if_absent(table, connection.dialect.name, tuple(sorted(rows[0])), returning)
    return set(statement.returned_each(connection, rows))


@functools.lru_cache(maxsize=256)
def _insert_if_absent(
    table: Table, dialect: str, columns: tuple[str, ...], returning: str = ""
) -> DriverStatement:
    """The statement, built once per table, dialect and set of columns (building
    it on every call costs more CPU than running it); it returns the primary
    key's first column, or ``returning``. On SQLite it runs on the driver's
    cursor unless a column's value is SQLAlchemy's to fill in."""
    key = table.c[returning] if returning else next(iter(table.primary_key.columns))
    values: dict[str, Any] = {column: bindparam(column) for column in columns}
    return DriverStatement(
        upsert_insert(table, dialect).values(values).on_conflict_do_nothing().returning(key),
        strict=False,
    )


def upsert_insert(table: Table, dialect: str) -> Any:
    """``table``'s INSERT in the dialect's own form, which can say what to do
    ON CONFLICT (SQLite and PostgreSQL spell it alike)."""
    # The dialect's module is imported here, by name: a service on SQLite never
    # loads PostgreSQL's (about 45 ms of every service start).
    module = importlib.import_module(
        "sqlalchemy.dialects.postgresql"
        if dialect == "postgresql"
        else "sqlalchemy.dialects.sqlite"
    )
    return module.insert(table)
