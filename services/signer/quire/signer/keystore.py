"""Signing keys: versioned, generated into the data directory on first start
or loaded from files named by the environment. Only paths and public
certificates are recorded; key material stays in its file and is read only by
the signing worker process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import Field
from pydantic_settings import SettingsConfigDict
from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from quire.database import Database
from quire.driversql import DriverStatement
from quire.environment import Settings
from quire.errors import FailedPrecondition, InvalidSetting
from quire.paging import Position, keyset_after
from quire.pdfsignature import certificate_sha256
from quire.reasons import ReasonCode
from quire.signer import tables
from quire.signer.signing import Pkcs11Key

__all__ = [
    "SigningKey",
    "SigningMaterial",
    "KeyStore",
    "KeySource",
    "GeneratedKeys",
    "ConfiguredKeyFiles",
    "TokenKeys",
    "key_source_from_env",
    "key_source",
    "SignerSettings",
]

_ACTIVE_KEY = DriverStatement(
    select(tables.signing_keys).where(tables.signing_keys.c.active.is_(True))
)
"""Built once: the signer reads it for every job, and building a statement
costs more CPU than running it."""

CERT_VALIDITY = timedelta(days=3650)


@dataclass(frozen=True)
class SigningKey:
    """One key version as recorded: where its files are and its public certificate,
    never key material. One version at a time is ``active``."""

    version: str
    certificate_sha256: str
    certificate_pem: str
    key_path: str
    cert_path: str
    signer_identity: str
    not_before: datetime
    not_after: datetime
    active: bool


@dataclass(frozen=True)
class SigningMaterial:
    """What a signing worker needs for one key version: its files, or its
    certificate file and the token that holds the key."""

    key_path: str
    cert_path: str
    pkcs11: Pkcs11Key | None = None


class KeySource(Protocol):
    """Where signing keys come from; chosen once in ``main`` (``key_source_from_env``)."""

    def new_version(self, number: int, *, rotating: bool) -> tuple[str, Path, Path]:
        """The ``number``-th version: (name, key reference to record, certificate file)."""
        ...

    def is_current(self, key: SigningKey) -> bool:
        """Whether the active version is still the one this source holds."""
        ...

    def material(self, key: SigningKey) -> SigningMaterial: ...


@dataclass(frozen=True)
class GeneratedKeys:
    """Keys generated into the data directory (``key_dir``), one folder per
    version: the embedded stack's default. A cluster configures its keys
    instead, since each replica has its own directory."""

    key_dir: Path

    def new_version(self, number: int, *, rotating: bool) -> tuple[str, Path, Path]:
        version = f"v{number}"
        return (version, *_generate(self.key_dir / version, version))

    def is_current(self, key: SigningKey) -> bool:
        return True

    def material(self, key: SigningKey) -> SigningMaterial:
        return SigningMaterial(key.key_path, key.cert_path)


@dataclass(frozen=True)
class ConfiguredKeyFiles:
    """A key and certificate from files a Secret mounts
    (``QUIRE_SIGNER_KEY_FILE``, ``QUIRE_SIGNER_CERT_FILE``). Every replica
    signs with its own mount of them; a new certificate there becomes a new
    version at the next start. Rotation by the API generates (``key_dir``)."""

    key_file: Path
    cert_file: Path
    key_dir: Path

    def new_version(self, number: int, *, rotating: bool) -> tuple[str, Path, Path]:
        if rotating:
            return GeneratedKeys(self.key_dir).new_version(number, rotating=True)
        return f"v{number}-env", self.key_file, self.cert_file

    def is_current(self, key: SigningKey) -> bool:
        configured = _configured_certificate(self.cert_file, "QUIRE_SIGNER_CERT_FILE")
        return not key.version.endswith("-env") or configured == key.certificate_sha256

    def material(self, key: SigningKey) -> SigningMaterial:
        if key.version.endswith("-env"):
            return SigningMaterial(str(self.key_file), str(self.cert_file))
        return SigningMaterial(key.key_path, key.cert_path)


@dataclass(frozen=True)
class TokenKeys:
    """A key that never leaves a PKCS#11 token, its certificate from a file
    (``QUIRE_SIGNER_PKCS11_*``, ``QUIRE_SIGNER_CERT_FILE``). Rotated in the
    token, then configured; never by the API."""

    token: Pkcs11Key
    cert_file: Path

    def new_version(self, number: int, *, rotating: bool) -> tuple[str, Path, Path]:
        if rotating:
            raise FailedPrecondition(
                ReasonCode.KEY_SOURCE_EXTERNAL,
                "token keys are rotated in the token, then configured",
            )
        # Recorded for people reading the table; nothing opens it as a path.
        reference = Path(f"pkcs11:{self.token.token_label}/{self.token.key_label}")
        return f"v{number}-pkcs11", reference, self.cert_file

    def is_current(self, key: SigningKey) -> bool:
        configured = _configured_certificate(self.cert_file, "QUIRE_SIGNER_CERT_FILE")
        return key.version.endswith("-pkcs11") and configured == key.certificate_sha256

    def material(self, key: SigningKey) -> SigningMaterial:
        return SigningMaterial("", str(self.cert_file), self.token)


def _configured_certificate(path: Path, variable: str) -> str:
    try:
        return certificate_sha256(path.read_text())
    except (OSError, ValueError):
        raise InvalidSetting(variable, "a readable PEM certificate") from None


class SignerSettings(Settings):
    """Where the signer's keys come from — a PKCS#11 token (with a certificate
    file), configured key files, or, with neither, keys it generates under
    its own directory (a new certificate becomes a new key version at the
    next start) — and its timestamp authority."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_SIGNER_")

    cert_file: Path | None = None
    """The signing certificate (PEM), from a Secret every replica mounts."""
    key_file: Path | None = None
    """Its private key (PEM), from the same Secret."""
    pkcs11_module: str = ""
    """Sign with a key inside a PKCS#11 token instead: the module's path."""
    pkcs11_token: str = ""
    """The token's label."""
    pkcs11_key_label: str = ""
    """The key's label in the token."""
    pkcs11_pin: str = Field(default="", repr=False)
    """The token's PIN."""
    tsa_url: str | None = None
    """An RFC 3161 timestamp authority: signatures become PAdES B-T."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SignerSettings:
        return cls.read(env)


def key_source_from_env(service_dir: Path, env: Mapping[str, str] | None = None) -> KeySource:
    """The signer's key source, from ``QUIRE_SIGNER_*`` (``SignerSettings``)."""
    return key_source(service_dir, SignerSettings.from_env(env))


def key_source(service_dir: Path, settings: SignerSettings) -> KeySource:
    """A PKCS#11 token (with a certificate file), configured key files, or keys
    generated under the service's directory; half of one is refused."""
    key_dir = service_dir / "keys"
    cert_file = settings.cert_file
    if settings.pkcs11_module and cert_file:
        token = Pkcs11Key(
            module=settings.pkcs11_module,
            token_label=settings.pkcs11_token,
            key_label=settings.pkcs11_key_label,
            pin=settings.pkcs11_pin,
        )
        return TokenKeys(token, cert_file)
    if settings.key_file and cert_file:
        return ConfiguredKeyFiles(settings.key_file, cert_file, key_dir)
    if settings.key_file or cert_file or settings.pkcs11_module:
        raise InvalidSetting(
            "QUIRE_SIGNER_CERT_FILE",
            "set with QUIRE_SIGNER_KEY_FILE or QUIRE_SIGNER_PKCS11_MODULE, or neither",
        )
    return GeneratedKeys(key_dir)


def _generate(directory: Path, version: str) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Quire"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Quire packet signer {version}"),
        ]
    )
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=True,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    key_path = directory / "key.pem"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    cert_path = directory / "cert.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def _key_row(version: str, key_path: Path, cert_path: Path, active: bool) -> dict[str, object]:
    pem = cert_path.read_text()
    certificate = x509.load_pem_x509_certificate(pem.encode())
    return {
        "version": version,
        "certificate_sha256": certificate_sha256(pem),
        "certificate_pem": pem,
        "key_path": str(key_path),
        "cert_path": str(cert_path),
        "signer_identity": certificate.subject.rfc4514_string(),
        "not_before": certificate.not_valid_before_utc,
        "not_after": certificate.not_valid_after_utc,
        "active": active,
        "created_at": datetime.now(UTC),
    }


class KeyStore:
    """The signer's key versions: which one is active, and new ones from the
    ``KeySource`` at start or on rotation."""

    def __init__(self, database: Database, source: KeySource) -> None:
        self._db = database
        self._source = source

    def ensure_active_key(self) -> SigningKey:
        """Called at start: make sure one key version is active, generating the first.

        Replicas starting together race to record the first version; the losers'
        insert fails on the version's key, and they take the winner's."""
        try:
            return self._db.transaction(self._ensure)
        except IntegrityError:
            return self._db.transaction(self._ensure)

    def _ensure(self, connection: Connection) -> SigningKey:
        active = self._active(connection)
        if active is not None and self._source.is_current(active):
            return active
        count = len(connection.execute(select(tables.signing_keys.c.version)).all())
        version, key_path, cert_path = self._source.new_version(count + 1, rotating=False)
        return self._activate(connection, version, key_path, cert_path)

    def material(self, key: SigningKey) -> SigningMaterial:
        """What the signing worker is handed for ``key``."""
        return self._source.material(key)

    def _activate(
        self, connection: Connection, version: str, key_path: Path, cert_path: Path
    ) -> SigningKey:
        """Record a new key version as the only active one."""
        connection.execute(update(tables.signing_keys).values(active=False))
        connection.execute(
            tables.signing_keys.insert().values(**_key_row(version, key_path, cert_path, True))
        )
        active = self._active(connection)
        assert active is not None
        return active

    def rotate(self) -> SigningKey:
        """Make the source's next version the active one (generated, unless the
        source refuses: a token's keys are rotated in the token)."""
        return self._db.transaction(self.rotate_in)

    def rotate_in(self, connection: Connection) -> SigningKey:
        """``rotate`` in the caller's transaction (which may remember its request id)."""
        count = len(connection.execute(select(tables.signing_keys.c.version)).all())
        version, key_path, cert_path = self._source.new_version(count + 1, rotating=True)
        return self._activate(connection, version, key_path, cert_path)

    @staticmethod
    def _active(connection: Connection) -> SigningKey | None:
        row = _ACTIVE_KEY.first(connection, {})
        return None if row is None else _to_key(row)

    async def active(self) -> SigningKey:
        return await self._db.read(self.active_in)

    def active_in(self, connection: Connection) -> SigningKey:
        """The active key, read in the caller's transaction."""
        key = self._active(connection)
        if key is None:
            raise LookupError("no active signing key")
        return key

    async def all(self) -> list[SigningKey]:
        def read(connection: Connection) -> list[SigningKey]:
            rows = connection.execute(
                select(tables.signing_keys).order_by(tables.signing_keys.c.created_at)
            )
            return [_to_key(row) for row in rows]

        return await self._db.read(read)

    async def listed(
        self, *, after: Position | None, limit: int
    ) -> list[tuple[Position, SigningKey]]:
        """At most ``limit`` key versions in creation order after ``after``,
        each with its position (a page of ListKeys)."""
        table = tables.signing_keys
        order = (table.c.created_at, table.c.version)

        def read(connection: Connection) -> list[tuple[Position, SigningKey]]:
            query = select(table).order_by(*order).limit(limit)
            beyond = keyset_after(order, after)
            if beyond is not None:
                query = query.where(beyond)
            return [
                ((row.created_at, row.version), _to_key(row)) for row in connection.execute(query)
            ]

        return await self._db.read(read)


def _to_key(row: object) -> SigningKey:
    return SigningKey(
        version=row.version,  # type: ignore[attr-defined]
        certificate_sha256=row.certificate_sha256,  # type: ignore[attr-defined]
        certificate_pem=row.certificate_pem,  # type: ignore[attr-defined]
        key_path=row.key_path,  # type: ignore[attr-defined]
        cert_path=row.cert_path,  # type: ignore[attr-defined]
        signer_identity=row.signer_identity,  # type: ignore[attr-defined]
        not_before=row.not_before,  # type: ignore[attr-defined]
        not_after=row.not_after,  # type: ignore[attr-defined]
        active=row.active,  # type: ignore[attr-defined]
    )
