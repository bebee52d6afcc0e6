"""What an upload declares before its first byte: checks that need no settings.

Admission's upload gate makes them on the stream's header; the HTTP gateway
makes them on the path and ``Content-Length`` before it opens the stream, so
that an upload refused on its declaration alone is refused before any body
moves (and with the same reason code either way).
"""

from __future__ import annotations

import re

from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode

__all__ = ["SHA256_HEX", "check_declared_digest", "check_declared_size"]

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
"""A sha256 digest as Quire names sources: 64 lower-case hex digits."""


def check_declared_digest(sha256: str, field: str) -> None:
    """Refuse (DIGEST_MISMATCH) a digest that cannot be a sha256."""
    if not SHA256_HEX.match(sha256):
        raise InvalidInput(
            ReasonCode.DIGEST_MISMATCH,
            "sha256 must be 64 lower-case hex digits",
            (FieldViolation(field, "not a sha256 digest"),),
        )


def check_declared_size(size_bytes: int, field: str) -> None:
    """Refuse (SIZE_BELOW_DECLARATION) an upload declared empty or negative."""
    if size_bytes <= 0:
        raise InvalidInput(
            ReasonCode.SIZE_BELOW_DECLARATION,
            "declared size must be positive",
            (FieldViolation(field, "must be positive"),),
        )
