"""Hot statements on SQLite's own cursor (``quire.driversql``): the same SQL,
the same stored bytes and the same errors as through SQLAlchemy."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    exc,
    select,
    update,
)

from quire.database import Database
from quire.driversql import DriverStatement

METADATA = MetaData()
ROWS = Table(
    "rows",
    METADATA,
    Column("number", Integer, primary_key=True, autoincrement=True),
    Column("name", String(32), nullable=False, unique=True),
    Column("count", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("note", String(32), nullable=True),
    Column("facts", JSON, nullable=False),
)
DEFAULTED = Table(
    "defaulted",
    METADATA,
    Column("name", String(32), primary_key=True),
    Column("count", Integer, nullable=False, default=7),
)
VALUES = ("name", "count", "data", "at", "note", "facts")
INSERT = ROWS.insert().values({name: bindparam(name) for name in VALUES})
AT = datetime(2026, 12, 6, 9, 30, 1, 123456, tzinfo=UTC)


@pytest.fixture
def database(tmp_path: Path) -> Any:
    db = Database(f"sqlite:///{tmp_path / 'rows.db'}", METADATA)
    db.create_schema()
    yield db
    db.close()


def _row(name: str, **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "count": 3,
        "data": b"\x00\xffbytes",
        "at": AT,
        "note": None,
        "facts": {"b": [1, "é"], "a": None},
        **changes,
    }


def _stored(path: Path, name: str) -> list[tuple[Any, ...]]:
    """Each column's storage class and value, as SQLite holds them."""
    with sqlite3.connect(path) as raw:
        return raw.execute(
            "SELECT typeof(count), count, typeof(data), data, typeof(at), at, typeof(note), note, "
            "typeof(facts), facts FROM rows WHERE name = ?",
            (name,),
        ).fetchall()


def test_a_row_written_on_the_driver_is_stored_as_sqlalchemy_stores_it(
    database: Database, tmp_path: Path
) -> None:
    on_driver = DriverStatement(INSERT)
    database.transaction(lambda c: c.execute(INSERT, _row("through-sqlalchemy")))
    database.transaction(lambda c: on_driver.run(c, _row("on-the-driver")))
    stored = _stored(tmp_path / "rows.db", "on-the-driver")
    assert stored == _stored(tmp_path / "rows.db", "through-sqlalchemy")
    assert stored[0][4:6] == ("text", "2026-12-06 09:30:01.123456")


def test_rows_come_back_with_their_columns_converted(database: Database) -> None:
    database.transaction(lambda c: c.execute(INSERT, _row("a")))
    touch = DriverStatement(
        update(ROWS)
        .where(ROWS.c.name == bindparam("b_name"))
        .values(count=ROWS.c.count + 1)
        .returning(ROWS.c.count, ROWS.c.at, ROWS.c.data)
    )
    (row,) = database.transaction(lambda c: touch.rows(c, {"b_name": "a"}))
    assert (row.count, row.at.replace(tzinfo=UTC), row.data) == (4, AT, b"\x00\xffbytes")
    read = DriverStatement(select(ROWS.c.name, ROWS.c.at).where(ROWS.c.name == bindparam("n")))
    assert database.transaction(lambda c: read.first(c, {"n": "missing"})) is None
    found = database.transaction(lambda c: read.first(c, {"n": "a"}))
    through = database.transaction(
        lambda c: c.execute(select(ROWS.c.at).where(ROWS.c.name == "a")).scalar_one()
    )
    assert found.at == through


def test_each_run_returns_its_own_row_in_order(database: Database) -> None:
    inserted = DriverStatement(INSERT.returning(ROWS.c.number, sort_by_parameter_order=True))
    numbers = database.transaction(
        lambda c: inserted.returned_each(c, [_row(f"r{i}", count=i) for i in range(5)])
    )
    counts = database.transaction(
        lambda c: dict(c.execute(select(ROWS.c.number, ROWS.c.count)).all())
    )
    assert [counts[n] for n in numbers] == [0, 1, 2, 3, 4]
    moved = DriverStatement(
        update(ROWS).where(ROWS.c.name == bindparam("b_name")).values(note=bindparam("b_note"))
    )
    database.transaction(
        lambda c: moved.run_each(
            c, [{"b_name": "r1", "b_note": "x"}, {"b_name": "r3", "b_note": "y"}]
        )
    )
    notes = database.transaction(lambda c: dict(c.execute(select(ROWS.c.name, ROWS.c.note)).all()))
    assert notes == {"r0": None, "r1": "x", "r2": None, "r3": "y", "r4": None}


def test_statements_the_driver_would_be_sent_wrong_are_refused(database: Database) -> None:
    rendered = DriverStatement(
        select(ROWS.c.name).where(ROWS.c.count == bindparam("n", literal_execute=True))
    )
    with pytest.raises(TypeError, match="not sent as it is"):
        database.transaction(lambda c: rendered.rows(c, {"n": 1}))
    defaulted = DriverStatement(DEFAULTED.insert().values(name=bindparam("name")))
    with pytest.raises(TypeError, match="default"):
        database.transaction(lambda c: defaulted.run(c, {"name": "a"}))


def test_a_driver_error_is_sqlalchemys_error_without_its_parameters(database: Database) -> None:
    on_driver = DriverStatement(INSERT)
    database.transaction(lambda c: on_driver.run(c, _row("taken")))
    with pytest.raises(exc.IntegrityError) as refused:
        database.transaction(lambda c: on_driver.run(c, _row("taken", note="secret-note")))
    assert "secret-note" not in str(refused.value)
    assert "taken" not in str(refused.value)
    assert isinstance(refused.value.orig, sqlite3.IntegrityError)


class _OtherDatabase:
    """A connection to a database other than SQLite (unit: what is handed to SQLAlchemy)."""

    class dialect:  # noqa: N801 - mirrors Connection.dialect
        name = "postgresql"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []

    def execute(self, statement: Any, params: Any) -> Any:
        self.calls.append((statement, params))
        return self

    rowcount = 1


def test_on_another_database_the_statement_runs_through_sqlalchemy() -> None:
    statement = DriverStatement(INSERT)
    other = _OtherDatabase()
    assert statement.run(other, _row("a")) == 1  # type: ignore[arg-type]
    statement.run_each(other, [_row("b"), _row("c")])  # type: ignore[arg-type]
    assert [call[0] for call in other.calls] == [INSERT, INSERT]
    assert other.calls[0][1] == _row("a")
    assert [p["name"] for p in other.calls[1][1]] == ["b", "c"]


def test_values_the_statement_holds_are_sent_even_when_null(database: Database) -> None:
    database.transaction(lambda c: c.execute(INSERT, _row("held", note="set")))
    cleared = DriverStatement(
        update(ROWS).where(ROWS.c.name == bindparam("n")).values(note=None, count=ROWS.c.count + 2)
    )
    assert database.transaction(lambda c: cleared.run(c, {"n": "held"})) == 1
    row = database.transaction(
        lambda c: c.execute(select(ROWS.c.note, ROWS.c.count).where(ROWS.c.name == "held")).one()
    )
    assert (row.note, row.count) == (None, 5)


def test_insert_if_absent_says_what_it_inserted_on_the_driver_or_not(database: Database) -> None:
    from quire.database import insert_each_if_absent, insert_if_absent

    rows = [_row("x"), _row("y")]
    assert database.transaction(lambda c: insert_if_absent(c, ROWS, rows[0]))
    assert not database.transaction(lambda c: insert_if_absent(c, ROWS, rows[0]))
    added = database.transaction(
        lambda c: insert_each_if_absent(c, ROWS, [rows[0], rows[1], _row("z")], "name")
    )
    assert added == {"y", "z"}
    # A column SQLAlchemy fills in (its default) goes through SQLAlchemy, filled.
    assert database.transaction(lambda c: insert_if_absent(c, DEFAULTED, {"name": "d"}))
    assert not database.transaction(lambda c: insert_if_absent(c, DEFAULTED, {"name": "d"}))
    count = database.transaction(lambda c: c.execute(select(DEFAULTED.c.count)).scalar_one())
    assert count == 7


def test_a_list_is_sent_as_one_parameter_per_value(database: Database) -> None:
    database.transaction(
        lambda c: c.execute(INSERT, [_row(f"l{i}", at=AT.replace(second=i)) for i in range(4)])
    )
    listed = DriverStatement(
        select(ROWS.c.name, ROWS.c.at)
        .where(ROWS.c.name.in_(bindparam("names", expanding=True)), ROWS.c.count == bindparam("c"))
        .order_by(ROWS.c.name)
    )
    twice = DriverStatement(
        select(ROWS.c.name)
        .where(ROWS.c.name.in_(bindparam("names", expanding=True)))
        .union_all(select(ROWS.c.name).where(ROWS.c.name.in_(bindparam("names", expanding=True))))
    )
    by_time = DriverStatement(
        select(ROWS.c.name).where(ROWS.c.at.in_(bindparam("moments", expanding=True)))
    )
    for names in ([], ["l1"], ["l3", "l0", "missing"]):
        found = database.transaction(lambda c: listed.rows(c, {"names": names, "c": 3}))  # noqa: B023
        assert [r.name for r in found] == sorted(n for n in names if n != "missing")
        assert all(r.at.second == int(r.name[1]) for r in found)
        doubled = database.transaction(lambda c: twice.rows(c, {"names": names}))  # noqa: B023
        assert sorted(r.name for r in doubled) == sorted(2 * [n for n in names if n != "missing"])
    # Each value converted as SQLAlchemy converts it (a datetime, here).
    moments = [AT.replace(second=2), AT.replace(second=0)]
    found = database.transaction(lambda c: by_time.rows(c, {"moments": moments}))
    assert sorted(r.name for r in found) == ["l0", "l2"]
