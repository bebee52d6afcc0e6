"""A tenant's callback receiver for tests: an HTTP server on a loopback port
that checks every completion notification as a real receiver should
(``quire.notifysign``: signature, timestamp, delivery ids already acted on)
and can be told to fail the first tries of each delivery.

``script`` says how the receiver answers the n-th request of one delivery id:
``"error"`` (500), ``"hang"`` (no reply for ``hang_seconds``), ``"accept"``;
requests past the script are accepted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from quire.notifysign import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    ReplayedNotification,
    ReplayGuard,
    SignatureRejected,
    verify,
)

__all__ = ["CallbackReceiver", "Received"]


@dataclass(frozen=True)
class Received:
    """One request as it arrived, and what the receiver made of it."""

    delivery_id: str
    signature: str
    body: bytes
    verdict: str
    """``accepted``, ``replay``, ``rejected``, or the scripted failure (``error``, ``hang``)."""


@dataclass
class CallbackReceiver:
    port: int
    secret: str = ""
    script: tuple[str, ...] = ()
    hang_seconds: float = 3.0
    host: str = "127.0.0.1"
    """The loopback address it listens on (127.0.0.2 is loopback as well on Linux)."""
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Delivery id -> document, for each notification acted on (once)."""
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._guard = ReplayGuard()
        self._tries: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hooks/quire?token=receiver-side"

    def start(self) -> CallbackReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = receiver.answer(
                    self.headers.get(DELIVERY_HEADER, ""),
                    self.headers.get(SIGNATURE_HEADER, ""),
                    body,
                )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                return None

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def answer(self, delivery_id: str, signature: str, body: bytes) -> int:
        """The status for one request (a replayed valid one gets 200 and no action)."""
        with self._lock:
            self._tries[delivery_id] += 1
            step = self._tries[delivery_id] - 1
        planned = self.script[step] if step < len(self.script) else "accept"
        verdict, status = self._judge(delivery_id, signature, body, planned)
        with self._lock:
            self.received.append(Received(delivery_id, signature, body, verdict))
        if verdict == "hang":
            time.sleep(self.hang_seconds)
        return status

    def _judge(
        self, delivery_id: str, signature: str, body: bytes, planned: str
    ) -> tuple[str, int]:
        try:
            document = verify(self.secret, body, delivery_id=delivery_id, signature=signature)
        except SignatureRejected:
            return "rejected", 401
        if planned == "error":
            return "error", 500
        if planned == "hang":
            return "hang", 200
        try:
            self._guard.first_time(delivery_id)
        except ReplayedNotification:
            return "replay", 200
        with self._lock:
            self.accepted[delivery_id] = document
        return "accepted", 204

    def verdicts(self, delivery_id: str) -> list[str]:
        with self._lock:
            return [r.verdict for r in self.received if r.delivery_id == delivery_id]
