"""Reaching NATS from a command: once, briefly, or a clear UNREACHABLE.

The services' connection (``quire.runtime.connect_nats``) retries forever,
as a service should while NATS restarts; a command a person waits for tries
each server twice, within ``CONNECT_SECONDS``, and says so when none answers.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NatsClient
from nats.errors import NoServersError

from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.runtime import connect_nats_briefly

__all__ = ["CONNECT_SECONDS", "reach_nats"]

CONNECT_SECONDS = 10.0


async def reach_nats(url: str, name: str, *, user: str = "", password: str = "") -> NatsClient:
    """A connection to ``url``, or ``CliError`` (UNREACHABLE) naming it."""
    try:
        return await asyncio.wait_for(
            connect_nats_briefly(url, name, user=user, password=password),
            CONNECT_SECONDS,
        )
    except (NoServersError, OSError, TimeoutError):
        raise CliError(f"cannot reach NATS at {url}", ExitCode.UNREACHABLE) from None
