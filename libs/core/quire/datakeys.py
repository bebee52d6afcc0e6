"""Tenants' data keys: one AES-256 key a tenant, stored only wrapped.

Wrapped keys live beside the blobs they open, under
``<blob root>/.keyring/<tenant>/v<version>.key`` (JSON: format, tenant,
version, the id of the KEK that wrapped it, and the wrapped bytes). Every
service that reads or writes blobs reaches the same ring; none of them can
unwrap a key without a configured KEK (``quire.kek``).

- The first blob of a tenant creates its key (exclusively: of two services
  racing, one key wins and both use it).
- Rotating the KEK (``rewrap``) rewrites each wrapped key under the ring's
  current KEK. The data keys themselves, and so every blob, stay as they are.
- Crypto-shredding (``shred``) leaves a ``SHREDDED`` tombstone and deletes
  the tenant's wrapped keys: every blob of the tenant is unreadable from
  then on (``DATA_SHREDDED``), new writes for it are refused, and the ledger,
  which holds digests and never bytes, still verifies.

Unwrapped keys are cached per process, but every use checks that the wrapped
key still exists (one ``stat``), so a shred takes effect in running
services at their next read or write.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from quire.errors import FailedPrecondition, PermanentError, SystemFailure
from quire.kek import KekRing
from quire.privatefiles import fsync_dir, write_private
from quire.reasons import ReasonCode

__all__ = ["DataKeys", "RewrapReport", "KEYRING_DIR", "FORMAT"]

KEYRING_DIR = ".keyring"
FORMAT = "quire-wrapped-key/1"
TOMBSTONE = "SHREDDED"
DATA_KEY_BYTES = 32
FIRST_VERSION = 1


def _aad(tenant: str, version: int) -> bytes:
    return f"{FORMAT}\0{tenant}\0{version}".encode()


def _shredded() -> FailedPrecondition:
    return FailedPrecondition(ReasonCode.DATA_SHREDDED, "the tenant's data was crypto-shredded")


@dataclass(frozen=True)
class RewrapReport:
    rewrapped: int
    already_current: int
    current_kek: str


class DataKeys:
    def __init__(self, blob_root: Path, keks: KekRing) -> None:
        self.root = blob_root / KEYRING_DIR
        self._keks = keks
        self._cache: dict[tuple[str, int], bytes] = {}
        self._lock = threading.Lock()

    def _dir(self, tenant: str) -> Path:
        if not tenant or "/" in tenant or tenant.startswith("."):
            raise PermanentError(ReasonCode.INVALID_TENANT, "invalid tenant for a data key")
        return self.root / tenant

    def _path(self, tenant: str, version: int) -> Path:
        return self._dir(tenant) / f"v{version}.key"

    def is_shredded(self, tenant: str) -> bool:
        return (self._dir(tenant) / TOMBSTONE).exists()

    def for_writing(self, tenant: str) -> tuple[int, bytes]:
        """The tenant's current key (version, bytes), created on first use."""
        version = FIRST_VERSION
        try:
            return version, self.for_reading(tenant, version)
        except PermanentError as error:
            if error.reason is not ReasonCode.DATA_KEY_UNAVAILABLE:
                raise
        self._create(tenant, version)
        return version, self.for_reading(tenant, version)

    def for_reading(self, tenant: str, version: int) -> bytes:
        """The key a blob of ``tenant`` sealed under ``version`` opens with."""
        path = self._path(tenant, version)
        try:
            os.stat(path)
        except FileNotFoundError:
            with self._lock:
                self._cache.pop((tenant, version), None)
            if self.is_shredded(tenant):
                raise _shredded() from None
            raise PermanentError(ReasonCode.DATA_KEY_UNAVAILABLE, "no such data key") from None
        with self._lock:
            cached = self._cache.get((tenant, version))
        if cached is not None:
            return cached
        key = self._unwrap(tenant, version, path)
        with self._lock:
            self._cache[(tenant, version)] = key
        return key

    def _unwrap(self, tenant: str, version: int, path: Path) -> bytes:
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            raise _shredded() if self.is_shredded(tenant) else _unavailable() from None
        except ValueError:
            raise SystemFailure(ReasonCode.DATA_KEY_UNAVAILABLE, "wrapped key unreadable") from None
        if record.get("format") != FORMAT or record.get("tenant") != tenant:
            raise SystemFailure(ReasonCode.DATA_KEY_UNAVAILABLE, "wrapped key unreadable")
        wrapped = base64.b64decode(record["wrapped"])
        return self._keks.get(str(record["kek"])).unwrap(wrapped, _aad(tenant, version))

    def _record(self, tenant: str, version: int, key: bytes) -> bytes:
        kek = self._keks.current
        return json.dumps(
            {
                "format": FORMAT,
                "tenant": tenant,
                "version": version,
                "kek": kek.kek_id,
                "wrapped": base64.b64encode(kek.wrap(key, _aad(tenant, version))).decode(),
                "wrapped_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
            sort_keys=True,
        ).encode()

    def _create(self, tenant: str, version: int) -> None:
        directory = self._dir(tenant)
        directory.mkdir(parents=True, exist_ok=True)
        if self.is_shredded(tenant):
            raise _shredded()
        record = self._record(tenant, version, os.urandom(DATA_KEY_BYTES))
        write_private(self._path(tenant, version), record, exclusive=True)  # first creator wins
        if self.is_shredded(tenant):  # a shred that raced this creation wins
            self._path(tenant, version).unlink(missing_ok=True)
            raise _shredded()

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def status(self) -> list[dict[str, object]]:
        """Each tenant's keys as stored: version, wrapping KEK, when; no key material."""
        report: list[dict[str, object]] = []
        for tenant in self.tenants():
            keys = []
            for path in sorted(self._dir(tenant).glob("v*.key")):
                record = json.loads(path.read_text())
                keys.append({k: record.get(k) for k in ("version", "kek", "wrapped_at")})
            report.append({"tenant": tenant, "shredded": self.is_shredded(tenant), "keys": keys})
        return report

    def rewrap(self) -> RewrapReport:
        """Wrap every data key under the ring's current KEK; blobs are untouched."""
        current = self._keks.current
        rewrapped = already = 0
        for tenant in self.tenants():
            for path in sorted(self._dir(tenant).glob("v*.key")):
                record = json.loads(path.read_text())
                if record["kek"] == current.kek_id:
                    already += 1
                    continue
                version = int(record["version"])
                key = self._unwrap(tenant, version, path)
                write_private(path, self._record(tenant, version, key))
                if self.is_shredded(tenant):  # never bring a shredded key back
                    path.unlink(missing_ok=True)
                    continue
                rewrapped += 1
        return RewrapReport(rewrapped, already, current.kek_id)

    def shred(self, tenant: str) -> int:
        """Destroy the tenant's data keys; returns how many were destroyed."""
        directory = self._dir(tenant)
        directory.mkdir(parents=True, exist_ok=True)
        write_private(
            directory / TOMBSTONE, datetime.now(UTC).isoformat(timespec="seconds").encode()
        )
        destroyed = 0
        for path in directory.glob("v*.key"):
            path.unlink(missing_ok=True)
            destroyed += 1
        fsync_dir(directory, best_effort=True)
        with self._lock:
            for entry in [k for k in self._cache if k[0] == tenant]:
                del self._cache[entry]
        return destroyed


def _unavailable() -> PermanentError:
    return PermanentError(ReasonCode.DATA_KEY_UNAVAILABLE, "no such data key")
