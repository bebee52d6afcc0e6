"""A database that cannot answer just now: a transient fault, not an internal error.

A service's database may be unreachable (a network cut, PostgreSQL
restarting), drop a connection mid-transaction, or (SQLite) stay locked past
the busy timeout. Met at a service's gRPC edge, any of these is
``DATABASE_UNAVAILABLE`` (UNAVAILABLE, retryable), as a blob store that does
not answer is ``STORAGE_UNAVAILABLE``; a caller retries later, as it would for
any dependency away. Stages already retry every such error with backoff.

What counts: an error SQLAlchemy raised for the driver with the connection
found dead; SQLite busy, locked, full or failing I/O; PostgreSQL's
connection, conflict, resource and shutdown errors, or no answer at all; and
SQLAlchemy's own pool timeout. A statement that is wrong stays an internal
error. The
driver's message is never repeated: it can quote a statement's values. Its
class name is logged, so an operator still sees which it was.
"""

from __future__ import annotations

import logging

from quire.errors import TransientError
from quire.reasons import ReasonCode

__all__ = ["as_database_error", "is_unavailable"]

log = logging.getLogger(__name__)


_SQLITE_PASSING = frozenset({5, 6, 10, 13, 14, 15})
"""SQLite's primary result codes for a passing fault: busy, locked, an I/O
error, full, cannot open, the lock protocol. Anything else (no such table,
a constraint) is a fault in the statement, not the database's availability."""
_POSTGRESQL_PASSING = frozenset({"08", "40", "53", "57"})
"""PostgreSQL's SQLSTATE classes for a passing fault: the connection, a
transaction rolled back for a conflict, resources, the server going away."""


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database could not answer just now."""
    if not type(error).__module__.startswith("sqlalchemy."):
        return False  # and a process that never loaded SQLAlchemy does not load it here
    from sqlalchemy import exc

    if isinstance(error, exc.TimeoutError | exc.DisconnectionError):
        return True
    if not isinstance(error, exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    driver = error.orig
    sqlite_code = getattr(driver, "sqlite_errorcode", None)
    if sqlite_code is not None:
        return sqlite_code & 0xFF in _SQLITE_PASSING
    if not isinstance(error, exc.OperationalError | exc.InterfaceError):
        return False
    state = getattr(driver, "sqlstate", None)
    # No SQLSTATE: the server never answered (the connection could not be made).
    return state is None or str(state)[:2] in _POSTGRESQL_PASSING


def as_database_error(error: Exception) -> Exception:
    """DATABASE_UNAVAILABLE for a database that could not answer; any other error as it is."""
    if not is_unavailable(error):
        return error
    driver = getattr(error, "orig", None)
    log.warning(
        "database unavailable (%s%s)",
        type(error).__name__,
        f", {type(driver).__name__}" if driver is not None else "",
    )
    converted = TransientError(ReasonCode.DATABASE_UNAVAILABLE, "the database did not answer")
    converted.__cause__ = error
    return converted
