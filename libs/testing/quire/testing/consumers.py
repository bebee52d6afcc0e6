"""Consumers paused and resumed by tests, as an operator would with NATS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["resume_promptly"]


async def resume_promptly(js: Any, stream: str, consumer: str, after: float = 0.3) -> None:
    """Resume a paused consumer so that the pull requests already waiting on it
    are served at once.

    ``resume_consumer`` leaves a worker's waiting pull request unserved until
    it expires (the workers long-poll for 5 s), so each resume would cost up to
    that; a pause that ends by its own timer serves the waiting requests the
    moment it ends. ``after`` is a margin for the request to reach the server
    first (a pause already past simply resumes, as ``resume_consumer`` does).
    """
    until = datetime.now(UTC) + timedelta(seconds=after)
    await js.pause_consumer(stream, consumer, until.isoformat().replace("+00:00", "Z"))
