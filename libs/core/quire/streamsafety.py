"""Making a stream with settings that protect what it holds, and bringing an
existing one's up to date without touching its other settings.

JetStream refuses some changes to a stream made earlier (a key-value bucket's
``deny_delete`` cannot be lifted, nor its message time-to-live turned off),
so an update keeps the stream's own configuration and changes only the named
safety settings. A stream already as it should be is left alone: a service
login, which may not update streams, can call this as well as provisioning.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable

import nats.js.errors
from nats.js import JetStreamContext, api

__all__ = ["ensure_safe_stream"]


async def ensure_safe_stream(
    js: JetStreamContext, config: api.StreamConfig, safety: Iterable[str]
) -> None:
    """Make ``config``'s stream if missing; else set the ``safety`` settings
    of the existing one to ``config``'s values."""
    try:
        info = await js.stream_info(config.name or "")
    except nats.js.errors.NotFoundError:
        with contextlib.suppress(nats.js.errors.BadRequestError):  # made concurrently
            await js.add_stream(config)
            return
        info = await js.stream_info(config.name or "")
    wanted = {name: getattr(config, name) for name in safety}
    if any(getattr(info.config, name) != value for name, value in wanted.items()):
        await js.update_stream(dataclasses.replace(info.config, **wanted))
