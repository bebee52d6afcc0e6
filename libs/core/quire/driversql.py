"""Hot statements run on SQLite's own cursor, compiled once.

SQLAlchemy Core spends 50-80 µs of CPU around each statement it runs
(parameters, an execution context, a result object): about what SQLite
itself spends on a small write, and several times what it spends on an
indexed read. For the few statements
every job runs several times (a stage's lease, audit's ledger appends), a
``DriverStatement`` compiles the statement once per dialect and, on SQLite,
runs it on the driver's cursor, with each value converted by the bind
processor SQLAlchemy itself would have used and each result value by its
result processor: the same SQL and the same bytes on disk. On any other
database the statement runs through SQLAlchemy as before.

A list bound for ``IN`` is sent as one placeholder per value (SQLAlchemy's
own way, done once per list length). A bind SQLAlchemy would render into the
SQL text, or a column whose default SQLAlchemy fills in, is refused when the
statement is first compiled, never silently sent wrong. A driver error is
raised as SQLAlchemy would raise it (its ``DBAPIError`` kinds, parameters
hidden), so callers see one exception tree either way.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

__all__ = ["DriverStatement"]

_Processor = Callable[[Any], Any] | None
_KEPT_SHAPES = 64
"""SQL texts kept per statement, one per set of list lengths."""


class _Compiled:
    """One statement as SQLite's driver takes it: SQL text, where each
    parameter comes from, and how values and rows are converted."""

    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect))
        self.sql = compiled.string
        names = compiled.positiontup
        if names is None:
            raise TypeError("a driver statement needs positional parameters (SQLite's)")
        if compiled.insert_prefetch or compiled.update_prefetch:
            # SQLAlchemy computes these columns' values in Python as it runs the
            # statement; the driver would be sent nothing for them.
            raise TypeError("a column's default or onupdate is filled in by SQLAlchemy")
        self.sources: list[tuple[str, bool, Any, _Processor, bool]] = []
        """Each parameter's key, whether the caller gives it (else the statement
        holds its value), that value, its conversion, and whether it is a list
        (``IN``) that stands for as many parameters as it holds."""
        self.lists: list[str] = []
        """The keys of the list parameters, once each."""
        for name in names:
            bind = compiled.binds[name]
            if bind.literal_execute:
                raise TypeError(f"parameter {name!r} is not sent as it is")
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            self.sources.append(
                (bind.key, bind.required, bind.effective_value, processor, bind.expanding)
            )
            if bind.expanding and bind.key not in self.lists:
                if f"__[POSTCOMPILE_{bind.key}]" not in self.sql:
                    raise TypeError(f"list parameter {name!r} is not where it is expected")
                self.lists.append(bind.key)
        self._sql_for: dict[tuple[int, ...], str] = {}
        columns = list(getattr(statement, "exported_columns", ()))
        self.row: Any = namedtuple("Row", [column.key for column in columns]) if columns else None  # type: ignore[misc]
        self.results: list[_Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]
        self.converts = any(p is not None for p in self.results)

    def bound(self, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The SQL for these parameters (a list's placeholders as many as it
        holds; SQLite takes ``IN ()``), and the values in order."""
        out: list[Any] = []
        for key, given, constant, processor, listed in self.sources:
            value = params[key] if given else constant
            if listed:
                out.extend(v if processor is None or v is None else processor(v) for v in value)
            else:
                out.append(value if processor is None or value is None else processor(value))
        if not self.lists:
            return self.sql, out
        lengths = tuple(len(params[key]) for key in self.lists)
        sql = self._sql_for.get(lengths)
        if sql is None:
            sql = self.sql
            for key, length in zip(self.lists, lengths, strict=True):
                sql = sql.replace(f"__[POSTCOMPILE_{key}]", ", ".join("?" * length))
            if len(self._sql_for) < _KEPT_SHAPES:
                self._sql_for[lengths] = sql
        return sql, out

    def rows(self, raw: Sequence[tuple[Any, ...]]) -> list[Any]:
        assert self.row is not None
        make = self.row._make
        if not self.converts:
            return [make(row) for row in raw]
        results = self.results
        return [
            make(value if p is None else p(value) for p, value in zip(results, row, strict=True))
            for row in raw
        ]


class DriverStatement:
    """A statement built once, run on SQLite's cursor (through SQLAlchemy elsewhere)."""

    def __init__(self, statement: Executable, *, strict: bool = True) -> None:
        """``strict``: a statement the driver would be sent wrong raises
        ``TypeError`` when first run on SQLite; otherwise it quietly runs
        through SQLAlchemy (for helpers that build statements for any table)."""
        self.statement = statement
        self._strict = strict
        self._compiled: _Compiled | None = None
        self._unfit = False

    def _for(self, connection: Connection) -> _Compiled | None:
        if self._unfit or connection.dialect.name != "sqlite":
            return None
        if self._compiled is None:
            try:
                self._compiled = _Compiled(self.statement, connection.dialect)
            except TypeError:
                if self._strict:
                    raise
                self._unfit = True
                return None
        return self._compiled

    def rows(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """The rows the statement returns (each with its columns as attributes)."""
        compiled = self._for(connection)
        if compiled is None:
            return list(connection.execute(self.statement, dict(params)))
        return compiled.rows(_executed(connection, compiled, params).fetchall())

    def first(self, connection: Connection, params: Mapping[str, Any]) -> Any:
        """The first row the statement returns, or None."""
        rows = self.rows(connection, params)
        return rows[0] if rows else None

    def returned_each(self, connection: Connection, each: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The statement run once for each of ``each``; the first column of each
        row the runs return, in order (an insert that did nothing returns none).
        Elsewhere it is one ``executemany``, whose RETURNING must be sorted by
        parameter order for the order to hold."""
        compiled = self._for(connection)
        if compiled is None:
            return list(connection.execute(self.statement, [dict(p) for p in each]).scalars())
        returned = []
        for params in each:
            row = _executed(connection, compiled, params).fetchone()
            if row is not None:
                returned.append(row[0])
        return returned

    def run_each(self, connection: Connection, each: Sequence[Mapping[str, Any]]) -> None:
        """The statement, which returns no rows, run once for each of ``each``."""
        if not each:
            return
        compiled = self._for(connection)
        if compiled is None:
            connection.execute(self.statement, [dict(p) for p in each])
            return
        for params in each:
            _executed(connection, compiled, params)

    def run(self, connection: Connection, params: Mapping[str, Any]) -> int:
        """Run a statement that returns no rows; the number of rows it changed."""
        compiled = self._for(connection)
        if compiled is None:
            return connection.execute(self.statement, dict(params)).rowcount
        return _executed(connection, compiled, params).rowcount


def _executed(connection: Connection, compiled: _Compiled, params: Mapping[str, Any]) -> Any:
    """The driver's cursor after running ``compiled`` with ``params``."""
    driver: Any = connection.connection.driver_connection
    dialect = connection.dialect
    sql, values = compiled.bound(params)
    try:
        return driver.execute(sql, values)
    except dialect.loaded_dbapi.Error as error:
        raise exc.DBAPIError.instance(
            sql,
            None,
            error,
            dialect.loaded_dbapi.Error,
            hide_parameters=True,
            dialect=dialect,
            ismulti=False,
        ) from error
