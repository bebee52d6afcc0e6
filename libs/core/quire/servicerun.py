"""The one serve/drain path every service's main runs its server on.

    start the gRPC server (``quire.grpcserver.serve``)
        │ ready: each on_ready step, in order; each loop started as a task;
        │        the announcement made (the process is in the workers bucket)
        ▼
    serve until SIGTERM/SIGINT
        │ drain: the announcement withdrawn (no new work comes here), the
        │        loops cancelled and awaited, each on_drain step in order
        │        (workers finish what they hold), within the drain budget
        ▼
    the server stopped: each on_close step, newest first (a resource closed
    before what it was made from)

A main builds its parts, tells its ``ServiceRun`` what each needs at which
moment, and calls ``serve``; none of them restates the order.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import grpc

from quire.announcements import Announcer
from quire.grpcserver import serve
from quire.metrics import ServiceMetrics
from quire.settings import ServiceSettings

__all__ = ["ServiceRun", "Step"]

log = logging.getLogger(__name__)

Step = Callable[[], object]
"""A step a service takes at one moment of its life: a call, awaited if it
returns an awaitable (its result is not used)."""


async def _take(step: Step) -> None:
    result = step()
    if inspect.isawaitable(result):
        await result


class ServiceRun:
    """One service process's lifecycle around its gRPC server."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        access: grpc.aio.ServerInterceptor,
        announcer: Announcer,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._access = access
        self._announcer = announcer
        self._metrics = metrics
        self._ready: list[Step] = []
        self._loops: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._drain: list[Step] = []
        self._close: list[Step] = []
        self._running: list[asyncio.Task[None]] = []

    def on_ready(self, step: Step) -> None:
        """Take ``step`` once the server is up, before the announcement."""
        self._ready.append(step)

    def loop(self, forever: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``forever()`` as a task from ready until the drain cancels it."""
        self._loops.append(forever)

    def on_drain(self, step: Step) -> None:
        """Take ``step`` while draining, after the loops have stopped."""
        self._drain.append(step)

    def on_close(self, step: Step) -> None:
        """Take ``step`` once the server has stopped (also after a failed
        start); the steps run newest first, each whatever the others did."""
        self._close.append(step)

    async def _ready_now(self) -> None:
        for step in self._ready:
            await _take(step)
        self._running = [asyncio.create_task(forever()) for forever in self._loops]
        await self._announcer.start()

    async def _drain_now(self) -> None:
        await self._announcer.stop()
        for task in self._running:
            task.cancel()
        for task in self._running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for step in self._drain:
            await _take(step)

    async def serve(
        self,
        *,
        register: Callable[[grpc.aio.Server], None],
        service_names: Sequence[str],
        max_receive_bytes: int = 0,
    ) -> None:
        """Serve until told to stop, drain, then close everything."""
        settings = self._settings
        try:
            await serve(
                address=settings.grpc_address,
                register=register,
                service_names=service_names,
                access=self._access,
                health_address=settings.health_address,
                on_drain=self._drain_now,
                drain_seconds=settings.drain_seconds,
                ready=self._ready_now,
                tls=settings.tls,
                metrics=self._metrics,
                metrics_address=settings.metrics_address,
                max_receive_bytes=max_receive_bytes,
            )
        finally:
            await self._announcer.stop()
            for task in self._running:
                task.cancel()
            for step in reversed(self._close):
                try:
                    await _take(step)
                except Exception as error:  # noqa: BLE001 — the others still close
                    log.warning("closing %s failed: %s", _name(step), type(error).__name__)


def _name(step: Step) -> str:
    return getattr(step, "__qualname__", type(step).__name__)
