"""Consumers paused and resumed by tests, as an operator would with NATS."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from quire.pipeline import STAGE_NAMES
from quire.workqueue import EVENTS_STREAM, PRIORITIES, WORK_STREAM, consumer_name
from quire.workqueue.topology import EVENTS_CONSUMER

__all__ = ["HELD_FOREVER", "pause", "resume_promptly", "wait_quiet"]


HELD_FOREVER = "2099-01-01T00:00:00Z"
"""A pause no test outlives: only a resume ends it."""


async def pause(js: Any, stream: str, consumer: str, *, minutes: float = 5) -> None:
    """Pause a durable consumer for ``minutes``: its messages wait on the
    stream, and no worker is stopped (``resume_promptly`` ends it sooner). The
    pause ends by itself should the test fail before resuming it."""
    until = datetime.now(UTC) + timedelta(minutes=minutes)
    await js.pause_consumer(stream, consumer, until.strftime("%Y-%m-%dT%H:%M:%SZ"))


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


async def wait_quiet(js: Any, timeout: float = 60.0) -> None:
    """Wait until no stage's consumer nor audit's has a message pending or in
    work, three looks running (half a second apart)."""
    consumers = [(WORK_STREAM, consumer_name(s, p)) for s in STAGE_NAMES for p in PRIORITIES]
    consumers.append((EVENTS_STREAM, EVENTS_CONSUMER))
    deadline = time.monotonic() + timeout
    calm = 0
    while calm < 3:
        if time.monotonic() > deadline:
            raise AssertionError("the queues did not drain")
        infos = await asyncio.gather(*(js.consumer_info(s, name) for s, name in consumers))
        busy = any(info.num_pending or info.num_ack_pending for info in infos)
        calm = 0 if busy else calm + 1
        await asyncio.sleep(0.5)
