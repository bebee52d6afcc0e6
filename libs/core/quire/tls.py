"""Mutual TLS between Quire's services, configured by file paths.

When ``QUIRE_TLS_CERT_FILE``, ``QUIRE_TLS_KEY_FILE`` and ``QUIRE_TLS_CA_FILE``
are set, every service serves only TLS and requires a client certificate
signed by that CA, and every client (services calling each other, the CLI,
the stack's health checks) presents the certificate. Unset, everything runs
in plaintext on loopback, as the embedded stack does by default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import grpc
from pydantic_settings import SettingsConfigDict

from quire.environment import Settings
from quire.errors import InvalidSetting

__all__ = ["TlsSettings", "aio_channel", "sync_channel"]


class TlsSettings(Settings):
    """The files of mutual TLS: set all three or none."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_TLS_")

    cert_file: Path
    """PEM certificate chain this process presents (as server and as client)."""
    key_file: Path
    """PEM private key of that certificate; read at start, never logged."""
    ca_file: Path
    """PEM CA certificates trusted for the other side."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TlsSettings | None:
        """The three files, or None when none is set; one or two set is refused."""
        env = os.environ if env is None else env
        names = list(cls.variables())
        present = [bool(env.get(name)) for name in names]
        if not any(present):
            return None
        if not all(present):
            missing = next(name for name, there in zip(names, present, strict=True) if not there)
            raise InvalidSetting(missing, "set with the other QUIRE_TLS_* files, or none of them")
        return cls.read(env)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=self.ca_file.read_bytes(),
            require_client_auth=True,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_file.read_bytes(),
            private_key=self.key_file.read_bytes(),
            certificate_chain=self.cert_file.read_bytes(),
        )


def aio_channel(
    address: str,
    tls: TlsSettings | None,
    interceptors: list[grpc.aio.ClientInterceptor] | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to a Quire service: mutual TLS when configured."""
    if tls is None:
        return grpc.aio.insecure_channel(address, interceptors=interceptors)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), interceptors=interceptors)


def sync_channel(address: str, tls: TlsSettings | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, tls.channel_credentials())
