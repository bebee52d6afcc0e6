"""Bounded process pools for CPU-heavy and hostile work (PDF parsing, merging, signing).

Work never runs on the event loop. Each worker process lives under a memory
limit (RLIMIT_AS, set once when it starts) and each task under a CPU-time
limit (RLIMIT_CPU, set relative to what the worker has already used) and a
wall-clock timeout. A task that kills its worker, or runs out of time, makes
the pool recycle: the processes are killed and a fresh pool is started, so a
hostile file can cost a retry but never the service. Workers are started with
``forkserver`` so that no gRPC or asyncio state is forked into them.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.settings import SandboxSettings

__all__ = ["SandboxPool", "SandboxExhausted"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class SandboxExhausted(TransientError):
    """The task crashed its worker, ran out of memory or CPU, or timed out."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.PARSER_LIMIT_EXCEEDED, message)


def _start_worker(memory_bytes: int, preload: tuple[str, ...]) -> None:
    for module in preload:
        importlib.import_module(module)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def _ready() -> bool:
    return True


def _run_limited(cpu_seconds: int, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, hard))
    try:
        return fn(*args)
    except MemoryError:
        raise SandboxExhausted("memory limit reached") from None


class SandboxPool:
    """A recyclable process pool with per-task limits; at most ``workers`` tasks at once."""

    def __init__(
        self, settings: SandboxSettings, *, name: str = "sandbox", preload: tuple[str, ...] = ()
    ) -> None:
        self._settings = settings
        self._name = name
        self._preload = preload
        self._gate = asyncio.Semaphore(settings.workers)
        self._executor = self._start()
        self._generation = 0

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self._settings.workers,
            mp_context=multiprocessing.get_context("forkserver"),
            initializer=_start_worker,
            initargs=(self._settings.memory_bytes, self._preload),
        )

    async def warm(self) -> None:
        """Start every worker and load its libraries now, not on the first job."""
        await asyncio.gather(*(self.run(_ready) for _ in range(self._settings.workers)))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker process under the limits."""
        async with self._gate:
            executor, generation = self._executor, self._generation
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(
                executor, _run_limited, self._settings.cpu_seconds, fn, args
            )
            try:
                return await asyncio.wait_for(future, timeout=self._settings.wall_seconds)
            except TimeoutError:
                self._recycle(generation)
                raise SandboxExhausted("wall-clock limit reached") from None
            except BrokenProcessPool:
                self._recycle(generation)
                raise SandboxExhausted("worker process died") from None

    def _recycle(self, generation: int) -> None:
        if generation != self._generation:
            return  # another task already replaced this pool
        log.warning("%s: recycling worker processes", self._name)
        old = self._executor
        self._generation += 1
        self._executor = self._start()
        for process in list(getattr(old, "_processes", {}).values()):
            process.kill()
        old.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for process in list(getattr(self._executor, "_processes", {}).values()):
            process.kill()
        self._executor.shutdown(wait=True, cancel_futures=True)
