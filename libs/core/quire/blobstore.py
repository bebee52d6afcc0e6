"""Blob storage: content bound to digests, sealed under the tenant's data
key, written to a temporary key and promoted atomically.

Every stored blob is sealed (``quire.sealing``: AES-256-GCM in segments)
under its tenant's data key (``quire.datakeys``); the tenant is the second
part of every key (``sources/<tenant>/...``). Digests and sizes are of the
plaintext, so the ledger and evidence do not depend on encryption. Nothing
in the store is plaintext: uploads are sealed as they stream in, a worker's
output is sealed when promoted, and a stage that needs a file (pikepdf opens
paths) gets a decrypted copy in its attempt's private directory
(``materialize``), removed with that directory.

Callers hold a ``BlobStore`` (the port); two backends implement it on
``SealedBlobStore``, which owns what they share: the service's temporary
space, the writer, sealing and opening, digests and plaintext copies.
Writers stream sealed bytes into the temporary space (files created
exclusively), hash while writing, fsync, and then the backend promotes:

- ``LocalBlobStore`` (the embedded default) keeps blobs under one root
  directory, ``<root>/<key>``, and promotes with a rename (or, for keys that
  must never be overwritten, a hard link that fails if the key exists)
  followed by an fsync of the directory.
- ``quire.natsblobs.NatsBlobStore`` keeps them in a replicated JetStream
  object store, for clusters with no shared disk.

Either way a crash leaves at worst a temporary file, never a partial blob
under a real key.

Every temporary entry is named after its owner (``quire.tempspace``), so
usage is counted per service and a dead process's leftovers can be swept.
Storage errors on the write path are classified once, here: storage that
refuses writes (read-only, permission denied) is a ``SystemFailure``
(``STORAGE_FAILED``: the job ends FAILED, retrying cannot help); anything
else (I/O error, disk or quota full, ...) is a ``TransientError``
(``STORAGE_UNAVAILABLE``: retried with backoff). A full disk or quota is
transient because space comes back as work finishes and leftovers are swept.

For the tests, with ``QUIRE_FAULTS_DIR`` set, a file ``storage.transient``
(EIO) or ``storage.permanent`` (EROFS) in that directory makes every blob
write fail; without the variable nothing is checked.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol

from quire.datakeys import KEYRING_DIR, DataKeys
from quire.errors import InvalidInput, PermanentError, QuireError, SystemFailure, TransientError
from quire.filedigest import READ_CHUNK, sha256_file
from quire.reasons import ReasonCode
from quire.sealing import Sealer, open_sealed, read_header
from quire.tempspace import temp_prefix

__all__ = [
    "BlobStore",
    "BlobWriter",
    "SealedBlobStore",
    "check_key",
    "DEFAULT_OWNER",
    "sha256_file",
    "source_key",
    "assembled_key",
    "signed_key",
    "storage_error",
    "StorageWrite",
    "tenant_of_key",
]

DEFAULT_OWNER = "quire"
"""The temporary-space owner of a store built without one (tools, tests)."""
REFUSING_WRITES = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
"""Storage that answers these will not take writes until someone fixes it."""


def storage_error(error: OSError, message: str) -> QuireError:
    """The Quire error for a failed storage write (see the module docstring)."""
    if error.errno in REFUSING_WRITES:
        return SystemFailure(ReasonCode.STORAGE_FAILED, message)
    return TransientError(ReasonCode.STORAGE_UNAVAILABLE, message)


def source_key(tenant: str, sha256: str) -> str:
    return f"sources/{tenant}/{sha256}"


def normalized_key(tenant: str, sha256: str) -> str:
    """A repaired source's clean rewrite (the validator's, by its digest)."""
    return f"normalized/{tenant}/{sha256}"


def fetched_key(tenant: str, sha256: str) -> str:
    """The pinned bytes of a source named by reference (the validator's, by
    the digest of what it pinned)."""
    return f"fetched/{tenant}/{sha256}"


def assembled_key(tenant: str, sha256: str) -> str:
    return f"assembled/{tenant}/{sha256}"


def signed_key(tenant: str, job: str) -> str:
    """The one signed artifact of ``job`` (``jobs/{id}``)."""
    return f"signed/{tenant}/{job.removeprefix('jobs/')}.pdf"


def tenant_of_key(key: str) -> str:
    """The tenant a blob key belongs to: ``<kind>/<tenant>/...``."""
    parts = key.split("/")
    if len(parts) < 3 or not parts[1]:
        raise PermanentError(ReasonCode.INTERNAL, "invalid blob key")
    return parts[1]


def check_key(key: str) -> str:
    """``key`` if it names a blob: relative, no ``..``, not the temporary
    space or the key ring."""
    if key.startswith(("/", ".tmp", KEYRING_DIR)) or ".." in key.split("/") or not key:
        raise PermanentError(ReasonCode.INTERNAL, "invalid blob key")
    return key


class StorageWrite:
    """Turns an OSError raised inside it into the classified storage error."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        _type: type[BaseException] | None,
        error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if isinstance(error, OSError):
            raise storage_error(error, self._message) from error


class BlobWriter:
    """A temporary blob of ``tenant`` being written (sealed as it streams);
    promote it or it is removed on close. ``sha256`` and ``size`` are of the
    plaintext."""

    def __init__(self, store: SealedBlobStore, tenant: str, max_bytes: int | None) -> None:
        self._store = store
        self.tenant = tenant
        self._max_bytes = max_bytes
        # A tenant's first write makes its data key, stored beside the blobs
        # (or in a bucket): on a full disk that fails like the blob would.
        with StorageWrite("data key not stored"):
            version, key = store.keys.for_writing(tenant)
        self._sealer = Sealer(tenant, version, key)
        fd, self.path = store.make_temp_file("write")
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.size = 0
        self._done = False

    def write(self, data: bytes) -> None:
        if self._max_bytes is not None and self.size + len(data) > self._max_bytes:
            raise InvalidInput(ReasonCode.SIZE_EXCEEDS_DECLARATION, "more bytes than declared")
        with StorageWrite("blob write failed"):
            self._file.write(self._sealer.update(data))
        self._hash.update(data)
        self.size += len(data)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def finish(self) -> None:
        """Seal the rest, flush and fsync; after this the digest and size are final."""
        with StorageWrite("blob write failed"):
            self._file.write(self._sealer.finish())
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def promote(self, key: str, *, exclusive: bool = False, sync_directory: bool = True) -> bool:
        """Move the blob under ``key``. Returns False when ``exclusive`` and the key exists.
        ``sync_directory=False`` leaves the move's durability to the caller's
        ``sync_directories`` (several blobs kept together, one fsync)."""
        if tenant_of_key(key) != self.tenant:
            raise PermanentError(ReasonCode.INTERNAL, "blob key of another tenant")
        if not self._file.closed:
            self.finish()
        created = self._store.promote_sealed(
            self.path, key, exclusive=exclusive, sync_directory=sync_directory
        )
        self._done = True
        return created

    def discard(self) -> None:
        # Best effort: on a failing disk even close() may raise (buffered bytes).
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        self._done = True

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if not self._done:
            self.discard()


class BlobStore(Protocol):
    """What services and tools need from blob storage (the port).

    Keys are ``<kind>/<tenant>/...``; digests and sizes are of the plaintext.
    Every read is checked (sealing authenticates each segment; callers pass
    the digest they expect); a promotion is atomic, and ``exclusive`` never
    replaces a blob. Temporary entries live in ``tmp_dir`` on this host's
    disk, named after ``owner`` (``quire.tempspace``), whatever the backend.
    """

    @property
    def keys(self) -> DataKeys:
        """The tenants' data keys (admission asks for one before taking an upload)."""
        ...

    @property
    def owner(self) -> str: ...

    @property
    def tmp_dir(self) -> Path:
        """This process's temporary space: measured, budgeted and swept by ``TempKeeper``."""
        ...

    def owned_by(self, owner: str) -> BlobStore: ...
    def writer(self, tenant: str, *, max_bytes: int | None = None) -> BlobWriter: ...
    def promote_file(self, temp: Path, key: str, *, exclusive: bool = False) -> bool: ...
    def promote_bytes(self, data: bytes, key: str, *, exclusive: bool = False) -> bool: ...
    def sync_directories(self, keys: list[str]) -> None: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def list_keys(self, prefix: str) -> list[str]: ...
    def read_plain(self, key: str) -> Iterator[bytes]: ...
    def read_verified(self, key: str, sha256: str, chunk: int = READ_CHUNK) -> Iterator[bytes]: ...
    def digest(self, key: str) -> tuple[str, int]: ...
    def materialize(self, key: str, sha256: str, directory: Path) -> Path: ...
    def plain_bytes(self, key: str, sha256: str, limit: int) -> bytes | None: ...
    def new_temp(self, kind: str = "part") -> Path: ...
    def new_temp_dir(self, kind: str = "attempt") -> Path: ...
    def close(self) -> None: ...


class SealedBlobStore:
    """What both backends share: the temporary space, writers, sealing and
    opening, digests and plaintext copies. A backend adds where sealed bytes
    live: ``promote_sealed``, ``open_sealed``, ``exists``, ``delete``,
    ``list_keys``."""

    def __init__(self, keys: DataKeys, tmp_dir: Path, *, owner: str = DEFAULT_OWNER) -> None:
        self.keys = keys
        self.owner = owner
        self.tmp_dir = tmp_dir
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def promote_sealed(
        self, temp: Path, key: str, *, exclusive: bool = False, sync_directory: bool = True
    ) -> bool:
        """Promote a finished sealed temporary file (``BlobWriter.finish``
        flushed and fsynced it); it is gone afterwards. With
        ``sync_directory=False`` the promotion is durable only once
        ``sync_directories`` has been called with its key."""
        raise NotImplementedError

    def sync_directories(self, keys: list[str]) -> None:
        """Make the promotions of ``keys`` durable (each directory they are
        in fsynced once); nothing for a backend whose writes are durable
        when acknowledged."""

    def open_sealed(self, key: str) -> AbstractContextManager[BinaryIO]:
        """The sealed bytes of ``key``, readable from the start; SOURCE_MISSING
        if there is no such blob."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the backend's connections (nothing for a directory)."""

    def writer(self, tenant: str, *, max_bytes: int | None = None) -> BlobWriter:
        return BlobWriter(self, tenant, max_bytes)

    def make_temp_file(self, kind: str) -> tuple[int, Path]:
        """An exclusively created temporary file, open for writing: (fd, path)."""
        with StorageWrite("temporary file not created"):
            fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix=temp_prefix(self.owner, kind))
        return fd, Path(name)

    def new_temp(self, kind: str = "part") -> Path:
        """An empty, exclusively created temporary file for a worker process to fill."""
        fd, path = self.make_temp_file(kind)
        os.close(fd)
        return path

    def new_temp_dir(self, kind: str = "attempt") -> Path:
        """A private (0700), exclusively created temporary directory for one attempt."""
        with StorageWrite("temporary directory not created"):
            name = tempfile.mkdtemp(dir=self.tmp_dir, prefix=temp_prefix(self.owner, kind))
        return Path(name)

    def promote_file(self, temp: Path, key: str, *, exclusive: bool = False) -> bool:
        """Seal a finished plaintext file (a worker's output) and promote it
        under ``key`` (see ``BlobWriter.promote``).

        The plaintext file is gone afterwards, whatever the outcome.
        """
        try:
            with self.writer(tenant_of_key(key)) as writer, open(temp, "rb") as plain:
                while data := plain.read(READ_CHUNK):
                    writer.write(data)
                return writer.promote(key, exclusive=exclusive)
        finally:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)

    def promote_bytes(self, data: bytes, key: str, *, exclusive: bool = False) -> bool:
        """Seal ``data`` (a worker's output held in memory) and promote it
        under ``key`` (see ``BlobWriter.promote``)."""
        with self.writer(tenant_of_key(key)) as writer:
            writer.write(data)
            return writer.promote(key, exclusive=exclusive)

    def read_plain(self, key: str) -> Iterator[bytes]:
        """Yield the blob's plaintext in segments, each authenticated before
        it is yielded (the digest is the caller's to check).

        SOURCE_MISSING when there is no such blob, DATA_SHREDDED when its
        tenant's key was destroyed, DIGEST_MISMATCH when it does not open.
        """
        with self.open_sealed(check_key(key)) as handle:
            header = read_header(handle)
            if header.tenant != tenant_of_key(key):
                raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored blob of another tenant")
            key_bytes = self.keys.for_reading(header.tenant, header.key_version)
            yield from open_sealed(handle, header, key_bytes)

    def read_verified(self, key: str, sha256: str, chunk: int = READ_CHUNK) -> Iterator[bytes]:
        """Yield the blob's plaintext in pieces of up to ``chunk`` bytes;
        raise DIGEST_MISMATCH after the last one if the digest differs."""
        digest = hashlib.sha256()
        pending = bytearray()
        for data in self.read_plain(key):
            digest.update(data)
            pending += data
            while len(pending) >= chunk:
                yield bytes(pending[:chunk])
                del pending[:chunk]
        if pending:
            yield bytes(pending)
        if digest.hexdigest() != sha256:
            raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored blob does not match digest")

    def digest(self, key: str) -> tuple[str, int]:
        """The sha256 and size of the blob's plaintext."""
        digest = hashlib.sha256()
        size = 0
        for data in self.read_plain(key):
            digest.update(data)
            size += len(data)
        return digest.hexdigest(), size

    def plain_bytes(self, key: str, sha256: str, limit: int) -> bytes | None:
        """The blob's plaintext, checked against ``sha256``, if it is at most
        ``limit`` bytes; None for a larger one (read no further than that)."""
        pieces: list[bytes] = []
        size = 0
        for data in self.read_verified(key, sha256):
            size += len(data)
            if size > limit:
                return None
            pieces.append(data)
        return b"".join(pieces)

    def materialize(self, key: str, sha256: str, directory: Path) -> Path:
        """A plaintext copy of the blob in ``directory`` (an attempt's private
        directory), checked against ``sha256``; the caller removes it."""
        with StorageWrite("plaintext copy not created"):
            fd, name = tempfile.mkstemp(dir=directory, prefix="plain-")
        path = Path(name)
        try:
            with StorageWrite("plaintext copy not written"), os.fdopen(fd, "wb") as out:
                for data in self.read_verified(key, sha256):
                    out.write(data)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path
