"""Every setting the HTTP gateway reads, read at once in its ``main``."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from quire.environment import setting_float, setting_text
from quire.logs import log_format
from quire.settings import METRICS_PORT_OFFSET, service_address_var, service_metrics_var
from quire.tls import TlsSettings

__all__ = ["GatewaySettings", "GATEWAY_ADDRESS_VAR", "SERVICE"]

SERVICE = "gateway"
STAFF_SERVICES = ("validator", "assembler", "signer", "audit")
"""The services the console calls besides admission."""
GATEWAY_ADDRESS_VAR = "QUIRE_GATEWAY_ADDR"
DEFAULT_PORT = 7780
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_METRICS_ADDRESS = f"127.0.0.1:{DEFAULT_PORT + METRICS_PORT_OFFSET}"


@dataclass(frozen=True)
class GatewaySettings:
    """What the gateway needs: where it listens and where admission is."""

    address: str = DEFAULT_ADDRESS
    """``host:port`` the HTTP server binds (``QUIRE_GATEWAY_ADDR``); loopback by default."""
    admission_address: str = "127.0.0.1:7700"
    """``host:port`` of admission's gRPC API (``QUIRE_ADMISSION_ADDR``)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    """``host:port`` of its Prometheus ``/metrics`` (``QUIRE_GATEWAY_METRICS_ADDR``,
    the HTTP port plus 200 unless set, as for the services); empty turns it off."""
    tls: TlsSettings | None = None
    """Mutual TLS towards admission, as every Quire gRPC client uses it, when set."""
    upload_chunk_bytes: int = 256 * 1024
    """Largest chunk of an HTTP upload body forwarded as one gRPC message."""
    drain_seconds: float = 20.0
    """On SIGTERM: time allowed to finish requests in flight (``QUIRE_DRAIN_SECONDS``)."""
    header_seconds: float = 10.0
    """From a connection's first byte (or its first byte after a reply) to the
    end of the request's headers; a slower client is disconnected
    (``QUIRE_GATEWAY_HEADER_SECONDS``)."""
    idle_seconds: float = 5.0
    """How long a kept-alive connection may wait for its next request
    (``QUIRE_GATEWAY_IDLE_SECONDS``)."""
    instance: str = ""
    trace_file: Path | None = None
    log_format: str = "json"
    staff_addresses: Mapping[str, str] = field(default_factory=dict)
    """``host:port`` of each service the console asks for staff
    (``QUIRE_<SERVICE>_ADDR``): validator, assembler, signer and audit."""
    console_key_file: Path | None = None
    """A Fernet key (``quire.gateway.console.sessions``) that seals the
    console's session cookies, shared by every replica
    (``QUIRE_CONSOLE_KEY_FILE``); unset, each process makes its own, so a
    restart signs everyone out."""
    console_session_seconds: float = 1800.0
    """How long a console sign-in lasts, from the sign-in
    (``QUIRE_CONSOLE_SESSION_SECONDS``)."""
    console_trace_url: str = ""
    """Link to a job's trace in the operators' tracing backend, with
    ``{trace_id}`` in it (``QUIRE_CONSOLE_TRACE_URL``, say
    ``https://jaeger.example/trace/{trace_id}``); empty shows the id alone."""

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0] or "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        trace = env.get("QUIRE_TRACE_FILE", "")
        return cls(
            address=setting_text(env, GATEWAY_ADDRESS_VAR, DEFAULT_ADDRESS),
            admission_address=setting_text(env, service_address_var("admission"), "127.0.0.1:7700"),
            metrics_address=env.get(service_metrics_var(SERVICE), DEFAULT_METRICS_ADDRESS),
            tls=TlsSettings.from_env(env),
            drain_seconds=setting_float(env, "QUIRE_DRAIN_SECONDS", 20),
            header_seconds=setting_float(env, "QUIRE_GATEWAY_HEADER_SECONDS", 10, minimum=0.1),
            idle_seconds=setting_float(env, "QUIRE_GATEWAY_IDLE_SECONDS", 5, minimum=0.1),
            instance=setting_text(env, "QUIRE_INSTANCE", f"{socket.gethostname()}-{os.getpid()}"),
            trace_file=Path(trace) if trace else None,
            log_format=log_format(env),
            staff_addresses={
                service: env.get(service_address_var(service), "")
                for service in STAFF_SERVICES
                if env.get(service_address_var(service), "")
            },
            console_key_file=Path(key) if (key := env.get("QUIRE_CONSOLE_KEY_FILE", "")) else None,
            console_session_seconds=setting_float(
                env, "QUIRE_CONSOLE_SESSION_SECONDS", 1800, minimum=1
            ),
            console_trace_url=setting_text(env, "QUIRE_CONSOLE_TRACE_URL", ""),
        )
