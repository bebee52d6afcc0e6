"""C2SP tlog checkpoints (https://c2sp.org/tlog-checkpoint): a log's tree head
written as signed-note text.

    <origin>
    <tree size, ASCII decimal, no leading zeros>
    <base64 of the RFC 6962 / RFC 9162 root hash>
    [<extension line> ...]

Every line ends with a newline, so the text is exactly what the signature
covers. The origin names the log (for Quire, one tenant's ledger); the key
name of the log's signature should be the origin too, which keeps one tenant's
checkpoint from passing as another's even when one key signs every tenant.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from quire.signednote import NoteError, sign_note, verify_note

__all__ = ["Checkpoint", "open_checkpoint", "sign_checkpoint"]

_HASH_SIZE = 32
_MAX_SIZE = 2**64 - 1
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Checkpoint:
    """One tree head: which log, how many leaves, and their Merkle root."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()
    """Opaque extra lines; the spec discourages them, as monitors cannot audit them."""

    def __post_init__(self) -> None:
        for line in (self.origin, *self.extensions):
            if not line or any(ch < " " for ch in line):
                raise NoteError("checkpoint lines must be non-empty, without control characters")
        if isinstance(self.size, bool) or not 0 <= self.size <= _MAX_SIZE:
            raise NoteError("a tree size is an unsigned 64-bit integer")
        if len(self.root_hash) != _HASH_SIZE:
            raise NoteError(f"a root hash has {_HASH_SIZE} bytes")

    def text(self) -> str:
        """The note text: one line each, final newline included."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode("ascii")]
        return "".join(line + "\n" for line in (*lines, *self.extensions))

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a checkpoint's note text, refusing anything not written canonically."""
        if not text.endswith("\n"):
            raise NoteError("checkpoint text must end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3 or not all(lines):
            raise NoteError("a checkpoint has at least three non-empty lines")
        origin, size, root_b64, *extensions = lines
        if not _DECIMAL.fullmatch(size):
            raise NoteError("a tree size is decimal, without leading zeros")
        try:
            root_hash = base64.b64decode(root_b64, validate=True)
        except binascii.Error as error:
            raise NoteError("a root hash is base64") from error
        if base64.b64encode(root_hash).decode("ascii") != root_b64:
            raise NoteError("a root hash is written in canonical base64")
        return cls(origin, int(size), root_hash, tuple(extensions))


def sign_checkpoint(
    checkpoint: Checkpoint, private_key: Ed25519PrivateKey, *, name: str | None = None
) -> bytes:
    """The checkpoint as a signed note, under key ``name`` (default: its origin)."""
    return sign_note(checkpoint.text(), name or checkpoint.origin, private_key)


def open_checkpoint(
    data: bytes, origin: str, public_key: Ed25519PublicKey, *, name: str | None = None
) -> Checkpoint:
    """Verify a signed checkpoint from the log ``origin`` and read it.

    The signature must come from ``public_key`` under ``name`` (default: the
    origin), and the origin line must be the expected one: a valid checkpoint
    of another log proves nothing about this one. Raises ``NoteError``.
    """
    note = verify_note(data, name or origin, public_key)
    checkpoint = Checkpoint.parse(note.text)
    if checkpoint.origin != origin:
        raise NoteError("the checkpoint is for another log")
    return checkpoint
