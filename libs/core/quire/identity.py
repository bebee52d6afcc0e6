"""Service identities: one Ed25519 key pair per service, and the public keys
every service trusts.

A service proves who it is with its private key, independently of the broker
and of the network: it signs the queue messages it produces (``quire.wire``)
and the internal gRPC calls it makes. Every other service checks those
signatures against the public keys in the trust directory.

Keys are kept and exchanged as ``cryptography`` objects (PEM files); the
signatures themselves are made and checked by libsodium (PyNaCl): the same
Ed25519, in about half OpenSSL's time, on every message and call.

The embedded stack generates the key pairs at first start into
``<data dir>/identity`` (private keys mode 0600); a cluster mounts each
service's private key from its own Secret and the public keys from a shared
ConfigMap. Key material never appears in logs, errors or traces.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey
from pydantic import Field

from quire.environment import Given, Settings, Variable

__all__ = [
    "IdentitySettings",
    "ServiceIdentity",
    "TrustStore",
    "provision_identities",
    "PUBLIC_SUFFIX",
    "PRIVATE_SUFFIX",
]

PUBLIC_SUFFIX = ".pub"
PRIVATE_SUFFIX = ".key"


class IdentitySettings(Settings):
    """Where a process finds its own private key and the keys it trusts."""

    service: Annotated[str, Given()]
    """The identity this process acts as (``admission``, ``validator``, ...)."""
    directory: Annotated[Path, Variable("QUIRE_IDENTITY_DIR")] = Path("identity")
    """The identity directory: ``<data dir>/identity`` unless set."""
    key_file: Annotated[Path, Variable("QUIRE_{SERVICE}_IDENTITY_KEY_FILE")] = Field(
        default_factory=lambda data: data["directory"] / f"{data['service']}{PRIVATE_SUFFIX}"
    )
    """PEM (PKCS#8) Ed25519 private key of the service, read at start and never
    logged: ``<service>.key`` in the identity directory unless set."""
    trust_dir: Annotated[Path, Variable("QUIRE_IDENTITY_TRUST_DIR")] = Field(
        default_factory=lambda data: data["directory"]
    )
    """Directory of ``<service>.pub`` PEM public keys this process trusts: the
    identity directory unless set."""

    @classmethod
    def from_env(
        cls, service: str, data_dir: Path, env: Mapping[str, str] | None = None
    ) -> IdentitySettings:
        """``service``'s identity as ``env`` sets it, under ``data_dir`` by default."""
        names = {"SERVICE": service.upper()}
        return cls.read(env, names, service=service, directory=data_dir / "identity")


SIGNATURE_BYTES = 64
"""An Ed25519 signature's length."""


class ServiceIdentity:
    """A service's private key: signs what the service produces."""

    def __init__(self, service: str, key: Ed25519PrivateKey) -> None:
        self.service = service
        self._key = key
        self._signing = SigningKey(key.private_bytes_raw())

    @classmethod
    def load(cls, settings: IdentitySettings) -> ServiceIdentity:
        data = settings.key_file.read_bytes()
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"identity key of {settings.service} is not Ed25519")
        return cls(settings.service, key)

    @classmethod
    def generate(cls, service: str) -> ServiceIdentity:
        """A fresh identity, for tests that stand in for an unknown party."""
        return cls(service, Ed25519PrivateKey.generate())

    def sign(self, data: bytes) -> bytes:
        """``data``'s Ed25519 signature (64 bytes)."""
        return self._signing.sign(bytes(data)).signature

    def public_key(self) -> Ed25519PublicKey:
        return self._key.public_key()

    def __repr__(self) -> str:
        return f"ServiceIdentity({self.service!r})"


class TrustStore:
    """The public keys of the services this process believes."""

    def __init__(self, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self._keys = {service: VerifyKey(key.public_bytes_raw()) for service, key in keys.items()}

    @classmethod
    def load(cls, trust_dir: Path) -> TrustStore:
        keys: dict[str, Ed25519PublicKey] = {}
        for path in sorted(trust_dir.glob(f"*{PUBLIC_SUFFIX}")):
            key = serialization.load_pem_public_key(path.read_bytes())
            if isinstance(key, Ed25519PublicKey):
                keys[path.name.removesuffix(PUBLIC_SUFFIX)] = key
        return cls(keys)

    @classmethod
    def of(cls, identities: Iterable[ServiceIdentity]) -> TrustStore:
        return cls({identity.service: identity.public_key() for identity in identities})

    def knows(self, service: str) -> bool:
        return service in self._keys

    def verify(self, service: str, signature: bytes, data: bytes) -> bool:
        """True only when ``service`` is trusted and signed ``data``."""
        key = self._keys.get(service)
        if isinstance(signature, bytearray | memoryview):
            signature = bytes(signature)
        if key is None or type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
            # (PyNaCl would read a missing signature as one prefixed to ``data``.)
            return False
        try:
            key.verify(bytes(data), signature)
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True


def provision_identities(directory: Path, services: Iterable[str]) -> list[str]:
    """Generate a key pair for each service that has none; returns those made.

    Private keys are created exclusively with mode 0600, so a second caller
    never overwrites a key already handed out.
    """
    directory.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    for service in services:
        private = directory / f"{service}{PRIVATE_SUFFIX}"
        public = directory / f"{service}{PUBLIC_SUFFIX}"
        if not private.exists():
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            try:
                fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as handle:
                handle.write(pem)
            made.append(service)
        if not public.exists():
            key_pem = serialization.load_pem_private_key(private.read_bytes(), password=None)
            assert isinstance(key_pem, Ed25519PrivateKey)
            public.write_bytes(
                key_pem.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )
    return made
