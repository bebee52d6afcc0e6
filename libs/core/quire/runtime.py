"""What every service's ``main`` does before its own work: logging, tracing,
NATS with JetStream under the service's own credentials, the queue topology,
and the keys that sign and verify what travels on the queues."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from quire import faults
from quire.environment import unknown_settings
from quire.errors import InvalidSetting, TransientError
from quire.identity import ServiceIdentity, TrustStore
from quire.logs import QUIET_LOGGERS, log_handler
from quire.natsauth import inbox_prefix
from quire.reasons import ReasonCode
from quire.settings import EventLoopSettings, ServiceSettings
from quire.stackdump import answer_stack_dumps, answer_task_dumps
from quire.telemetry import configure_tracing
from quire.threadnames import named_pool
from quire.wire import WireSigner, WireVerifier
from quire.workqueue.topology import ensure_topology, wait_for_topology

__all__ = [
    "CONFIGURATION_REFUSED",
    "configure_logging",
    "start_runtime",
    "connect_nats",
    "connect_nats_briefly",
    "NatsLogin",
    "Wire",
    "load_wire",
]

CONFIGURATION_REFUSED = 2
"""The exit status of a service that refuses its configuration: starting it
again as it is cannot help (``quire.stack.supervisor`` does not)."""

log = logging.getLogger(__name__)


def run_service(service: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """A service's command: run ``main``; a setting it cannot use stops it
    with the variable's name and what it expects (exit status 2), not a
    traceback. A ``QUIRE_*`` variable no Quire process reads (misspelt, say)
    is reported first: its default would otherwise be used in silence."""
    answer_stack_dumps()
    for line in unknown_settings(os.environ):
        print(f"quire-{service}: warning: {line}", file=sys.stderr)
    faults.configure(os.environ)
    try:
        event_loop(os.environ)(_with_named_io_threads(main()))
    except InvalidSetting as error:
        print(f"quire-{service}: cannot start: {error.message}", file=sys.stderr)
        sys.exit(CONFIGURATION_REFUSED)


async def _with_named_io_threads(main: Coroutine[Any, Any, None]) -> None:
    """``main``, with the loop's default executor (blob and file work) made of
    threads the OS knows as ``io_<n>`` (``quire.threadnames``)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(named_pool("io"))
    answer_task_dumps(loop)
    await main


def event_loop(env: Mapping[str, str]) -> Callable[[Coroutine[Any, Any, None]], None]:
    """How a service runs its ``main`` (``EventLoopSettings``)."""
    if EventLoopSettings.read(env).event_loop == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


def configure_logging(service: str, chosen: str = "json") -> None:
    """Logs carry ids, digests, counts and reason codes; never document content.
    One JSON object per line on stderr (``chosen="text"`` for people), with
    the trace, job and tenant of the span a line is logged in (``quire.logs``)."""
    logging.basicConfig(level=logging.INFO, handlers=[log_handler(service, chosen, sys.stderr)])
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class NatsLogin(TypedDict, total=False):
    """``connect_nats`` keywords of a login (none for an anonymous one)."""

    user: str
    password: str


async def connect_nats(
    url: str, name: str, *, user: str = "", password: str = "", echo: bool = True
) -> NatsClient:
    """Connect as ``user`` (replies on that user's own inbox prefix), or
    anonymously. ``url`` may list several servers of a cluster, comma-separated;
    the client fails over between them (and learns the others from the first).
    ``echo=False``: the server does not send this connection the core
    messages it publishes itself (JetStream's deliveries are the server's own)."""
    return await _connect(url, name, user, password, reconnect=True, echo=echo)


async def connect_nats_briefly(
    url: str, name: str, *, user: str = "", password: str = ""
) -> NatsClient:
    """``connect_nats`` for a command a person waits for: each server is
    tried twice, half a second apart, then ``NoServersError``, instead of
    retrying forever; a connection lost later is not re-established."""
    return await _connect(url, name, user, password, reconnect=False, echo=True)


HANDSHAKE_TRIES = 10
"""Connections made again when the server's first PING came before its PONG."""


async def _connect(
    url: str, name: str, user: str, password: str, *, reconnect: bool, echo: bool
) -> NatsClient:
    """A client whose handshake completed.

    A server slow to take a CONNECT (its bcrypt check, on a loaded host)
    sends its first PING two seconds after accepting the connection, before
    the PONG the client waits for; nats-py then returns a client that is
    not connected and never sends anything (its writer stops at once), so
    every request would time out in silence. Such a client is closed and
    the connection made again."""
    login: dict[str, str] = {}
    if user:
        login = {"user": user, "password": password, "inbox_prefix": inbox_prefix(user)}
    for _attempt in range(HANDSHAKE_TRIES):
        client = await nats.connect(
            [server.strip() for server in url.split(",") if server.strip()],
            name=name,
            max_reconnect_attempts=-1 if reconnect else 1,
            reconnect_time_wait=0.5,
            connect_timeout=5,
            allow_reconnect=reconnect,
            no_echo=not echo,
            **login,  # type: ignore[arg-type]
        )
        if client.is_connected:
            return client
        log.warning("NATS handshake incomplete (a PING came before the PONG); connecting again")
        await client.close()
    raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "NATS handshake never completed")


@dataclass(frozen=True)
class Wire:
    """This service's signer for what it publishes, and the verifier for what it reads."""

    signer: WireSigner
    verifier: WireVerifier


def load_wire(settings: ServiceSettings) -> Wire:
    """Load the service's identity key and the trusted public keys; fail closed."""
    if settings.identity is None:
        raise RuntimeError("no service identity configured")
    identity = ServiceIdentity.load(settings.identity)
    return Wire(WireSigner(identity), WireVerifier(TrustStore.load(settings.identity.trust_dir)))


async def start_runtime(settings: ServiceSettings) -> tuple[NatsClient, JetStreamContext]:
    """Configure logging and tracing, connect to NATS and wait for (or, on a NATS
    without authorization, create) the streams."""
    configure_logging(settings.service, settings.log_format)
    configure_tracing(settings.service, settings.instance, settings.trace_file)
    settings.service_dir.mkdir(parents=True, exist_ok=True)
    password = ""
    if settings.nats_password_file is not None:
        password = settings.nats_password_file.read_text().strip()
    # No service listens for its own core messages (an audit replica's news
    # is for the others), so none is sent back to it.
    nc = await connect_nats(
        settings.nats_url,
        f"quire-{settings.service}",
        user=settings.nats_user,
        password=password,
        echo=False,
    )
    js = nc.jetstream(timeout=10)
    if settings.nats_user:
        await wait_for_topology(js)
    else:
        await ensure_topology(js, settings.queue)
    return nc, js
