"""Read-only access to a service's own database, for exporting its records
while the stack is stopped (``quire.storedexport``).

The URL is the one the service itself uses (``ServiceSettings.from_env``:
``QUIRE_<SERVICE>_DATABASE_URL``, else SQLite under the data directory), so
a stack on PostgreSQL is read where it keeps its data. Nothing is ever
written: SQLite is opened with ``mode=ro`` (or ``immutable=1`` when the stack
is stopped and no write-ahead log is left, so not even the ``-shm`` file is
created), PostgreSQL with ``default_transaction_read_only``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event

__all__ = ["sqlite_path", "database_exists", "read_only_engine"]


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for any other database."""
    if not url.startswith("sqlite"):
        return None
    _scheme, _, rest = url.partition(":///")
    return Path(rest.split("?", 1)[0])


def database_exists(url: str) -> bool:
    """False only for a SQLite file that is not there (the service never ran)."""
    path = sqlite_path(url)
    return path is None or path.is_file()


def read_only_engine(url: str, *, stopped: bool) -> Engine:
    """An engine that cannot write to the database at ``url``."""
    path = sqlite_path(url)
    if path is None:
        return create_engine(
            url,
            hide_parameters=True,
            connect_args={"options": "-c default_transaction_read_only=on"},
        )
    wal = Path(f"{path}-wal")
    immutable = stopped and not wal.exists()
    mode = "immutable=1" if immutable else "mode=ro"
    uri = f"file:{quote(str(path))}?{mode}"

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
        connection.isolation_level = None  # transactions begin where SQLAlchemy says
        connection.execute("PRAGMA query_only=ON")
        return connection

    engine = create_engine("sqlite://", creator=connect, hide_parameters=True)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")  # one snapshot for every read that follows

    return engine
