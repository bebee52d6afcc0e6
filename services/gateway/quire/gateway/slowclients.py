"""A bound on slow request headers, which uvicorn does not have.

uvicorn closes a kept-alive connection that stays idle (``timeout_keep_alive``),
but a connection that sends nothing, or sends its headers a byte at a time
(slowloris), is held for as long as the client likes. Here every request's
headers must be complete within ``header_seconds`` of the connection opening,
or of the first byte after the previous reply; otherwise the connection is
closed. A request's body is not bounded here: uploads stream to admission,
which closes an upload that stalls (``UPLOAD_IDLE_TIMEOUT``).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["bounded_headers"]


class _BoundedHeaders(H11Protocol):
    header_seconds = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._arm()  # a request begun, its headers not yet complete
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def bounded_headers(header_seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing connections whose headers take longer
    than ``header_seconds``."""
    return type("BoundedHeaders", (_BoundedHeaders,), {"header_seconds": header_seconds})
