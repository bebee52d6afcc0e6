"""Signing keys: versioned, generated into the data directory on first start
or loaded from files named by the environment. Only paths and public
certificates are recorded; key material stays in its file and is read only by
the signing worker process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from quire.database import Database
from quire.errors import FailedPrecondition
from quire.pdfsignature import certificate_sha256
from quire.reasons import ReasonCode
from quire.signer import tables
from quire.signer.signing import Pkcs11Key

__all__ = ["SigningKey", "KeyStore", "KeySource", "PKCS11_PREFIX"]

PKCS11_PREFIX = "pkcs11:"
"""Key paths of token keys: the key itself never leaves the token."""

CERT_VALIDITY = timedelta(days=3650)


@dataclass(frozen=True)
class SigningKey:
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
class KeySource:
    """Where keys come from: generated under ``key_dir``, an existing pair of
    files, or a PKCS#11 token (with the certificate as a file)."""

    key_dir: Path
    key_file: Path | None = None
    cert_file: Path | None = None
    pkcs11: Pkcs11Key | None = None

    @classmethod
    def from_env(cls, service_dir: Path) -> KeySource:
        key_file = os.environ.get("QUIRE_SIGNER_KEY_FILE")
        cert_file = os.environ.get("QUIRE_SIGNER_CERT_FILE")
        module = os.environ.get("QUIRE_SIGNER_PKCS11_MODULE")
        pkcs11 = None
        if module:
            pkcs11 = Pkcs11Key(
                module=module,
                token_label=os.environ.get("QUIRE_SIGNER_PKCS11_TOKEN", ""),
                key_label=os.environ.get("QUIRE_SIGNER_PKCS11_KEY_LABEL", ""),
                pin=os.environ.get("QUIRE_SIGNER_PKCS11_PIN", ""),
            )
        return cls(
            key_dir=service_dir / "keys",
            key_file=Path(key_file) if key_file else None,
            cert_file=Path(cert_file) if cert_file else None,
            pkcs11=pkcs11,
        )


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
    def __init__(self, database: Database, source: KeySource) -> None:
        self._db = database
        self._source = source

    def ensure_active_key(self) -> SigningKey:
        """Called at start: make sure one key version is active, generating the first."""
        return self._db.transaction(self._ensure)

    def _ensure(self, session: Session) -> SigningKey:
        active = self._active(session)
        if active is not None:
            return active
        count = len(session.execute(select(tables.signing_keys.c.version)).all())
        if self._source.pkcs11 is not None and self._source.cert_file:
            token = self._source.pkcs11
            key_path = Path(f"{PKCS11_PREFIX}{token.token_label}/{token.key_label}")
            cert_path = self._source.cert_file
            version = f"v{count + 1}-pkcs11"
        elif self._source.key_file and self._source.cert_file:
            key_path, cert_path = self._source.key_file, self._source.cert_file
            version = f"v{count + 1}-env"
        else:
            version = f"v{count + 1}"
            key_path, cert_path = _generate(self._source.key_dir / version, version)
        return self._activate(session, version, key_path, cert_path)

    def _activate(
        self, session: Session, version: str, key_path: Path, cert_path: Path
    ) -> SigningKey:
        """Record a new key version as the only active one."""
        session.execute(update(tables.signing_keys).values(active=False))
        session.execute(
            tables.signing_keys.insert().values(**_key_row(version, key_path, cert_path, True))
        )
        active = self._active(session)
        assert active is not None
        return active

    def rotate(self) -> SigningKey:
        """Generate the next version and make it the active one."""
        if self._source.pkcs11 is not None:
            raise FailedPrecondition(
                ReasonCode.KEY_SOURCE_EXTERNAL,
                "token keys are rotated in the token, then configured",
            )

        def write(session: Session) -> SigningKey:
            count = len(session.execute(select(tables.signing_keys.c.version)).all())
            version = f"v{count + 1}"
            key_path, cert_path = _generate(self._source.key_dir / version, version)
            return self._activate(session, version, key_path, cert_path)

        return self._db.transaction(write)

    @staticmethod
    def _active(session: Session) -> SigningKey | None:
        row = session.execute(
            select(tables.signing_keys).where(tables.signing_keys.c.active.is_(True))
        ).first()
        return None if row is None else _to_key(row)

    async def active(self) -> SigningKey:
        key = await self._db.read(self._active)
        if key is None:
            raise LookupError("no active signing key")
        return key

    async def all(self) -> list[SigningKey]:
        def read(session: Session) -> list[SigningKey]:
            rows = session.execute(
                select(tables.signing_keys).order_by(tables.signing_keys.c.created_at)
            )
            return [_to_key(row) for row in rows]

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
