"""Quire's worker threads carry their role in their names, as the OS shows
them (``top -H``, ``ps -L``, ``/proc/<pid>/task/<tid>/comm``): ``db-write``,
``db`` (reads), ``sandbox`` (calls into sandbox workers) and ``io`` (the
event loop's default executor: blob and file work). Python names its threads
but, before 3.14, does not tell the OS; each pool's initializer does, so an
operator (and ``make bench``'s CPU table by thread) sees where a process's
time goes. The event loop runs on the main thread, which keeps the process's
own name."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["ROLES", "named_pool", "name_os_thread"]

ROLES = ("db-write", "db", "sandbox", "io")
"""The roles, as the start of an OS thread name (before ``_<n>``)."""
_PR_SET_NAME = 15
_NAME_BYTES = 15


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    prctl: Callable[..., int] = ctypes.CDLL(library, use_errno=True).prctl
    return prctl


def name_os_thread(role: str) -> None:
    """Name the calling thread ``<role>_<n>`` for the OS, ``n`` being the
    number its pool gave it (nothing where the OS has no such call)."""
    prctl = _prctl()
    if prctl is None:
        return
    _, _, number = threading.current_thread().name.rpartition("_")
    name = f"{role}_{number}" if number.isdigit() else role
    prctl(_PR_SET_NAME, name.encode()[:_NAME_BYTES], 0, 0, 0)


def named_pool(
    role: str, max_workers: int | None = None, initializer: Callable[[], None] | None = None
) -> ThreadPoolExecutor:
    """A thread pool whose threads are named ``<role>_<n>`` for the OS too;
    ``initializer`` runs after the naming."""

    def start() -> None:
        name_os_thread(role)
        if initializer is not None:
            initializer()

    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=role, initializer=start)
