"""C2SP signed notes with Ed25519 signatures (https://c2sp.org/signed-note).

A checkpoint signed over a language runtime's JSON output can only be checked
with that runtime's serializer. A signed note is UTF-8 text signed exactly as
it is written, in a format several independent implementations already read
(golang.org/x/mod/sumdb/note, transparency-dev, sigsum), so the evidence can
be verified without Quire's code.

    <text, ending in a newline>
    <blank line>
    — <key name> base64(key ID (4 bytes) || Ed25519 signature (64 bytes))

    key ID = SHA-256(key name || 0x0A || 0x01 || 32-byte public key)[:4]

The signature covers the text's UTF-8 bytes, final newline included, blank
line excluded. Parsing follows the reference implementation's strictness.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = [
    "ED25519",
    "MAX_SIGNATURES",
    "Note",
    "NoteError",
    "NoteSignature",
    "key_id",
    "parse_note",
    "parse_verifier_key",
    "sign_note",
    "verifier_key",
    "verify_note",
]

ED25519 = 0x01
"""The signature type byte the spec assigns to Ed25519."""

MAX_SIGNATURES = 100
"""More signature lines than this make a note malformed (the spec asks
verifiers to accept at least 16; the Go reference stops at 100)."""

_DASH = "\u2014 "  # em dash, space: the start of every signature line
_PUBLIC_KEY_SIZE = 32


class NoteError(ValueError):
    """A note is malformed, or no trusted signature on it verifies."""


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: who claims to have signed, and the signature bytes."""

    name: str
    key_id: bytes
    """The 4-byte key ID that, with the name, selects the verifying key."""
    signature: bytes
    """The algorithm's signature, without the key ID."""

    def line(self) -> str:
        """The signature line, newline included."""
        encoded = base64.b64encode(self.key_id + self.signature).decode("ascii")
        return f"{_DASH}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Note:
    """A parsed note: its text (final newline included) and its signatures,
    none of them verified yet unless ``verify_note`` returned it."""

    text: str
    signatures: tuple[NoteSignature, ...]


def key_id(name: str, public_key: Ed25519PublicKey, kind: int = ED25519) -> bytes:
    """The 4-byte key ID of an Ed25519 key under ``name``, for signatures of
    type ``kind`` (``ED25519``; a witness's cosignatures have their own)."""
    _check_name(name)
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + _raw(public_key)).digest()[
        :4
    ]


def verifier_key(name: str, public_key: Ed25519PublicKey, kind: int = ED25519) -> str:
    """The spec's text form of a public key, ``<name>+<hex key ID>+<base64>``,
    the one string a verifier needs to be configured with."""
    material = base64.b64encode(bytes([kind]) + _raw(public_key)).decode("ascii")
    return f"{name}+{key_id(name, public_key, kind).hex()}+{material}"


def parse_verifier_key(vkey: str, kind: int = ED25519) -> tuple[str, Ed25519PublicKey]:
    """The name and Ed25519 key of a verifier key of type ``kind``; its key ID must match."""
    name, _, rest = vkey.strip().partition("+")
    hex_id, _, material_b64 = rest.partition("+")
    try:
        material = base64.b64decode(material_b64, validate=True)
        claimed = bytes.fromhex(hex_id) if len(hex_id) == 8 else b""
    except (binascii.Error, ValueError) as error:
        raise NoteError("malformed verifier key") from error
    if len(claimed) != 4 or len(material) != 1 + _PUBLIC_KEY_SIZE or material[0] != kind:
        raise NoteError("not an Ed25519 verifier key of this type")
    public_key = Ed25519PublicKey.from_public_bytes(material[1:])
    if not _valid_name(name) or key_id(name, public_key, kind) != claimed:
        raise NoteError("verifier key name or key ID does not match its key")
    return name, public_key


def sign_note(text: str, name: str, private_key: Ed25519PrivateKey) -> bytes:
    """The signed note: ``text``, a blank line, and one Ed25519 signature line."""
    _check_text(text)
    _check_name(name)
    try:
        message = text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise NoteError("a note's text must be valid Unicode") from error
    signature = NoteSignature(
        name, key_id(name, private_key.public_key()), private_key.sign(message)
    )
    return message + b"\n" + signature.line().encode("utf-8")


def parse_note(data: bytes) -> Note:
    """Split a note into its text and signature lines, verifying nothing."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NoteError("a note must be UTF-8") from error
    if any(ch < " " and ch != "\n" for ch in decoded):
        raise NoteError("a note must not contain control characters other than newline")
    split = decoded.rfind("\n\n")
    if split < 0:
        raise NoteError("a note needs a blank line before its signatures")
    text, block = decoded[: split + 1], decoded[split + 2 :]
    if not block.endswith("\n"):
        raise NoteError("a note must end with a signature line and a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"a note may carry at most {MAX_SIGNATURES} signatures")
    return Note(text, tuple(_parse_signature_line(line) for line in lines))


def verify_note(data: bytes, name: str, public_key: Ed25519PublicKey) -> Note:
    """Parse ``data`` and check it against one trusted key.

    As the spec requires: lines from other keys (another name or key ID) are
    ignored; every line from this key must verify; and at least one must.
    Returns the note; raises ``NoteError``.
    """
    note = parse_note(data)
    expected = key_id(name, public_key)
    ours = [s for s in note.signatures if s.name == name and s.key_id == expected]
    if not ours:
        raise NoteError(f"no signature by the trusted key {name}")
    message = note.text.encode("utf-8")
    for signature in ours:
        try:
            public_key.verify(signature.signature, message)
        except InvalidSignature as error:
            raise NoteError(f"a signature by {name} does not verify") from error
    return note


def _parse_signature_line(line: str) -> NoteSignature:
    if not line.startswith(_DASH):
        raise NoteError("a signature line must start with an em dash and a space")
    name, _, encoded = line[len(_DASH) :].partition(" ")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as error:
        raise NoteError("a signature is not base64") from error
    if not _valid_name(name) or not encoded or len(raw) < 5:
        raise NoteError("malformed signature line")
    return NoteSignature(name, raw[:4], raw[4:])


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


def _check_name(name: str) -> None:
    if not _valid_name(name) or any(ch < " " for ch in name):
        raise NoteError("a key name must be non-empty, without spaces or '+'")


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("a note's text must end with a newline")
    if any(ch < " " and ch != "\n" for ch in text):
        raise NoteError("a note's text must not contain control characters other than newline")


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
