"""The blob store a process opens: its data keys unwrapped by the configured KEKs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from quire.blobstore import DEFAULT_OWNER, LocalBlobStore
from quire.datakeys import DataKeys
from quire.kek import DEVELOPMENT_RING, KekSettings, load_kek_ring

__all__ = ["open_blob_store", "open_data_keys", "tool_kek_settings"]


def tool_kek_settings(data_dir: Path, env: Mapping[str, str]) -> KekSettings:
    """The KEKs an operator tool (``quire check``, ``quire keys``) uses: those
    configured in ``env``, else the embedded stack's development ring."""
    settings = KekSettings.from_env(env)
    if settings.ring_file is None and not settings.pkcs11_module:
        ring = data_dir / DEVELOPMENT_RING
        if ring.exists():
            return KekSettings(ring_file=ring, development=True)
    return settings


def open_data_keys(blob_root: Path, data_dir: Path, kek: KekSettings) -> DataKeys:
    """The tenants' data keys under ``blob_root``; KekConfigError without a usable KEK."""
    return DataKeys(blob_root, load_kek_ring(kek, data_dir))


def open_blob_store(
    blob_root: Path, data_dir: Path, kek: KekSettings, *, owner: str = DEFAULT_OWNER
) -> LocalBlobStore:
    return LocalBlobStore(blob_root, open_data_keys(blob_root, data_dir, kek), owner=owner)
