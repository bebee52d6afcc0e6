"""The gateway's request metrics: every HTTP request counted and timed by
its route's template, method and status class.

An ASGI middleware around the whole app. The route is read after the router
chose it (``scope["route"]``): its template, ``/v1/pdf/job/get/{job_id}``,
never the path a client sent, so a job id, a digest or a batch id never
becomes a label value. A request no route matches is ``unmatched``; a method
outside HTTP's own is ``other``. Duration runs to the last byte of the
answer, a streamed artifact included.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quire.metrics import ServiceMetrics

__all__ = ["RequestMetrics", "UNMATCHED", "route_template", "status_class"]

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(scope: Scope) -> str:
    """The matched route's template, or ``unmatched``."""
    route: Any = scope.get("route")
    if isinstance(route, BaseRoute):
        path = getattr(route, "path", None)
        if isinstance(path, str) and path:
            return path
    return UNMATCHED


def status_class(status: int) -> str:
    """``2xx``, ``4xx``, ``5xx``...: the class, not the code."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "5xx"


class RequestMetrics:
    """Counts and times each HTTP request on the gateway's metric families."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self._requests = metrics.counter("quire_http_requests_total")
        self._duration = metrics.histogram("quire_http_request_duration_seconds")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless the app starts an answer: an exception is a server error

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            labels = {
                "route": route_template(scope),
                "method": method,
                "status_class": status_class(status),
            }
            self._requests.labels(**labels).inc()
            self._duration.labels(**labels).observe(time.perf_counter() - started)
