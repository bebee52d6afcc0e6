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

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from quire.signednote import NoteError, NoteSignature, parse_note

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


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def witness_key_id(name: str, public_key: Ed25519PublicKey) -> bytes:
    return hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_V1]) + _raw(public_key)
    ).digest()[:4]


def witness_key(name: str, public_key: Ed25519PublicKey) -> str:
    """The witness's verifier key, the one string a verifier is configured with."""
    material = base64.b64encode(bytes([COSIGNATURE_V1]) + _raw(public_key)).decode("ascii")
    return f"{name}+{witness_key_id(name, public_key).hex()}+{material}"


def parse_witness_key(vkey: str) -> tuple[str, Ed25519PublicKey]:
    """The name and key of a witness's verifier key; its key ID must match."""
    name, _, rest = vkey.strip().partition("+")
    hex_id, _, material_b64 = rest.partition("+")
    try:
        material = base64.b64decode(material_b64, validate=True)
        claimed = bytes.fromhex(hex_id) if len(hex_id) == 8 else b""
    except (binascii.Error, ValueError) as error:
        raise NoteError("malformed witness key") from error
    if (
        not name
        or len(claimed) != 4
        or len(material) != 1 + _PUBLIC_KEY_SIZE
        or material[0] != COSIGNATURE_V1
    ):
        raise NoteError("not a cosignature/v1 witness key")
    public_key = Ed25519PublicKey.from_public_bytes(material[1:])
    if witness_key_id(name, public_key) != claimed:
        raise NoteError("witness key name or key ID does not match its key")
    return name, public_key


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
