"""``quire.identity``: a service's signatures (made and checked by libsodium)
are plain Ed25519, the same as any other implementation makes and checks with
the same keys, and the trust store believes exactly the signatures its keys
made over exactly the bytes signed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.identity import (
    IdentitySettings,
    ServiceIdentity,
    TrustStore,
    provision_identities,
)

MESSAGE = b"quire.work.assemble\x00" + bytes(range(256))


def test_a_signature_is_the_one_openssl_makes_with_the_same_key_and_each_checks_the_other() -> None:
    key = Ed25519PrivateKey.generate()
    identity = ServiceIdentity("validator", key)
    ours = identity.sign(MESSAGE)
    # Ed25519 is deterministic: one key and one message make one signature.
    assert ours == key.sign(MESSAGE) and len(ours) == 64
    key.public_key().verify(ours, MESSAGE)  # raises unless genuine
    trust = TrustStore({"validator": key.public_key()})
    assert trust.verify("validator", key.sign(MESSAGE), MESSAGE)


def test_the_trust_store_believes_nothing_else() -> None:
    validator, assembler = ServiceIdentity.generate("validator"), ServiceIdentity.generate("x")
    trust = TrustStore.of([validator])
    signature = validator.sign(MESSAGE)
    assert trust.verify("validator", signature, MESSAGE)
    # Any bytes-like signature and message, as OpenSSL's Ed25519 took them.
    assert trust.verify("validator", bytearray(signature), memoryview(MESSAGE))
    assert trust.verify("validator", memoryview(signature), bytearray(MESSAGE))
    assert _signs_bytes_like(validator)
    assert not trust.verify("assembler", signature, MESSAGE), "a service it does not know"
    assert not trust.verify("validator", assembler.sign(MESSAGE), MESSAGE), "another key"
    assert not trust.verify("validator", signature, MESSAGE + b"\x00"), "other bytes"
    assert not trust.verify("validator", signature, MESSAGE[:-1])
    for n in (0, 31, 63):
        flipped = bytearray(signature)
        flipped[n] ^= 0x01
        assert not trust.verify("validator", bytes(flipped), MESSAGE), n
    malformed: list[Any] = [b"", signature[:63], signature + b"\x00", None, signature.hex()]
    for bad in malformed:
        assert not trust.verify("validator", bad, MESSAGE), repr(bad)[:20]
    # Without its signature, a message that begins with one is not taken as signed.
    assert not trust.verify("validator", b"", signature + MESSAGE)
    assert not trust.verify("validator", None, signature + MESSAGE)  # type: ignore[arg-type]


def _signs_bytes_like(identity: ServiceIdentity) -> bool:
    signature = identity.sign(MESSAGE)
    return identity.sign(bytearray(MESSAGE)) == identity.sign(memoryview(MESSAGE)) == signature


def test_keys_from_the_identity_directory_sign_what_the_published_keys_check(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "identity"
    provision_identities(directory, ["signer"])
    identity = ServiceIdentity.load(IdentitySettings.from_env("signer", tmp_path, {}))
    trust = TrustStore.load(directory)
    signature = identity.sign(MESSAGE)
    assert trust.verify("signer", signature, MESSAGE)
    published = serialization.load_pem_public_key((directory / "signer.pub").read_bytes())
    published.verify(signature, MESSAGE)  # type: ignore[union-attr]
    with pytest.raises(InvalidSignature):
        published.verify(signature, MESSAGE + b"!")  # type: ignore[union-attr]
