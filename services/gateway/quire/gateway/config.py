"""Every setting the HTTP gateway reads, read at once in its ``main``."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field

from quire.environment import Reads, Settings, Variable
from quire.logs import LogFormat
from quire.settings import METRICS_PORT_OFFSET, EventLoopSettings
from quire.tls import TlsSettings

__all__ = ["GatewaySettings", "GATEWAY_ADDRESS_VAR", "SERVICE", "SETTINGS"]

SERVICE = "gateway"
GATEWAY_ADDRESS_VAR = "QUIRE_GATEWAY_ADDR"
DEFAULT_PORT = 7780
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_METRICS_ADDRESS = f"127.0.0.1:{DEFAULT_PORT + METRICS_PORT_OFFSET}"


class GatewaySettings(Settings):
    """What the gateway needs: where it listens and where admission is."""

    address: Annotated[str, Variable(GATEWAY_ADDRESS_VAR)] = DEFAULT_ADDRESS
    """``host:port`` the HTTP server binds; loopback by default."""
    admission_address: Annotated[str, Variable("QUIRE_ADMISSION_ADDR")] = "127.0.0.1:7700"
    """``host:port`` of admission's gRPC API."""
    metrics_address: Annotated[
        str, Variable("QUIRE_GATEWAY_METRICS_ADDR", empty_is_a_value=True)
    ] = DEFAULT_METRICS_ADDRESS
    """``host:port`` of its Prometheus ``/metrics`` (the HTTP port plus 200
    unless set, as for the services); set empty, not served."""
    tls: TlsSettings | None = None
    """Mutual TLS towards admission, as every Quire gRPC client uses it, when set."""
    upload_chunk_bytes: ClassVar[int] = 256 * 1024
    """Largest chunk of an HTTP upload body forwarded as one gRPC message."""
    drain_seconds: float = 20.0
    """On SIGTERM: time allowed to finish requests in flight."""
    header_seconds: Annotated[float, Variable("QUIRE_GATEWAY_HEADER_SECONDS")] = Field(
        default=10.0, ge=0.1
    )
    """From a connection's first byte (or its first byte after a reply) to the
    end of the request's headers; a slower client is disconnected."""
    idle_seconds: Annotated[float, Variable("QUIRE_GATEWAY_IDLE_SECONDS")] = Field(
        default=5.0, ge=0.1
    )
    """How long a kept-alive connection may wait for its next request."""
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    """This process's name: host and pid unless set."""
    trace_file: Path | None = None
    """When set, finished spans are appended to this file as JSON lines."""
    log_format: LogFormat = "json"
    """``json`` (a JSON object per line) or ``text`` (for people)."""
    validator_address: Annotated[str, Variable("QUIRE_VALIDATOR_ADDR")] = ""
    """``host:port`` of the validator's gRPC API, for the console (reviews)."""
    assembler_address: Annotated[str, Variable("QUIRE_ASSEMBLER_ADDR")] = ""
    """``host:port`` of the assembler's gRPC API, for the console (diagnostics)."""
    signer_address: Annotated[str, Variable("QUIRE_SIGNER_ADDR")] = ""
    """``host:port`` of the signer's gRPC API, for the console (diagnostics)."""
    audit_address: Annotated[str, Variable("QUIRE_AUDIT_ADDR")] = ""
    """``host:port`` of audit's gRPC API, for the console (timelines, dead letters)."""
    console_key_file: Path | None = None
    """A Fernet key that seals the console's session cookies, shared by every
    replica; unset, each process makes its own, so a restart signs everyone
    out."""
    console_session_seconds: float = Field(default=1800.0, ge=1)
    """How long a console sign-in lasts, from the sign-in."""
    console_trace_url: str = ""
    """Link to a job's trace in the operators' tracing backend, with
    ``{trace_id}`` in it (say ``https://jaeger.example/trace/{trace_id}``);
    empty shows the id alone."""

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0] or "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def staff_addresses(self) -> dict[str, str]:
        """The services the console asks besides admission, by name (those set)."""
        named = {
            "validator": self.validator_address,
            "assembler": self.assembler_address,
            "signer": self.signer_address,
            "audit": self.audit_address,
        }
        return {service: address for service, address in named.items() if address}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        return cls.read(env, tls=TlsSettings.from_env(env))


SETTINGS = (Reads(GatewaySettings), Reads(EventLoopSettings))
"""Every settings model the gateway reads (its ``quire.settings`` entry point)."""
