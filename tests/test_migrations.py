"""Every service's schema comes from its chain of migrations, on SQLite and
PostgreSQL: an empty database is upgraded to exactly what the tables declare,
a database made before migrations is stamped and upgraded, replicas starting
together apply each step once, and the chain's later steps change a database
that holds rows without losing them."""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from quire.database import Database
from quire.migrations import BASELINE, _config, apply_migrations, current_revision
from quire.schema import chain_head, upgrade_schema

SERVICES = ("admission", "validator", "assembler", "signer", "audit")


def _tables(service: str) -> ModuleType:
    return importlib.import_module(f"quire.{service}.tables")


def _head(tables: ModuleType) -> str:
    database = Database("sqlite://", tables.metadata)
    with database.engine.connect() as connection:
        head = ScriptDirectory.from_config(
            _config(tables.MIGRATIONS, connection, tables.metadata)
        ).get_current_head()
    database.close()
    assert head is not None
    return head


def _differences(database: Database, tables: ModuleType) -> list[object]:
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, tables.metadata))


def _sqlite(tmp_path: Path, tables: ModuleType) -> Database:
    return Database(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}", tables.metadata)


def _postgres(postgres: object, tables: ModuleType) -> Database:
    url = postgres.create_database(f"m{uuid.uuid4().hex[:12]}")  # type: ignore[attr-defined]
    return Database(url, tables.metadata)


@pytest.mark.parametrize("service", SERVICES)
def test_the_whole_chain_on_an_empty_sqlite_database_ends_at_exactly_the_declared_schema(
    service: str, tmp_path: Path
) -> None:
    tables = _tables(service)
    database = _sqlite(tmp_path, tables)
    assert apply_migrations(database, tables.metadata, tables.MIGRATIONS) == _head(tables)
    assert current_revision(database) == _head(tables)
    assert _differences(database, tables) == []
    database.close()


@pytest.mark.parametrize("service", SERVICES)
def test_the_whole_chain_on_an_empty_postgres_database_ends_at_exactly_the_declared_schema(
    service: str, postgres: object
) -> None:
    tables = _tables(service)
    database = _postgres(postgres, tables)
    apply_migrations(database, tables.metadata, tables.MIGRATIONS)
    assert current_revision(database) == _head(tables)
    assert _differences(database, tables) == []
    database.close()


@pytest.mark.parametrize("service", SERVICES)
def test_a_database_made_before_migrations_is_stamped_then_upgraded(
    service: str, tmp_path: Path
) -> None:
    """``create_all`` of the first revision's tables, as every database was
    made before migrations; the rows in it stay."""
    tables = _tables(service)
    database = _sqlite(tmp_path, tables)
    with database.engine.begin() as connection:
        config = _config(tables.MIGRATIONS, connection, tables.metadata)
        baseline = ScriptDirectory.from_config(config).get_revision(BASELINE)
        assert baseline is not None
        # Replay the first revision by hand, leaving no alembic_version behind.
        from alembic import command

        command.upgrade(config, BASELINE)
        connection.exec_driver_sql("DROP TABLE alembic_version")
    assert current_revision(database) is None
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    assert current_revision(database) == _head(tables)
    assert _differences(database, tables) == []
    database.close()


def test_a_second_upgrade_changes_nothing(tmp_path: Path) -> None:
    tables = _tables("audit")
    database = _sqlite(tmp_path, tables)
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    before = sorted(inspect(database.engine).get_table_names())
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    assert sorted(inspect(database.engine).get_table_names()) == before
    assert current_revision(database) == _head(tables)
    database.close()


@pytest.mark.parametrize("upgrade", [upgrade_schema, apply_migrations])
def test_replicas_starting_together_upgrade_a_postgres_database_once(
    postgres: object, upgrade: object
) -> None:
    """Eight replicas of a service start at once against one database: the
    advisory lock lets one create or migrate it; the others find it done."""
    tables = _tables("admission")
    url = postgres.create_database(f"m{uuid.uuid4().hex[:12]}")  # type: ignore[attr-defined]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def replica() -> None:
        database = Database(url, tables.metadata)
        try:
            start.wait(timeout=30)
            upgrade(database, tables.metadata, tables.MIGRATIONS)  # type: ignore[operator]
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            database.close()

    threads = [threading.Thread(target=replica) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    database = Database(url, tables.metadata)
    assert current_revision(database) == _head(tables)
    assert _differences(database, tables) == []
    database.close()


@pytest.mark.parametrize("service", ("validator", "assembler", "signer", "audit"))
def test_leases_from_before_0002_are_kept_and_new_deliveries_record_when_they_leased(
    service: str, tmp_path: Path
) -> None:
    import asyncio
    from datetime import UTC, datetime

    from alembic import command

    from quire.leases import LeaseStore

    tables = _tables(service)
    database = _sqlite(tmp_path, tables)
    with database.engine.begin() as connection:
        command.upgrade(_config(tables.MIGRATIONS, connection, tables.metadata), BASELINE)
        connection.exec_driver_sql(
            "INSERT INTO stage_leases (job, token, updated_at) VALUES ('jobs/old', 3, ?)",
            (datetime.now(UTC).isoformat(),),
        )
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    with database.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT job, token, leased_at FROM stage_leases").all()
    assert [(row.job, row.token, row.leased_at) for row in rows] == [("jobs/old", 3, None)]

    leases = LeaseStore(database, tables.leases)
    assert asyncio.run(leases.acquire("jobs/old")).token == 4
    with database.engine.connect() as connection:
        leased = connection.exec_driver_sql(
            "SELECT leased_at FROM stage_leases WHERE job = 'jobs/old'"
        ).scalar_one()
    assert leased is not None
    database.close()


@pytest.mark.parametrize("service", SERVICES)
def test_the_chain_head_read_from_the_files_is_alembics(service: str) -> None:
    tables = _tables(service)
    assert chain_head(tables.MIGRATIONS) == _head(tables)


def test_a_new_database_is_created_as_declared_and_stamped_without_alembic(
    tmp_path: Path,
) -> None:
    """The fast road (a new installation, or a restart at the newest revision)
    never imports Alembic; its result is the chain's."""
    script = f"""
import sys
from quire.audit import tables
from quire.database import Database
from quire.schema import upgrade_schema
database = Database("sqlite:///{tmp_path / "new.db"}", tables.metadata)
print(upgrade_schema(database, tables.metadata, tables.MIGRATIONS))
print(upgrade_schema(database, tables.metadata, tables.MIGRATIONS))
assert "alembic" not in sys.modules, "Alembic was imported"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    tables = _tables("audit")
    assert done.stdout.split() == [_head(tables)] * 2
    database = Database(f"sqlite:///{tmp_path / 'new.db'}", tables.metadata)
    assert current_revision(database) == _head(tables)
    assert _differences(database, tables) == []
    database.close()
