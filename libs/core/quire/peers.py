"""The other services as one process reaches them, and who may reach it.

Built once in a service's ``main`` from its settings: channels to its peers
whose every call proves which service is calling (``quire.callers``), the
operator check (admission owns the tokens), and the access guard for the
process's own gRPC port (``quire.access`` with its table from
``quire.accesspolicy``). Loading fails when the identity key or the trust
directory is missing: a service never runs without them.
"""

from __future__ import annotations

import grpc

from quire.access import AccessInterceptor
from quire.accesspolicy import policy_for
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.callers import CallerVerifier
from quire.grpcserver import service_channel
from quire.identity import ServiceIdentity, TrustStore
from quire.operatorcheck import OperatorCheck
from quire.settings import ServiceSettings

__all__ = ["Peers"]


class Peers:
    """Channels to the other services, the operator check and this service's guard."""

    def __init__(
        self, settings: ServiceSettings, *, identity: ServiceIdentity, trust: TrustStore
    ) -> None:
        self._settings = settings
        self._identity = identity
        self._trust = trust
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._operators: OperatorCheck | None = None

    @classmethod
    def load(cls, settings: ServiceSettings) -> Peers:
        """Read this service's identity key and the trusted public keys."""
        if settings.identity is None:
            raise RuntimeError("no service identity configured")
        return cls(
            settings,
            identity=ServiceIdentity.load(settings.identity),
            trust=TrustStore.load(settings.identity.trust_dir),
        )

    def channel(self, service: str) -> grpc.aio.Channel:
        """The one channel to ``service``; its calls are signed as this service."""
        if service not in self._channels:
            self._channels[service] = service_channel(
                self._settings.peers[service], self._settings.tls, identity=self._identity
            )
        return self._channels[service]

    def operators(self) -> OperatorCheck:
        """Asks admission whether a call's bearer token is an operator's."""
        if self._operators is None:
            self._operators = OperatorCheck(
                admin_grpc.TenantAdminServiceStub(self.channel("admission"))
            )
        return self._operators

    def guard(self) -> AccessInterceptor:
        """The access check for this service's own port."""
        rules = policy_for(self._settings.service)
        needs_operators = any(rule.operator for rule in rules.values())
        return AccessInterceptor(
            rules,
            verifier=CallerVerifier(self._trust),
            operators=self.operators() if needs_operators else None,
            domain=f"{self._settings.service}.quire",
        )

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
