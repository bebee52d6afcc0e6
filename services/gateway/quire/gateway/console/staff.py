"""The services as the console asks them: with the signed-in person's own
token on every call, so each service authorises the person itself (a
reviewer's token is refused everything but reviews) and records them as the
actor of what they do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.audit.v1 import audit_service_pb2_grpc as audit_grpc
from quire.diagnostics.v1 import diagnostics_service_pb2_grpc as diagnostics_grpc
from quire.gateway.console.sessions import Session
from quire.grpcserver import TraceClientInterceptors
from quire.pipeline import WORKER_SERVICES
from quire.tls import TlsSettings, aio_channel
from quire.validator.v1 import validator_service_pb2_grpc as validator_grpc

__all__ = ["DIAGNOSING", "Staff", "StaffChannels", "CALL_SECONDS"]

CALL_SECONDS = 20.0
"""Deadline of each call a page makes."""
DIAGNOSING = WORKER_SERVICES
"""The stages that keep diagnostics of failed deliveries."""

Metadata = tuple[tuple[str, str], ...]


class StaffChannels:
    """One channel per service the console asks, for the gateway's life."""

    def __init__(
        self, admission: grpc.aio.Channel, addresses: Mapping[str, str], tls: TlsSettings | None
    ) -> None:
        self.admission = admission
        self._own = {
            service: aio_channel(address, tls, TraceClientInterceptors())
            for service, address in addresses.items()
        }

    def of(self, service: str) -> grpc.aio.Channel | None:
        return self.admission if service == "admission" else self._own.get(service)

    async def close(self) -> None:
        for channel in self._own.values():
            await channel.close()


@dataclass(frozen=True)
class Staff:
    """The stubs, and the person's metadata, for one page."""

    channels: StaffChannels
    session: Session

    @property
    def metadata(self) -> Metadata:
        return (("authorization", f"Bearer {self.session.token}"),)

    @property
    def admin(self) -> admin_grpc.TenantAdminServiceStub:
        return admin_grpc.TenantAdminServiceStub(self.channels.admission)

    @property
    def validator(self) -> validator_grpc.ValidatorServiceStub:
        return validator_grpc.ValidatorServiceStub(self._channel("validator"))

    @property
    def audit(self) -> audit_grpc.AuditServiceStub:
        return audit_grpc.AuditServiceStub(self._channel("audit"))

    def diagnostics(self, service: str) -> diagnostics_grpc.DiagnosticsServiceStub:
        return diagnostics_grpc.DiagnosticsServiceStub(self._channel(service))

    def _channel(self, service: str) -> grpc.aio.Channel:
        channel = self.channels.of(service)
        if channel is None:
            raise LookupError(f"QUIRE_{service.upper()}_ADDR is not set for the console")
        return channel
