"""C2SP tlog-cosignature v1 (https://c2sp.org/tlog-cosignature): a witness's
statement that it saw a checkpoint and that it extends every earlier one of
the same log the witness saw.

A cosignature is one more signature line on the checkpoint's signed note::

    — <witness name> base64(key ID (4) || timestamp (8, big-endian) || Ed25519 signature (64))

    key ID = SHA-256(witness name || 0x0A || 0x04 || 32-byte public key)[:4]

The signature covers ``cosignature/v1\\ntime <timestamp>\\n`` followed by the
checkpoint's text (every line, final newline included), where the timestamp
is the UNIX time in seconds, in ASCII decimal, when the witness cosigned.
A verifier is configured with the witness's verifier key,
``<name>+<hex key ID>+base64(0x04 || public key)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from quire.signednote import (
    NoteError,
    NoteSignature,
    key_id,
    parse_note,
    parse_verifier_key,
    verifier_key,
)

__all__ = [
    "COSIGNATURE_V1",
    "Cosigned",
    "cosign",
    "cosigned_note",
    "parse_witness_key",
    "verify_cosignature",
    "witness_key",
    "witness_key_id",
]

COSIGNATURE_V1 = 0x04
"""The signature type byte C2SP assigns to cosignature/v1."""
_SIGNATURE_SIZE = 64
_PUBLIC_KEY_SIZE = 32


@dataclass(frozen=True)
class Cosigned:
    """A verified cosignature: who, and when (UNIX seconds)."""

    name: str
    timestamp: int


def witness_key_id(name: str, public_key: Ed25519PublicKey) -> bytes:
    return key_id(name, public_key, COSIGNATURE_V1)


def witness_key(name: str, public_key: Ed25519PublicKey) -> str:
    """The witness's verifier key, the one string a verifier is configured with."""
    return verifier_key(name, public_key, COSIGNATURE_V1)


def parse_witness_key(vkey: str) -> tuple[str, Ed25519PublicKey]:
    """The name and key of a witness's verifier key; its key ID must match."""
    return parse_verifier_key(vkey, COSIGNATURE_V1)


def _message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode("utf-8")


def cosign(text: str, name: str, private_key: Ed25519PrivateKey, timestamp: int) -> str:
    """The cosignature line (newline included) over a checkpoint's ``text``."""
    signature = private_key.sign(_message(text, timestamp))
    line = NoteSignature(
        name,
        witness_key_id(name, private_key.public_key()),
        struct.pack(">Q", timestamp) + signature,
    )
    return line.line()


def cosigned_note(note: bytes, *lines: str) -> bytes:
    """``note`` with cosignature ``lines`` added (each once)."""
    present = note.decode("utf-8")
    for line in lines:
        if line and line not in present:
            present += line
    return present.encode("utf-8")


def verify_cosignature(note: bytes, name: str, public_key: Ed25519PublicKey) -> Cosigned:
    """The witness's verified cosignature on ``note``; NoteError when there is
    none from this key, or one from it fails."""
    parsed = parse_note(note)
    wanted = witness_key_id(name, public_key)
    found: Cosigned | None = None
    for signature in parsed.signatures:
        if signature.name != name or signature.key_id != wanted:
            continue
        if len(signature.signature) != 8 + _SIGNATURE_SIZE:
            raise NoteError("a cosignature has a timestamp and a 64-byte signature")
        (timestamp,) = struct.unpack(">Q", signature.signature[:8])
        try:
            public_key.verify(signature.signature[8:], _message(parsed.text, timestamp))
        except InvalidSignature as error:
            raise NoteError("the witness's cosignature does not verify") from error
        found = Cosigned(name, timestamp)
    if found is None:
        raise NoteError("the checkpoint carries no cosignature from the trusted witness")
    return found
