"""Schema changes as Alembic migrations, on SQLite and PostgreSQL alike.

Each service owns its database and its chain of migrations, kept beside its
tables in ``quire/<service>/migrations/versions/``. A service upgrades its own
database to the newest revision when it starts (``quire.schema.upgrade_schema``,
which calls ``apply_migrations`` here when there is work for Alembic), under
a lock, so replicas starting together apply each step once. A database made
before migrations existed (by ``create_all``) holds exactly the first
revision's schema: it is stamped with that revision, then upgraded.

``Database.create_schema`` (``create_all``) stays for unit tests, which need
a throwaway schema fast; a test checks that every chain ends at exactly the
schema the tables declare, so the two cannot drift apart.

A new migration: ``tools/new-migration SERVICE "what changes"`` writes the
next revision, generated from the difference between the chain and the
tables, for review.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, inspect

from quire.database import Database
from quire.schemalock import locked_schema_transaction

__all__ = ["BASELINE", "ENVIRONMENT", "apply_migrations", "run_environment", "current_revision"]

log = logging.getLogger(__name__)

BASELINE = "0001"
"""Every chain's first revision: the schema as it was before migrations."""
ENVIRONMENT = Path(__file__).with_name("migration_environment")
"""The one Alembic environment (``env.py``, template) every service's chain runs in."""


def _config(versions: Path, connection: Connection, metadata: MetaData) -> Config:
    config = Config()
    config.set_main_option("script_location", str(ENVIRONMENT))
    config.set_main_option("version_locations", str(versions))
    config.set_main_option("path_separator", "os")
    config.attributes["connection"] = connection
    config.attributes["metadata"] = metadata
    return config


def apply_migrations(database: Database, metadata: MetaData, versions: Path) -> str:
    """Run the chain in ``versions`` on ``database`` up to its newest revision;
    returns it. ``quire.schema.upgrade_schema`` calls this when a database is
    neither empty nor already there."""
    with locked_schema_transaction(database) as connection:
        config = _config(versions, connection, metadata)
        tables = set(inspect(connection).get_table_names())
        if "alembic_version" not in tables and tables & set(metadata.tables):
            log.info("schema made before migrations: stamped %s", BASELINE)
            command.stamp(config, BASELINE)
        command.upgrade(config, "head")
        head = ScriptDirectory.from_config(config).get_current_head()
    return head or ""


def current_revision(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def run_environment(environment: Any) -> None:
    """What ``env.py`` does with Alembic's ``context``: run the migrations on
    the caller's connection, in batch mode on SQLite (which cannot alter most
    of a table in place)."""
    config = environment.config
    connection: Connection = config.attributes["connection"]
    environment.configure(
        connection=connection,
        target_metadata=config.attributes.get("metadata"),
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with environment.begin_transaction():
        environment.run_migrations()
