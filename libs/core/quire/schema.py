"""Bringing a service's database to its schema at start, cheaply.

Most starts find the database already at the newest revision (a restart) or
empty (a new installation). Neither needs Alembic, whose import alone costs
a service a fifth of a second of CPU at every start:

- at the newest revision: nothing to do;
- empty: the tables are created as declared and the database is stamped
  with the newest revision. This is Alembic's own recipe for a new database
  ("create_all, then stamp head"); a test checks that every chain of
  migrations ends at exactly the declared schema, so both roads lead to the
  same tables.

Everything else (an older revision, a database made before migrations) goes
through the migrations themselves (``quire.migrations.apply_migrations``).
Both fast paths run under the same lock as the migrations, so replicas
starting together never race.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import (
    Column,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
)

from quire.database import Database
from quire.schemalock import locked_schema_transaction

__all__ = ["VERSION_TABLE", "chain_head", "upgrade_schema"]

_REVISION = re.compile(r'^revision: str = "([^"]+)"', re.M)
_DOWN_REVISION = re.compile(r'^down_revision: [^=]+= (?:None|"([^"]+)")', re.M)

VERSION_TABLE = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
"""Alembic's record of a database's revision, exactly as Alembic makes it."""


def chain_head(versions: Path) -> str | None:
    """The newest revision of the chain in ``versions``, read from the files;
    None when they do not make one straight chain (Alembic then decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in versions.glob("*.py"):
        source = path.read_text()
        revision = _REVISION.search(source)
        down = _DOWN_REVISION.search(source)
        if revision is None or down is None:
            return None
        revisions.add(revision.group(1))
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def upgrade_schema(database: Database, metadata: MetaData, versions: Path) -> str:
    """Bring ``database`` to the newest revision in ``versions``; returns it."""
    head = chain_head(versions)
    if head is not None:
        with locked_schema_transaction(database) as connection:
            tables = set(inspect(connection).get_table_names())
            if VERSION_TABLE.name in tables:
                current = connection.execute(VERSION_TABLE.select()).scalars().all()
                if current == [head]:
                    return head
            elif not tables & set(metadata.tables):
                metadata.create_all(connection)
                VERSION_TABLE.create(connection)
                connection.execute(VERSION_TABLE.insert().values(version_num=head))
                return head
    from quire.migrations import apply_migrations  # Alembic, only when there is work for it

    return apply_migrations(database, metadata, versions)
