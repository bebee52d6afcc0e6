"""Quire's worker threads carry their role in the names the OS shows
(``quire.threadnames``), and ``make bench`` reads each service's CPU by
those roles from ``/proc`` (``bench/procstats.thread_role_ticks``)."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

from quire.database import Database
from quire.threadnames import ROLES, named_pool

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _procstats() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("procstats")
    finally:
        sys.path.remove(str(BENCH))


def _os_name() -> str:
    with open(f"/proc/self/task/{_tid()}/comm", encoding="utf-8") as handle:
        return handle.read().strip()


def _tid() -> int:
    return threading.get_native_id()


def _busy(seconds: float) -> str:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass
    return _os_name()


def test_a_pool_thread_is_known_to_the_os_by_its_role_and_number() -> None:
    pool = named_pool("sandbox", 1, initializer=lambda: None)
    try:
        assert pool.submit(_os_name).result() == "sandbox_0"
    finally:
        pool.shutdown()


def test_the_database_threads_are_named_for_writes_and_reads(tmp_path: Path) -> None:
    from sqlalchemy import MetaData

    database = Database(f"sqlite:///{tmp_path / 'db.sqlite'}", MetaData(), threads=1)
    try:
        assert database.transaction(lambda _c: _os_name()) != "db-write_0"  # the caller's own
        assert database._writer.submit(_os_name).result() == "db-write_0"  # noqa: SLF001
        assert database._executor.submit(_os_name).result() == "db_0"  # noqa: SLF001
    finally:
        database.close()


def test_cpu_is_counted_by_the_role_of_the_thread_that_used_it() -> None:
    procstats = _procstats()
    before = procstats.thread_role_ticks(os.getpid(), ROLES)
    pool = named_pool("io", 1)
    try:
        assert pool.submit(_busy, 0.3).result() == "io_0"
        after = procstats.thread_role_ticks(os.getpid(), ROLES)
    finally:
        pool.shutdown()
    spent = (after.get("io", 0) - before.get("io", 0)) * procstats.TICK_SECONDS
    assert 0.2 <= spent <= 1.0, spent
    assert procstats.LOOP in after  # this thread, the process's main one
