"""One schema change at a time across a service's replicas: the transaction
every schema change (the fast paths of ``quire.schema`` and Alembic's
migrations in ``quire.migrations``) runs in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text

from quire.database import Database, schema_transaction

__all__ = ["locked_schema_transaction"]

_LOCK_KEY = 0x71756972  # "quir": a PostgreSQL advisory lock held while the schema changes


@contextmanager
def locked_schema_transaction(database: Database) -> Iterator[Connection]:
    """A schema transaction that replicas take one at a time: SQLite's write
    transaction already serialises them; PostgreSQL takes an advisory lock
    held until the commit."""
    with schema_transaction(database) as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        yield connection
