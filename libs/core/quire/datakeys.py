"""Tenants' data keys: one AES-256 key a tenant, stored only wrapped.

Wrapped keys (JSON: format, tenant, version, the id of the KEK that wrapped
it, and the wrapped bytes) live in a ``WrappedKeyRing`` that every service
reaching the blobs reaches too: with the local blob store, files beside the
blobs under ``<blob root>/.keyring/<tenant>/v<version>.key``
(``DirectoryKeyRing``); with the NATS blob store, a replicated key-value
bucket (``quire.natskeyring``). None of them can unwrap a key without a
configured KEK (``quire.kek``).

- The first blob of a tenant creates its key (exclusively: of two services
  racing, one key wins and both use it).
- Rotating the KEK (``rewrap``) rewrites each wrapped key under the ring's
  current KEK. The data keys themselves, and so every blob, stay as they are.
- Crypto-shredding (``shred``) leaves a ``SHREDDED`` tombstone and deletes
  the tenant's wrapped keys (with the NATS backend only the ``keeper``
  login may): every blob of the tenant is unreadable from
  then on (``DATA_SHREDDED``), new writes for it are refused, and the ledger,
  which holds digests and never bytes, still verifies.

Unwrapped keys are cached per process, but every use checks that the wrapped
key still exists (one ``stat``, or one read of the bucket), so a shred takes
effect in running services at their next read or write.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from quire.errors import FailedPrecondition, PermanentError, SystemFailure
from quire.kek import KekRing
from quire.privatefiles import fsync_dir, write_private
from quire.reasons import ReasonCode

__all__ = [
    "DataKeys",
    "DirectoryKeyRing",
    "RewrapReport",
    "WrappedKeyRing",
    "KEYRING_DIR",
    "FORMAT",
]

KEYRING_DIR = ".keyring"
FORMAT = "quire-wrapped-key/1"
TOMBSTONE = "SHREDDED"
DATA_KEY_BYTES = 32
FIRST_VERSION = 1
_SHRED_PASSES = 5


def _aad(tenant: str, version: int) -> bytes:
    return f"{FORMAT}\0{tenant}\0{version}".encode()


def _shredded() -> FailedPrecondition:
    return FailedPrecondition(ReasonCode.DATA_SHREDDED, "the tenant's data was crypto-shredded")


@dataclass(frozen=True)
class RewrapReport:
    rewrapped: int
    already_current: int
    current_kek: str


class WrappedKeyRing(Protocol):
    """Where wrapped data keys are kept; every replica must see the same ring.

    ``create`` is create-once: of several callers racing for one key, exactly
    one gets True and the others leave it untouched.
    """

    def exists(self, tenant: str, version: int) -> bool: ...
    def read(self, tenant: str, version: int) -> bytes | None: ...
    def create(self, tenant: str, version: int, record: bytes) -> bool: ...
    def replace(self, tenant: str, version: int, record: bytes) -> None: ...
    def remove(self, tenant: str, version: int) -> None: ...
    def versions(self, tenant: str) -> list[int]: ...
    def tenants(self) -> list[str]: ...
    def is_shredded(self, tenant: str) -> bool: ...
    def mark_shredded(self, tenant: str, stamp: bytes) -> None: ...


def check_tenant(tenant: str) -> str:
    if not tenant or "/" in tenant or tenant.startswith("."):
        raise PermanentError(ReasonCode.INVALID_TENANT, "invalid tenant for a data key")
    return tenant


class DirectoryKeyRing:
    """Wrapped keys as files: ``<root>/<tenant>/v<version>.key`` and a
    ``SHREDDED`` tombstone (the local blob store's ring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, tenant: str) -> Path:
        return self.root / check_tenant(tenant)

    def _path(self, tenant: str, version: int) -> Path:
        return self._dir(tenant) / f"v{version}.key"

    def exists(self, tenant: str, version: int) -> bool:
        try:
            os.stat(self._path(tenant, version))
        except FileNotFoundError:
            return False
        return True

    def read(self, tenant: str, version: int) -> bytes | None:
        try:
            return self._path(tenant, version).read_bytes()
        except FileNotFoundError:
            return None

    def create(self, tenant: str, version: int, record: bytes) -> bool:
        self._dir(tenant).mkdir(parents=True, exist_ok=True)
        return write_private(self._path(tenant, version), record, exclusive=True)

    def replace(self, tenant: str, version: int, record: bytes) -> None:
        write_private(self._path(tenant, version), record)

    def remove(self, tenant: str, version: int) -> None:
        self._path(tenant, version).unlink(missing_ok=True)
        fsync_dir(self._dir(tenant), best_effort=True)

    def versions(self, tenant: str) -> list[int]:
        found = (p.stem.removeprefix("v") for p in self._dir(tenant).glob("v*.key"))
        return sorted(int(v) for v in found if v.isdigit())

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def is_shredded(self, tenant: str) -> bool:
        return (self._dir(tenant) / TOMBSTONE).exists()

    def mark_shredded(self, tenant: str, stamp: bytes) -> None:
        directory = self._dir(tenant)
        directory.mkdir(parents=True, exist_ok=True)
        write_private(directory / TOMBSTONE, stamp)


class DataKeys:
    """The tenants' data keys in ``ring`` (a blob root's directory ring when
    given a path), unwrapped with the KEKs of ``keks``."""

    def __init__(self, ring: WrappedKeyRing | Path, keks: KekRing) -> None:
        self.ring: WrappedKeyRing = (
            DirectoryKeyRing(ring / KEYRING_DIR) if isinstance(ring, Path) else ring
        )
        self._keks = keks
        self._cache: dict[tuple[str, int], bytes] = {}
        self._lock = threading.Lock()

    def is_shredded(self, tenant: str) -> bool:
        return self.ring.is_shredded(check_tenant(tenant))

    def check_takes_work(self, tenant: str) -> None:
        """FAILED_PRECONDITION ``TENANT_SHREDDED`` once ``tenant`` was shredded:
        a job would only fail later, on bytes nobody can read any more.
        Otherwise the tenant's data key is made if it is not yet: admission,
        which calls this before taking any work, is the one service allowed to
        create data keys (``quire.natsauth``); later stages only read them."""
        if self.is_shredded(tenant):
            raise FailedPrecondition(
                ReasonCode.TENANT_SHREDDED,
                "the tenant's data was crypto-shredded: it takes no new work",
            )
        self.for_writing(tenant)

    def for_writing(self, tenant: str) -> tuple[int, bytes]:
        """The tenant's current key (version, bytes), created on first use.
        Never for a shredded tenant, even when a key was created after the
        shred erased the others (the tombstone is read first)."""
        version = FIRST_VERSION
        if self.is_shredded(tenant):
            raise _shredded()
        try:
            return version, self.for_reading(tenant, version)
        except PermanentError as error:
            if error.reason is not ReasonCode.DATA_KEY_UNAVAILABLE:
                raise
        self._create(tenant, version)
        return version, self.for_reading(tenant, version)

    def for_reading(self, tenant: str, version: int) -> bytes:
        """The key a blob of ``tenant`` sealed under ``version`` opens with."""
        if not self.ring.exists(check_tenant(tenant), version):
            with self._lock:
                self._cache.pop((tenant, version), None)
            if self.is_shredded(tenant):
                raise _shredded()
            raise _unavailable()
        with self._lock:
            cached = self._cache.get((tenant, version))
        if cached is not None:
            return cached
        key = self._unwrap(tenant, version)
        with self._lock:
            self._cache[(tenant, version)] = key
        return key

    def _load(self, tenant: str, version: int) -> dict[str, object]:
        data = self.ring.read(tenant, version)
        if data is None:
            raise _shredded() if self.is_shredded(tenant) else _unavailable()
        try:
            record = json.loads(data)
        except ValueError:
            raise SystemFailure(ReasonCode.DATA_KEY_UNAVAILABLE, "wrapped key unreadable") from None
        if not isinstance(record, dict):
            raise SystemFailure(ReasonCode.DATA_KEY_UNAVAILABLE, "wrapped key unreadable")
        return record

    def _unwrap(self, tenant: str, version: int, record: dict[str, object] | None = None) -> bytes:
        record = self._load(tenant, version) if record is None else record
        if record.get("format") != FORMAT or record.get("tenant") != tenant:
            raise SystemFailure(ReasonCode.DATA_KEY_UNAVAILABLE, "wrapped key unreadable")
        wrapped = base64.b64decode(str(record["wrapped"]))
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
        if self.is_shredded(tenant):
            raise _shredded()
        record = self._record(tenant, version, os.urandom(DATA_KEY_BYTES))
        self.ring.create(tenant, version, record)  # first creator wins
        if self.is_shredded(tenant):
            # A shred that raced this creation wins: the key is never used,
            # and the shred, which erases until none is left, erases it.
            raise _shredded()

    def tenants(self) -> list[str]:
        return self.ring.tenants()

    def status(self) -> list[dict[str, object]]:
        """Each tenant's keys as stored: version, wrapping KEK, when; no key material."""
        report: list[dict[str, object]] = []
        for tenant in self.tenants():
            keys = []
            for version in self.ring.versions(tenant):
                record = self._load(tenant, version)
                keys.append({k: record.get(k) for k in ("version", "kek", "wrapped_at")})
            report.append({"tenant": tenant, "shredded": self.is_shredded(tenant), "keys": keys})
        return report

    def rewrap(self) -> RewrapReport:
        """Wrap every data key under the ring's current KEK; blobs are untouched."""
        current = self._keks.current
        rewrapped = already = 0
        for tenant in self.tenants():
            for version in self.ring.versions(tenant):
                record = self._load(tenant, version)
                if record["kek"] == current.kek_id:
                    already += 1
                    continue
                key = self._unwrap(tenant, version, record)
                self.ring.replace(tenant, version, self._record(tenant, version, key))
                if self.is_shredded(tenant):  # never bring a shredded key back
                    self.ring.remove(tenant, version)
                    continue
                rewrapped += 1
        return RewrapReport(rewrapped, already, current.kek_id)

    def shred(self, tenant: str) -> int:
        """Destroy the tenant's data keys; returns how many were destroyed."""
        check_tenant(tenant)
        self.ring.mark_shredded(tenant, datetime.now(UTC).isoformat(timespec="seconds").encode())
        destroyed = 0
        # Again until none is left: a key created by a writer that had not
        # yet seen the tombstone is erased too.
        for _ in range(_SHRED_PASSES):
            versions = self.ring.versions(tenant)
            if not versions:
                break
            for version in versions:
                self.ring.remove(tenant, version)
                destroyed += 1
        with self._lock:
            for entry in [k for k in self._cache if k[0] == tenant]:
                del self._cache[entry]
        return destroyed


def _unavailable() -> PermanentError:
    return PermanentError(ReasonCode.DATA_KEY_UNAVAILABLE, "no such data key")
