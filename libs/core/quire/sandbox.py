"""Bounded, isolated worker processes for CPU-heavy and hostile work (PDF
parsing, merging, signing).

Work never runs on the event loop. Each worker is its own process, started
with ``forkserver`` (no gRPC or asyncio state is forked into it), under a
memory limit (RLIMIT_AS) set when it starts; each task runs under a CPU-time
limit (RLIMIT_CPU, relative to what the worker has used) and a wall-clock
timeout that does not count the time a runnable worker waits for a CPU (a
busy machine's time is not the document's; ``_Worker._answered_within``). A worker that dies, overruns or is abandoned is killed and replaced,
and only the task it was running fails (``SandboxExhausted``): a hostile file
costs its own job a retry, never another job, never the service.

Work runs in one of two lanes (``quire.sandboxlanes``), the priority class of
the job it serves. Each lane has its own processes: batch work runs in
processes at a higher niceness (``SandboxSettings.batch_nice``), and in at
most ``workers - reserved_workers`` of them at once, so a portfolio can never
take every worker; when a worker frees, interactive callers are served first.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import multiprocessing
import os
import resource
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, TypeVar

from quire import memoryfiles
from quire.diagnosticstext import carry_causes, causes_of
from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.sandboxlanes import BATCH, INTERACTIVE, LANES, LaneGate, current_lane, sandbox_lane
from quire.threadnames import named_pool

if TYPE_CHECKING:  # not at run time: a sandbox worker never reads settings
    from quire.settings import SandboxSettings

__all__ = ["Budget", "SandboxBusy", "SandboxPool", "SandboxExhausted", "sandbox_lane"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class SandboxExhausted(TransientError):
    """The task crashed its worker, ran out of memory or CPU, or timed out."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.PARSER_LIMIT_EXCEEDED, message)


class SandboxBusy(TransientError):
    """No worker became free within the caller's wait; nothing was run."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.PARSER_LIMIT_EXCEEDED, message)


@dataclass(frozen=True)
class Budget:
    """One task's limits, below the pool's own (which stay the hard ceilings)."""

    cpu_seconds: float
    wall_seconds: float

    def scaled(self, factor: float) -> Budget:
        return Budget(self.cpu_seconds * factor, self.wall_seconds * factor)


def _serve(
    connection: Connection, memory_bytes: int, preload: tuple[str, ...], nice: int = 0
) -> None:
    """A worker's life: load libraries, limit memory, then run tasks one at a time."""
    for module in preload:
        importlib.import_module(module)
    if nice:
        os.nice(nice)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    connection.send(_READY)  # started: from here on, time is the tasks'
    while True:
        try:
            fn, args, cpu_seconds = connection.recv()
        except (EOFError, OSError):
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = int(used.ru_utime + used.ru_stime) + 1
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, hard))
        try:
            # Documents sent as bytes become in-memory files for the task's
            # length only (``quire.memoryfiles``).
            with memoryfiles.opened(args) as (paths, outputs):
                outcome: tuple[Any, ...] = (True, memoryfiles.returned(fn(*paths), outputs))
        except MemoryError:
            outcome = (False, SandboxExhausted("memory limit reached"))
        except Exception as error:  # noqa: BLE001 - returned to the caller as it is
            # Its causes as text beside it: pickling drops __cause__.
            outcome = (False, error, causes_of(error))
        try:
            connection.send(outcome)
        except Exception as error:  # noqa: BLE001 - an unpicklable result or error
            connection.send((False, RuntimeError(type(error).__name__)))


def _ready() -> bool:
    return True


MIN_POLL_SECONDS = 0.01


STARVED_POLL_SECONDS = 0.05


def _cpu_seconds(pid: int | None) -> float | None:
    """Process ``pid``'s main thread's CPU time, from the kernel's schedstat
    (nanoseconds, kept current while it runs); None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _runnable(pid: int | None) -> bool:
    """Whether process ``pid`` is running or waiting for a CPU (state R)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "R"
    except (OSError, IndexError):
        return False


_READY = "ready"
"""What a worker sends once its libraries are loaded, before its first task."""


class _Worker:
    """One worker process and the pipe to it; replaced when it misbehaves."""

    def __init__(self, settings: SandboxSettings, preload: tuple[str, ...], nice: int) -> None:
        self._settings = settings
        self._preload = preload
        self._nice = nice
        self._process: Any = None
        self._connection: Connection | None = None
        self._started = False
        self.on_replace: Callable[[], None] | None = None
        """Called (on a pool thread) each time a dead or killed process is replaced."""

    def _start(self) -> None:
        context = multiprocessing.get_context("forkserver")
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve,
            args=(child, self._settings.memory_bytes, self._preload, self._nice),
            daemon=True,
        )
        with _main_left_out():
            process.start()
        child.close()
        self._process, self._connection = process, parent
        # A replacement's start (fork, imports) is not charged to the task that
        # finds it: after a hostile task is killed, the next one gets its whole
        # budget. The start itself is bounded by the pool's wall-clock limit.
        try:
            ready = parent.poll(self._settings.wall_seconds) and parent.recv() == _READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.stop()
            raise SandboxExhausted("worker process did not start")

    def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], budget: Budget | None = None
    ) -> tuple[bool, Any]:
        """Run one task (blocking; called on a pool thread), under ``budget``
        where it is tighter than the pool's limits."""
        cpu_seconds, wall_seconds = self._settings.cpu_seconds, self._settings.wall_seconds
        if budget is not None:
            cpu_seconds = max(1, min(cpu_seconds, math.ceil(budget.cpu_seconds)))
            wall_seconds = min(wall_seconds, budget.wall_seconds)
        if self._process is None or not self._process.is_alive():
            self.stop()
            if self._started and self.on_replace is not None:
                self.on_replace()
            self._started = True
            try:
                self._start()
            except SandboxExhausted as error:
                return False, error
        assert self._connection is not None
        try:
            self._connection.send((fn, args, cpu_seconds))
            if not self._answered_within(wall_seconds):
                self.stop()
                return False, SandboxExhausted("wall-clock limit reached")
            answer = self._connection.recv()
        except (EOFError, OSError):
            self.stop()
            return False, SandboxExhausted("worker process died")
        if len(answer) == 3:  # an error, with its chained causes described
            return False, carry_causes(answer[1], answer[2])
        return answer[0], answer[1]

    def _answered_within(self, budget: float) -> bool:
        """Whether the task answers within ``budget`` seconds of its own time.

        At first that is the wall clock. Past it, a worker that is still
        runnable (waiting for a CPU on a busy machine, or at a high niceness,
        and not asleep) is charged its CPU time instead: the time it waited
        is the machine's, not the document's, and charging it would reject an
        ordinary file because of its neighbours. A spinning task is still
        stopped once its CPU time reaches the budget; a sleeping or blocked
        one at the budget by the clock; nothing past the pool's wall-clock
        limit, or where the kernel does not say (no /proc)."""
        assert self._connection is not None
        ceiling = self._settings.wall_seconds
        pid = self._process.pid if self._process is not None else None
        cpu_before = _cpu_seconds(pid)
        started = time.monotonic()
        wait = min(budget, ceiling)
        while True:
            if self._connection.poll(max(wait, MIN_POLL_SECONDS)):
                return True
            elapsed = time.monotonic() - started
            cpu = _cpu_seconds(pid)
            if elapsed >= ceiling or cpu is None or cpu_before is None:
                return False
            if not _runnable(pid) or cpu - cpu_before >= budget:
                return False
            wait = min(max(budget - (cpu - cpu_before), STARVED_POLL_SECONDS), ceiling - elapsed)

    def kill(self) -> None:
        """Signal the current process to die now (safe from any thread)."""
        process = self._process
        if process is not None and process.is_alive():
            process.kill()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=5)
            self._process = None


_main_swap = threading.Lock()


@contextmanager
def _main_left_out() -> Iterator[None]:
    """Start a worker without the service's main module.

    multiprocessing has every child it starts import the parent's
    ``__main__`` again, by name (``python -m quire.validator.main``) or by
    path (the ``quire-validator`` script): for a worker that is the whole
    service (gRPC, SQLAlchemy, NATS, OpenTelemetry), about a second of CPU
    and tens of MiB each, for code a worker never runs. Its tasks are named
    by their own modules, which it imports as it unpickles them. So while a
    worker starts, ``__main__`` is an empty module, which the child has no
    reason to import; the lock keeps two starting threads from saving each
    other's stand-in."""
    with _main_swap:
        real = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = real


_FORKSERVER_PRELOAD: set[str] = set()


def _preload_in_forkserver(modules: tuple[str, ...]) -> None:
    """Have the forkserver import ``modules`` once, so each worker forked from
    it starts with them loaded instead of importing them itself (a worker
    replaced after a hostile file is back in milliseconds). This module is
    always among them: each worker runs ``_serve`` from it, and importing it
    (with the settings it reads) cost every new worker about 0.1 s of CPU.
    Only takes effect before the forkserver's first start; each worker still
    imports them too, which is then free."""
    _FORKSERVER_PRELOAD.update((__name__, *modules))
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(sorted(_FORKSERVER_PRELOAD))


class SandboxPool:
    """At most ``workers`` tasks at once, each in its own limited process; batch
    work in at most ``workers - reserved_workers`` of them, at lower CPU priority."""

    def __init__(
        self, settings: SandboxSettings, *, name: str = "sandbox", preload: tuple[str, ...] = ()
    ) -> None:
        _preload_in_forkserver(preload)
        self._name = name
        nice = {INTERACTIVE: settings.nice, BATCH: settings.nice + settings.batch_nice}
        size = {INTERACTIVE: settings.workers, BATCH: settings.batch_workers()}
        self._lanes = {
            lane: [_Worker(settings, preload, nice[lane]) for _ in range(size[lane])]
            for lane in LANES
        }
        self._all = [worker for lane in LANES for worker in self._lanes[lane]]
        self._threads = named_pool("sandbox", len(self._all))
        self._gate: LaneGate[_Worker] = LaneGate(self._lanes, slots=settings.workers)
        self._recovering: set[asyncio.Task[None]] = set()
        self._observe_wait: Callable[[str, float], None] | None = None
        self.in_memory_bytes = settings.in_memory_bytes
        """Documents up to this size come to this pool's tasks as bytes."""

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        budget: Budget | None = None,
        wait_seconds: float | None = None,
        lane: str | None = None,
    ) -> T:
        """Run ``fn(*args)`` in a worker process under the limits, and under
        ``budget`` where it is tighter. ``args`` may hand documents over as
        bytes (``quire.memoryfiles``): an ``InMemory`` arrives as a path to
        read, a ``MemoryOutput`` as a path to write, whose bytes it holds
        once this returns. With ``wait_seconds``, wait at most that
        long for a free worker (``SandboxBusy``). ``lane`` is interactive or
        batch; by default the one ``sandbox_lane`` set (interactive outside any)."""
        lane = lane or current_lane()
        if lane not in self._lanes:
            raise ValueError(f"no sandbox lane {lane!r}")
        started = time.monotonic()
        worker = await self._acquire(lane, wait_seconds)
        if self._observe_wait is not None:
            self._observe_wait(lane, time.monotonic() - started)
        return await self._execute(lane, worker, fn, args, budget)

    async def _execute(
        self,
        lane: str,
        worker: _Worker,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        budget: Budget | None,
    ) -> T:
        """Run one task on ``worker`` (acquired in ``lane``), then hand it back."""
        loop = asyncio.get_running_loop()
        call = loop.run_in_executor(self._threads, worker.call, fn, args, budget)
        try:
            ok, value = await asyncio.shield(call)
        except asyncio.CancelledError:
            # Abandoned mid-flight: kill the process so the call ends, and hand the
            # worker back only once that call has returned and the worker is reset,
            # so its answer can never reach the next caller.
            worker.kill()
            recovery = asyncio.create_task(self._recover(call, lane, worker))
            self._recovering.add(recovery)
            recovery.add_done_callback(self._recovering.discard)
            raise
        self._gate.release(lane, worker)
        if ok:
            return memoryfiles.delivered(value, memoryfiles.collect(args))  # type: ignore[no-any-return]
        if isinstance(value, SandboxExhausted):
            log.warning("%s: %s; worker replaced", self._name, value.message)
        raise value

    async def _acquire(self, lane: str, wait_seconds: float | None) -> _Worker:
        if wait_seconds is None:
            return await self._gate.acquire(lane)
        try:
            async with asyncio.timeout(wait_seconds):  # wait_for may swallow a cancel (3.11)
                return await self._gate.acquire(lane)
        except TimeoutError:
            raise SandboxBusy(f"{self._name}: no worker free in {wait_seconds:g}s") from None

    async def _recover(self, call: asyncio.Future[Any], lane: str, worker: _Worker) -> None:
        try:
            await call
        except Exception:  # noqa: BLE001 - the abandoned call's outcome is discarded
            pass
        try:
            await asyncio.get_running_loop().run_in_executor(self._threads, worker.stop)
        except RuntimeError:  # the pool closed meanwhile, and close() stopped the worker
            return
        self._gate.release(lane, worker)

    def count_replacements(self, count: Callable[[], None]) -> None:
        """Have ``count`` called whenever a worker process is replaced."""
        for worker in self._all:
            worker.on_replace = count

    def observe_waits(self, observe: Callable[[str, float], None]) -> None:
        """Have ``observe(lane, seconds)`` called with each call's wait for a worker."""
        self._observe_wait = observe

    async def warm(self) -> None:
        """Start every worker of every lane and load its libraries now, not on
        the first job."""
        await asyncio.gather(*(self._warm(lane) for lane in LANES for _ in self._lanes[lane]))

    async def _warm(self, lane: str) -> None:
        """One ready-check in ``lane`` (its wait is not a job's, so not observed)."""
        await self._execute(lane, await self._gate.acquire(lane), _ready, (), None)

    def close(self) -> None:
        for worker in self._all:
            worker.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)
