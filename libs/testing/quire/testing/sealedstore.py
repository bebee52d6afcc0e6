"""A blob store for unit tests: sealed like production, under a KEK ring
made up on the spot (nothing read from the environment)."""

from __future__ import annotations

import os
from pathlib import Path

from quire.blobstore import DEFAULT_OWNER
from quire.datakeys import DataKeys
from quire.kek import KekRing, SoftwareKek, load_kek_ring
from quire.localblobs import LocalBlobStore


def made_up_ring(kek_id: str = "test-kek") -> KekRing:
    return KekRing(SoftwareKek(kek_id, os.urandom(32)), [])


def sealed_store(root: Path, *, owner: str = DEFAULT_OWNER) -> LocalBlobStore:
    return LocalBlobStore(root, DataKeys(root, made_up_ring()), owner=owner)


def stack_store(data_dir: Path) -> LocalBlobStore:
    """The local blob store of an embedded stack's data directory, opened as
    an operator tool would (its development KEK ring)."""
    from quire.storage import tool_kek_settings

    root = data_dir / "blobs"
    keks = load_kek_ring(tool_kek_settings(data_dir, {}), data_dir)
    return LocalBlobStore(root, DataKeys(root, keks))


def plaintext(data_dir: Path, key: str) -> bytes:
    """The plaintext of blob ``key`` of an embedded stack (unchecked digest)."""
    return b"".join(stack_store(data_dir).read_plain(key))
