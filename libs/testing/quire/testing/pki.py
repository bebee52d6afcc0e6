"""A throwaway PKI for tests: a CA and leaf certificates for loopback."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TestCA"]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class TestCA:
    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, name: str = "Quire test CA") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = folder / "ca.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue_tsa(self, name: str = "Quire test TSA") -> tuple[Path, Path]:
        """A timestamping certificate (critical EKU timeStamping, RFC 3161)."""
        return self.issue(
            name, usages=[ExtendedKeyUsageOID.TIME_STAMPING], critical=True, rsa_key=True
        )

    def issue(
        self,
        name: str,
        usages: list[x509.ObjectIdentifier] | None = None,
        critical: bool = False,
        rsa_key: bool = False,
    ) -> tuple[Path, Path]:
        """A certificate for 127.0.0.1/localhost usable as server and client."""
        key: Any = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if rsa_key
            else ec.generate_private_key(ec.SECP256R1())
        )
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    usages or [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=critical,
            )
            .sign(self._key, hashes.SHA256())
        )
        stem = name.replace(" ", "-")
        cert_file = self.folder / f"{stem}.pem"
        key_file = self.folder / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file
