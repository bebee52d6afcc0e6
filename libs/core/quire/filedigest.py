"""A file's sha256 and size, read in chunks.

Its own module, with nothing else imported, so the sandbox workers that check
a document's digest (assembler, signer) load it without the blob store."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["READ_CHUNK", "sha256_file"]

READ_CHUNK = 1024 * 1024
"""How much of a file is read at a time (the blob store reads by the same)."""


def sha256_file(path: str | Path) -> tuple[str, int]:
    """Digest and size of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
