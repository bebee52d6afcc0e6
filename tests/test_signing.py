"""PAdES signing with pyHanko: one signature over the whole file, by a known key."""

from __future__ import annotations

from pathlib import Path

import pytest

from quire.blobstore import sha256_file
from quire.database import Database
from quire.errors import FailedPrecondition, InvalidSetting
from quire.pdfsignature import verify_signed_pdf
from quire.signer import tables
from quire.signer.keystore import (
    ConfiguredKeyFiles,
    GeneratedKeys,
    KeyStore,
    TokenKeys,
    key_source_from_env,
)
from quire.signer.signing import PacketDigestMismatch, Pkcs11Key, _reserved_in, sign_packet
from quire.testing.pdfs import write_text_pdf


@pytest.fixture
def keystore(tmp_path: Path) -> KeyStore:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    return KeyStore(database, GeneratedKeys(tmp_path / "keys"))


def test_first_start_generates_one_active_key_version(keystore: KeyStore, tmp_path: Path) -> None:
    first = keystore.ensure_active_key()
    again = keystore.ensure_active_key()
    assert first.version == again.version == "v1"
    assert (tmp_path / "keys" / "v1" / "key.pem").stat().st_mode & 0o777 == 0o600


def test_signed_packet_verifies_and_a_changed_byte_does_not(
    keystore: KeyStore, tmp_path: Path
) -> None:
    key = keystore.ensure_active_key()
    packet = write_text_pdf(tmp_path / "packet.pdf", ["one", "two"])
    digest, _ = sha256_file(packet)
    signed = tmp_path / "signed.pdf"
    result = sign_packet(str(packet), digest, str(signed), key.key_path, key.cert_path)
    assert result.sha256 == sha256_file(signed)[0]

    report = verify_signed_pdf(str(signed), [key.certificate_pem])
    assert report.ok
    assert report.certificate_sha256 == key.certificate_sha256

    tampered = tmp_path / "tampered.pdf"
    data = bytearray(signed.read_bytes())
    comment = data.index(b"\n%") + 2  # the binary comment after the header: covered, inert
    data[comment] ^= 0x01
    tampered.write_bytes(bytes(data))
    assert not verify_signed_pdf(str(tampered), [key.certificate_pem]).ok


def test_a_packet_signed_by_an_unknown_key_is_not_trusted(
    keystore: KeyStore, tmp_path: Path
) -> None:
    key = keystore.ensure_active_key()
    other = KeyStore(
        Database(f"sqlite:///{tmp_path / 'other.db'}", tables.metadata),
        GeneratedKeys(tmp_path / "other"),
    )
    other._db.create_schema()  # noqa: SLF001 - a second, unrelated stack's keys
    stranger = other.ensure_active_key()
    packet = write_text_pdf(tmp_path / "packet.pdf", ["one"])
    digest, _ = sha256_file(packet)
    signed = tmp_path / "signed.pdf"
    sign_packet(str(packet), digest, str(signed), stranger.key_path, stranger.cert_path)
    report = verify_signed_pdf(str(signed), [key.certificate_pem])
    assert report.intact and not report.trusted and not report.ok


def test_later_packets_reuse_the_first_reservation_and_a_replaced_key_is_reloaded(
    keystore: KeyStore, tmp_path: Path
) -> None:
    """A worker signs many packets with one key: the key and the signature
    space are worked out once, every packet still verifies, and a key file
    replaced in place is never signed with from the cache."""
    key = keystore.ensure_active_key()
    sizes = []
    for index, pages in enumerate((["one"], ["one", "two", "three"] * 5)):
        packet = write_text_pdf(tmp_path / f"packet-{index}.pdf", pages)
        signed = tmp_path / f"signed-{index}.pdf"
        sign_packet(str(packet), sha256_file(packet)[0], str(signed), key.key_path, key.cert_path)
        assert verify_signed_pdf(str(signed), [key.certificate_pem]).ok
        sizes.append(_reserved_in(str(signed)))
    assert sizes[0] == sizes[1]

    other = KeyStore(
        Database(f"sqlite:///{tmp_path / 'other.db'}", tables.metadata),
        GeneratedKeys(tmp_path / "other"),
    )
    other._db.create_schema()  # noqa: SLF001 - a second stack's key, copied over the first
    stranger = other.ensure_active_key()
    Path(key.key_path).write_bytes(Path(stranger.key_path).read_bytes())
    Path(key.cert_path).write_bytes(Path(stranger.cert_path).read_bytes())
    packet = write_text_pdf(tmp_path / "packet-after.pdf", ["one"])
    signed = tmp_path / "signed-after.pdf"
    sign_packet(str(packet), sha256_file(packet)[0], str(signed), key.key_path, key.cert_path)
    report = verify_signed_pdf(str(signed), [stranger.certificate_pem])
    assert report.ok and report.certificate_sha256 == stranger.certificate_sha256


def test_signing_refuses_a_packet_that_changed(keystore: KeyStore, tmp_path: Path) -> None:
    key = keystore.ensure_active_key()
    packet = write_text_pdf(tmp_path / "packet.pdf", ["one"])
    with pytest.raises(PacketDigestMismatch):
        sign_packet(str(packet), "0" * 64, str(tmp_path / "out.pdf"), key.key_path, key.cert_path)


def test_an_independent_tool_validates_the_signature(keystore: KeyStore, tmp_path: Path) -> None:
    import shutil
    import subprocess

    if shutil.which("pdfsig") is None:
        pytest.skip("pdfsig (Debian's poppler-utils) is not installed; `make test` installs it")
    key = keystore.ensure_active_key()
    packet = write_text_pdf(tmp_path / "packet.pdf", ["one", "two"])
    digest, _ = sha256_file(packet)
    signed = tmp_path / "signed.pdf"
    sign_packet(str(packet), digest, str(signed), key.key_path, key.cert_path)
    report = subprocess.run(["pdfsig", str(signed)], capture_output=True, text=True, timeout=60)
    assert "Signature is Valid" in report.stdout
    assert "Total document signed" in report.stdout
    assert "Quire packet signer v1" in report.stdout

    tampered = tmp_path / "tampered.pdf"
    data = bytearray(signed.read_bytes())
    data[data.index(b"\n%") + 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    report = subprocess.run(["pdfsig", str(tampered)], capture_output=True, text=True, timeout=60)
    assert "Signature is Valid" not in report.stdout


def test_with_a_timestamp_authority_the_signature_is_b_t(
    keystore: KeyStore, tmp_path: Path
) -> None:
    from quire.testing.pki import TestCA
    from quire.testing.tsa import LocalTsa

    key = keystore.ensure_active_key()
    tsa_cert, tsa_key = TestCA(tmp_path / "pki").issue_tsa()
    packet = write_text_pdf(tmp_path / "packet.pdf", ["stamped"])
    digest, _ = sha256_file(packet)
    signed = tmp_path / "signed.pdf"
    with LocalTsa(tsa_cert, tsa_key) as tsa:
        sign_packet(str(packet), digest, str(signed), key.key_path, key.cert_path, tsa.url)
    report = verify_signed_pdf(str(signed), [key.certificate_pem])
    assert report.ok and report.timestamped
    plain = tmp_path / "plain.pdf"
    sign_packet(str(packet), digest, str(plain), key.key_path, key.cert_path)
    assert not verify_signed_pdf(str(plain), [key.certificate_pem]).timestamped


def _copy_of(key_path: str, cert_path: str, folder: Path) -> tuple[Path, Path]:
    """A replica's own mount of the Secret holding a key and certificate."""
    folder.mkdir(parents=True)
    key, cert = folder / "signer.key", folder / "signer.pem"
    key.write_bytes(Path(key_path).read_bytes())
    cert.write_bytes(Path(cert_path).read_bytes())
    return key, cert


def test_replicas_with_their_own_mount_of_the_configured_key_share_one_version(
    tmp_path: Path,
) -> None:
    made = KeyStore(
        Database(f"sqlite:///{tmp_path / 'maker.db'}", tables.metadata),
        GeneratedKeys(tmp_path / "maker"),
    )
    made._db.create_schema()  # noqa: SLF001 - only to produce a key pair
    pair = made.ensure_active_key()
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    replicas = []
    for number in (1, 2):
        key, cert = _copy_of(pair.key_path, pair.cert_path, tmp_path / f"replica-{number}")
        replicas.append(KeyStore(database, ConfiguredKeyFiles(key, cert, tmp_path / "generated")))
    first, second = (store.ensure_active_key() for store in replicas)
    assert first == second and first.version == "v1-env"
    for number, store in enumerate(replicas, start=1):
        material = store.material(first)
        assert material.key_path == str(tmp_path / f"replica-{number}" / "signer.key")
        assert material.pkcs11 is None
        packet = write_text_pdf(tmp_path / f"packet-{number}.pdf", ["one"])
        signed = tmp_path / f"signed-{number}.pdf"
        sign_packet(
            str(packet), sha256_file(packet)[0], str(signed), material.key_path, material.cert_path
        )
        assert verify_signed_pdf(str(signed), [first.certificate_pem]).ok

    # The Secret now holds another key: the next start records a new version.
    other = KeyStore(
        Database(f"sqlite:///{tmp_path / 'other.db'}", tables.metadata),
        GeneratedKeys(tmp_path / "other-maker"),
    )
    other._db.create_schema()  # noqa: SLF001 - only to produce a key pair
    new_pair = other.ensure_active_key()
    key, cert = _copy_of(new_pair.key_path, new_pair.cert_path, tmp_path / "replica-3")
    renewed = KeyStore(database, ConfiguredKeyFiles(key, cert, tmp_path / "generated"))
    active = renewed.ensure_active_key()
    assert active.version == "v2-env"
    assert active.certificate_sha256 == new_pair.certificate_sha256


@pytest.mark.parametrize(
    "env",
    [
        {"QUIRE_SIGNER_CERT_FILE": "/x/cert.pem"},
        {"QUIRE_SIGNER_KEY_FILE": "/x/key.pem"},
        {"QUIRE_SIGNER_PKCS11_MODULE": "/x/module.so"},
    ],
)
def test_half_a_key_source_is_refused_at_start(env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting, match="QUIRE_SIGNER_CERT_FILE"):
        key_source_from_env(tmp_path, env)


def test_the_key_source_is_chosen_from_the_environment(tmp_path: Path) -> None:
    assert isinstance(key_source_from_env(tmp_path, {}), GeneratedKeys)
    files = {"QUIRE_SIGNER_KEY_FILE": "/k", "QUIRE_SIGNER_CERT_FILE": "/c"}
    assert isinstance(key_source_from_env(tmp_path, files), ConfiguredKeyFiles)
    token = {"QUIRE_SIGNER_PKCS11_MODULE": "/m.so", "QUIRE_SIGNER_CERT_FILE": "/c"}
    assert isinstance(key_source_from_env(tmp_path, token), TokenKeys)


def test_a_token_key_is_never_rotated_by_the_api(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    token = Pkcs11Key("/nonexistent/module.so", "quire", "packet-signer", "0000")
    store = KeyStore(database, TokenKeys(token, tmp_path / "cert.pem"))
    with pytest.raises(FailedPrecondition) as refused:
        store.rotate()
    assert refused.value.reason == "KEY_SOURCE_EXTERNAL"
