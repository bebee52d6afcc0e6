"""One trace per ``quire`` command: its uploads, its submission and its
waiting are children of one client span, so an SRE sees a command's calls
together rather than as separate root traces.

Spans leave by the standard ``OTEL_*`` variables, as the services' do
(``quire.telemetry``); with none set, ids are still made and passed on, so
every service's spans of the command share its trace.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from quire.telemetry import configure_tracing, record_failure

__all__ = ["traced_command"]

T = TypeVar("T")


async def traced_command(name: str, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` under a client span named ``quire <name>``."""
    provider = configure_tracing("quire-cli", f"{socket.gethostname()}-{os.getpid()}", None)
    tracer = trace.get_tracer("quire.cli")
    try:
        with tracer.start_as_current_span(
            f"quire {name}",
            kind=SpanKind.CLIENT,
            attributes={"quire.command": name},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await work
            except BaseException as error:
                record_failure(span, error, str(getattr(error, "reason", "") or ""))
                raise
    finally:
        provider.shutdown()  # flush: the process ends right after
