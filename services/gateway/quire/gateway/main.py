"""The gateway process: ``quire-gateway`` (``python -m quire.gateway.main``).

uvicorn serves the app on ``QUIRE_GATEWAY_ADDR``, and Prometheus's
``/metrics`` is on ``QUIRE_GATEWAY_METRICS_ADDR``; on SIGTERM or SIGINT it
stops accepting, lets requests in flight finish for up to
``QUIRE_DRAIN_SECONDS``, then the channel to admission is closed.
"""

from __future__ import annotations

import uvicorn

from quire.gateway.app import create_app
from quire.gateway.config import SERVICE, GatewaySettings
from quire.gateway.console.sessions import load_key
from quire.gateway.console.staff import StaffChannels
from quire.gateway.slowclients import bounded_headers
from quire.grpcserver import TraceClientInterceptors
from quire.metrics import ServiceMetrics, serve_metrics
from quire.runtime import configure_logging, run_service
from quire.telemetry import configure_tracing
from quire.tls import aio_channel

__all__ = ["main", "run"]


async def main() -> None:
    settings = GatewaySettings.from_env()
    configure_logging(SERVICE, settings.log_format)
    configure_tracing(SERVICE, settings.instance, settings.trace_file)
    metrics = ServiceMetrics(SERVICE)
    serve_metrics(metrics, settings.metrics_address)
    console_key = load_key(settings.console_key_file)
    channel = aio_channel(settings.admission_address, settings.tls, TraceClientInterceptors())
    staff = StaffChannels(channel, settings.staff_addresses, settings.tls)
    try:
        config = uvicorn.Config(
            create_app(settings, channel, metrics, console=staff, console_key=console_key),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=int(settings.drain_seconds),
            server_header=False,
            http=bounded_headers(settings.header_seconds),
            timeout_keep_alive=max(1, round(settings.idle_seconds)),
        )
        await uvicorn.Server(config).serve()
    finally:
        await staff.close()
        await channel.close()


def run() -> None:
    """The ``quire-gateway`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
