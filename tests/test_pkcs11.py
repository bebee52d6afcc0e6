"""Signing with a key inside a PKCS#11 token (SoftHSM2 from Debian's
packages): the packet verifies, and the key file is not needed once the key
is in the token."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from quire.blobstore import sha256_file
from quire.pdfsignature import verify_signed_pdf
from quire.signer.signing import Pkcs11Key, sign_packet
from quire.testing.pdfs import write_text_pdf
from quire.testing.softhsm import MODULE, PIN, init_token


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Pkcs11Key, Path]:
    """A fresh SoftHSM2 token holding an EC key; returns the key and its certificate."""
    init_token(tmp_path, monkeypatch, "quire")
    key = ec.generate_private_key(ec.SECP256R1())
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    subprocess.run(
        [
            "softhsm2-util",
            "--import",
            str(key_file),
            "--token",
            "quire",
            "--label",
            "packet-signer",
            "--id",
            "01",
            "--pin",
            PIN,
        ],
        check=True,
        capture_output=True,
        env=os.environ,
    )
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Quire HSM signer")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(
            x509.KeyUsage(True, True, False, False, False, False, False, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp_path / "cert.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.unlink()  # from here on the key exists only inside the token
    return Pkcs11Key(MODULE, "quire", "packet-signer", PIN), cert_file


def test_a_packet_signed_inside_a_pkcs11_token_verifies(token, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key, cert_file = token
    packet = write_text_pdf(tmp_path / "packet.pdf", ["signed in a token"])
    digest, _ = sha256_file(packet)
    signed = tmp_path / "signed.pdf"
    sign_packet(
        str(packet), digest, str(signed), "pkcs11:quire/packet-signer", str(cert_file), None, key
    )
    report = verify_signed_pdf(str(signed), [cert_file.read_text()])
    assert report.ok, report
    assert "Quire HSM signer" in report.signer_identity


def test_a_wrong_pin_fails_and_signs_nothing(token, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key, cert_file = token
    packet = write_text_pdf(tmp_path / "packet.pdf", ["nope"])
    digest, _ = sha256_file(packet)
    wrong = Pkcs11Key(key.module, key.token_label, key.key_label, "0000")
    with pytest.raises(Exception):  # noqa: B017 - the token's own error type
        sign_packet(str(packet), digest, str(tmp_path / "x.pdf"), "", str(cert_file), None, wrong)
    assert PIN not in repr(wrong) and "0000" not in repr(wrong), "the PIN is never shown"


@pytest.mark.stack
async def test_the_stack_signs_with_the_token_key(token, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from quire.client import AdmissionClient, PacketItem
    from quire.jobs import state_name
    from quire.stack.supervisor import Stack

    key, cert_file = token
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_SIGNER_PKCS11_MODULE": key.module,
            "QUIRE_SIGNER_PKCS11_TOKEN": key.token_label,
            "QUIRE_SIGNER_PKCS11_KEY_LABEL": key.key_label,
            "QUIRE_SIGNER_PKCS11_PIN": key.pin,
            "QUIRE_SIGNER_CERT_FILE": str(cert_file),
        },
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["hsm"]))).sha256
            job = await client.wait((await client.submit([PacketItem("d", digest)])).name)
            assert state_name(job.state) == "COMPLETED"
            assert job.key_version == "v1-pkcs11"
            output = tmp_path / "signed.pdf"
            await client.download(job.name, output)
    finally:
        await asyncio.to_thread(stack.stop)
    report = await asyncio.to_thread(verify_signed_pdf, str(output), [cert_file.read_text()])
    assert report.ok
    keys_dir = Path(stack.data_dir) / "signer" / "keys"
    assert not keys_dir.exists() or not list(keys_dir.rglob("key.pem")), "no key file was made"
    logs = (Path(stack.data_dir) / "logs" / "signer.log").read_text()
    assert PIN not in logs, "the PIN never reaches a log"
