"""What every service's ``main`` does before its own work: logging, tracing,
NATS with JetStream, and the queue topology."""

from __future__ import annotations

import logging
import sys

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from quire.settings import ServiceSettings
from quire.telemetry import configure_tracing
from quire.workqueue.topology import ensure_topology

__all__ = ["configure_logging", "start_runtime", "connect_nats"]


def configure_logging(service: str) -> None:
    """Logs carry ids, digests, counts and reason codes; never document content."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )


async def connect_nats(url: str, name: str) -> NatsClient:
    return await nats.connect(
        url,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        allow_reconnect=True,
    )


async def start_runtime(settings: ServiceSettings) -> tuple[NatsClient, JetStreamContext]:
    """Configure logging and tracing, connect to NATS and make sure the streams exist."""
    configure_logging(settings.service)
    configure_tracing(settings.service, settings.instance, settings.trace_file)
    settings.service_dir.mkdir(parents=True, exist_ok=True)
    nc = await connect_nats(settings.nats_url, f"quire-{settings.service}")
    js = nc.jetstream(timeout=10)
    await ensure_topology(js, settings.queue)
    return nc, js
