"""A NATS connection on an event-loop thread of its own, for synchronous callers.

The blob store is synchronous: services call it through ``asyncio.to_thread``
and the operator tools call it directly. The NATS client is not thread-safe
and belongs to one event loop, so the NATS blob backend keeps its own
connection on its own loop thread and hands each operation to it. No caller
can deadlock it (nothing else runs on that loop), and a 25 MiB upload never
competes with a service's own queue traffic on its main loop.

Failures to reach NATS are ``TransientError(STORAGE_UNAVAILABLE)``, like a
failing disk: retried with backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from quire.errors import TransientError
from quire.reasons import ReasonCode

__all__ = ["NatsPort", "UNAVAILABLE_ERRORS"]

T = TypeVar("T")

UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    nats.js.errors.NoStreamResponseError,
    asyncio.TimeoutError,
    ConnectionError,
)
"""What NATS raises when it cannot answer now (a node down, a leader election)."""


class NatsPort:
    """One NATS connection, owned by a daemon thread running its event loop.

    ``run`` executes a coroutine there and waits for it (at most
    ``timeout_seconds``); ``close`` drains the connection and stops the loop.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[NatsClient]],
        *,
        name: str,
        timeout_seconds: float = 60.0,
    ) -> None:
        self._timeout = timeout_seconds
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self.nc: NatsClient = self.run(connect)
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream(timeout=10)

    def run(self, operation: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``operation(*args)`` on the connection's loop and return its result."""
        if self._closed:
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "blob store closed")

        async def call() -> T:
            return await operation(*args)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "NATS did not answer") from None
        except UNAVAILABLE_ERRORS as error:
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "NATS unavailable") from error

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.run(self.nc.close)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        self._closed = True
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
