"""The NATS blob backend: blobs in a replicated JetStream object store, for
clusters where replicas share no disk.

Objects use the object store's own layout: chunks of 128 KiB on
``$O.<bucket>.C.<nuid>``, then one meta message on
``$O.<bucket>.M.<base64url(key)>`` naming the chunks, their count, size and
the SHA-256 of the stored bytes. What is stored is the sealed blob, exactly
as the local backend would keep it (``quire.sealing``).

- **Create-only.** A key's object is its *first* meta message; a later one
  (a racing replica's, or a stolen login's attempt to overwrite or mark it
  deleted) is never read. The stream refuses rollup headers, and no service
  login may purge it (``quire.natsauth``): deleting an object belongs to
  retention and crypto-shredding, run with the ``keeper`` login, which
  purges the key's meta and chunk subjects. Every key is content-addressed
  (``quire.blobstore``: by digest, or a signed packet by its job, written
  once), so two writers of one key write the same bytes.
- **Bounded memory.** A writer seals into a temporary file in the service's
  temporary space (``quire.blobstore``); promotion uploads that file one
  chunk at a time. A read downloads one chunk at a time into a temporary
  file, checks the stored digest, and then opens it like a local blob. No
  step holds more than a chunk.
- **Atomic promotion.** Chunks go to a fresh subject no reader knows of; the
  object appears only when its meta message is stored, whole or not at all.
  Chunks of an upload that failed, or lost a race, name no object; the
  keeper's sweep (``sweep_orphaned_chunks``) removes them.
- **Exclusive promotion** returns False when the key's first meta message
  is not its own: of any number of replicas promoting the same key, exactly
  one is told it created the object.
- **Digests** are checked on every read: the stored bytes against the
  meta's SHA-256 and chunk count, then every sealed segment, then (by the
  caller) the plaintext digest. A mismatch is DIGEST_MISMATCH.
- Reads go to the stream leader (``STREAM.MSG.GET``), not a direct get that
  a lagging follower may answer, so a blob promoted by one replica is seen
  by the next stage at once.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import nats.js.errors
from nats.js import JetStreamContext, api

from quire.blobstore import (
    DEFAULT_OWNER,
    SealedBlobStore,
    StorageWrite,
    check_key,
)
from quire.datakeys import DataKeys
from quire.errors import PermanentError
from quire.kek import KekRing
from quire.natskeyring import NatsKeyRing, keyring_config
from quire.natsport import NatsPort
from quire.reasons import ReasonCode
from quire.streamsafety import ensure_safe_stream

__all__ = [
    "BLOB_BUCKET",
    "CHUNK_BYTES",
    "NatsBlobStore",
    "blob_stream_config",
    "ensure_blob_buckets",
]

log = logging.getLogger(__name__)

BLOB_BUCKET = "QUIRE_BLOBS"
STREAM = f"OBJ_{BLOB_BUCKET}"
CHUNK_BYTES = 128 * 1024
_DIGEST_PREFIX = "SHA-256="
_READ_ATTEMPTS = 10
_MARKERS_SKIPPED = 16
"""Deletion markers passed over before a key counts as having no object."""


def _meta_subject(key: str) -> str:
    return f"$O.{BLOB_BUCKET}.M.{base64.urlsafe_b64encode(key.encode()).decode()}"


def _chunk_subject(nuid: str) -> str:
    return f"$O.{BLOB_BUCKET}.C.{nuid}"


def _corrupt() -> PermanentError:
    return PermanentError(ReasonCode.DIGEST_MISMATCH, "stored blob does not match digest")


def _missing() -> PermanentError:
    return PermanentError(ReasonCode.SOURCE_MISSING, "blob missing")


@dataclass(frozen=True)
class _Meta:
    sequence: int
    """The meta message's stream sequence (0: the key never existed)."""
    info: dict[str, object]

    @property
    def live(self) -> bool:
        return self.sequence > 0 and not self.info.get("deleted")

    @property
    def nuid(self) -> str:
        return str(self.info.get("nuid") or "")


def blob_stream_config(replicas: int) -> api.StreamConfig:
    """The object store's stream as ``create_object_store`` makes it, but
    refusing rollup headers: no publish can remove what an object holds."""
    return api.StreamConfig(
        name=STREAM,
        subjects=[f"$O.{BLOB_BUCKET}.C.>", f"$O.{BLOB_BUCKET}.M.>"],
        storage=api.StorageType.FILE,
        num_replicas=replicas,
        discard=api.DiscardPolicy.NEW,
        allow_rollup_hdrs=False,
        allow_direct=True,
    )


async def ensure_blob_buckets(
    js: JetStreamContext, replicas: int, *, provisioning: bool = True
) -> None:
    """Create the blob object store and the key-ring bucket if missing; when
    ``provisioning`` (the operator's login), also bring an existing one's
    safety settings (rollups refused, create-only keys) up to date. A service
    login may not update streams, and never needs to."""
    blob_safety = ("allow_rollup_hdrs", "discard")
    key_safety = ("allow_rollup_hdrs", "discard", "discard_new_per_subject", "max_msgs_per_subject")
    await ensure_safe_stream(js, blob_stream_config(replicas), blob_safety if provisioning else ())
    await ensure_safe_stream(js, keyring_config(replicas), key_safety if provisioning else ())


class NatsBlobStore(SealedBlobStore):
    """Blobs in the ``QUIRE_BLOBS`` object store through ``port``; the
    temporary space ``tmp_dir`` is on this host's disk."""

    def __init__(
        self, port: NatsPort, keys: DataKeys, tmp_dir: Path, *, owner: str = DEFAULT_OWNER
    ) -> None:
        super().__init__(keys, tmp_dir, owner=owner)
        self._port = port

    @classmethod
    def open(
        cls, port: NatsPort, keks: KekRing, tmp_dir: Path, *, owner: str = DEFAULT_OWNER
    ) -> NatsBlobStore:
        """The store on ``port``, its data keys in the bucket's key ring."""
        return cls(port, DataKeys(NatsKeyRing(port), keks), tmp_dir, owner=owner)

    def owned_by(self, owner: str) -> NatsBlobStore:
        """The same store and connection, its temporary entries named after ``owner``."""
        return NatsBlobStore(self._port, self.keys, self.tmp_dir, owner=owner)

    def close(self) -> None:
        self._port.close()

    def _meta(self, key: str) -> _Meta:
        """The key's object: its first meta message that is not a deletion
        marker (earlier builds wrote those; this one purges instead, so any
        now is a stolen login's, and none can hide the object after it)."""

        async def get() -> _Meta:
            sequence = 1
            for _ in range(_MARKERS_SKIPPED):
                try:
                    msg = await self._port.js.get_msg(
                        STREAM, seq=sequence, subject=_meta_subject(key), next=True
                    )
                except nats.js.errors.NotFoundError:
                    return _Meta(0, {})
                try:
                    info = json.loads(msg.data or b"")
                except ValueError:
                    raise _corrupt() from None
                meta = _Meta(msg.seq or 0, info if isinstance(info, dict) else {})
                if meta.live:
                    return meta
                sequence = meta.sequence + 1
            return _Meta(0, {})

        return self._port.run(get)

    def exists(self, key: str) -> bool:
        return self._meta(check_key(key)).live

    def list_keys(self, prefix: str) -> list[str]:
        """Every live key under ``prefix``, sorted (one request per object: for tools)."""

        async def subjects() -> dict[str, int]:
            filter_subject = f"$O.{BLOB_BUCKET}.M.>"
            info = await self._port.js.stream_info(STREAM, subjects_filter=filter_subject)
            return dict(info.state.subjects or {})

        keys = []
        for subject in self._port.run(subjects):
            encoded = subject.rsplit(".", 1)[-1]
            key = base64.urlsafe_b64decode(encoded).decode(errors="replace")
            if key.startswith(prefix) and self._meta(key).live:
                keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        """Remove ``key``'s object: its meta and chunk subjects are purged.
        Only the ``keeper`` login (retention, shredding) may purge the stream;
        a service login's attempt is refused by the server."""
        meta = self._meta(check_key(key))
        if meta.sequence == 0:
            return

        async def purge() -> None:
            await self._port.js.purge_stream(STREAM, subject=_meta_subject(key))
            if meta.nuid:
                await self._port.js.purge_stream(STREAM, subject=_chunk_subject(meta.nuid))

        self._port.run(purge)

    def sweep_orphaned_chunks(self, older_than_seconds: float) -> int:
        """Purge chunk subjects no object's first meta message names (uploads
        that failed, or lost a race) once their first chunk is older than
        ``older_than_seconds``, so no upload in progress is touched. The
        keeper's job (``quire retention apply``); returns how many were purged."""

        async def subjects(pattern: str) -> dict[str, int]:
            info = await self._port.js.stream_info(STREAM, subjects_filter=pattern)
            return dict(info.state.subjects or {})

        named = set()
        for subject in self._port.run(subjects, f"$O.{BLOB_BUCKET}.M.>"):
            key = base64.urlsafe_b64decode(subject.rsplit(".", 1)[-1]).decode(errors="replace")
            named.add(self._meta(key).nuid)
        cutoff = datetime.now(UTC).timestamp() - older_than_seconds

        async def sweep(subject: str) -> bool:
            js = self._port.js
            first = await js.get_msg(STREAM, seq=1, subject=subject, next=True)
            stored = first.time.timestamp() if first.time is not None else 0.0
            if stored > cutoff:
                return False
            await js.purge_stream(STREAM, subject=subject)
            return True

        swept = 0
        for subject in self._port.run(subjects, f"$O.{BLOB_BUCKET}.C.>"):
            if subject.rsplit(".", 1)[-1] not in named and self._port.run(sweep, subject):
                swept += 1
        return swept

    def promote_sealed(
        self, temp: Path, key: str, *, exclusive: bool = False, sync_directory: bool = True
    ) -> bool:
        """Upload a finished sealed temporary file under ``key``; it is gone afterwards.

        The key's object is its first meta message. When it exists already
        nothing is uploaded (its bytes are the same: keys are
        content-addressed); after a race, the loser's chunks are left for
        the keeper's sweep. True when this call made the object, or (not
        ``exclusive``) when the object exists.
        """
        check_key(key)
        try:
            if self._meta(key).sequence:
                return not exclusive
            nuid = secrets.token_hex(16)
            info = self._port.run(self._upload, temp, key, nuid)
            self._port.run(self._publish_meta, key, info)
            if self._meta(key).nuid != nuid:
                log.info("blob promoted concurrently; this upload's chunks await the sweep")
                return not exclusive
            return True
        finally:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)

    async def _upload(self, temp: Path, key: str, nuid: str) -> dict[str, object]:
        js = self._port.js
        digest = hashlib.sha256()
        size = chunks = 0
        with open(temp, "rb") as handle:
            while data := handle.read(CHUNK_BYTES):
                await js.publish(_chunk_subject(nuid), data)
                digest.update(data)
                size += len(data)
                chunks += 1
        return {
            "name": key,
            "bucket": BLOB_BUCKET,
            "nuid": nuid,
            "size": size,
            "chunks": chunks,
            "digest": _DIGEST_PREFIX + base64.urlsafe_b64encode(digest.digest()).decode(),
            "mtime": datetime.now(UTC).isoformat(),
            "options": {"max_chunk_size": CHUNK_BYTES},
        }

    async def _publish_meta(self, key: str, info: dict[str, object]) -> None:
        await self._port.js.publish(_meta_subject(key), json.dumps(info).encode())

    @contextlib.contextmanager
    def open_sealed(self, key: str) -> Iterator[BinaryIO]:
        fd, path = self.make_temp_file("read")
        try:
            # Staged in the temporary space: a full disk there is a storage
            # fault (STORAGE_UNAVAILABLE), as for a write. The close is inside
            # too: a write the disk took only in part leaves the rest
            # buffered, and the close's flush meets the full disk again.
            with StorageWrite("blob not staged for reading"), os.fdopen(fd, "w+b") as handle:
                self._download(key, handle)
                handle.seek(0)
                yield handle
        finally:
            path.unlink(missing_ok=True)

    def _download(self, key: str, out: BinaryIO) -> None:
        """The sealed bytes of ``key`` into ``out``; started again if the
        object was deleted and made again midway."""
        for _ in range(_READ_ATTEMPTS):
            meta = self._meta(key)
            if not meta.live:
                raise _missing()
            out.seek(0)
            out.truncate()
            if self._port.run(self._fetch, meta, out):
                return
            if self._meta(key).sequence == meta.sequence:
                raise _corrupt()  # chunks gone under an unchanged object
        raise _missing()

    async def _fetch(self, meta: _Meta, out: BinaryIO) -> bool:
        """Copy the object's chunks, one at a time; False if one is gone."""
        js = self._port.js
        digest = hashlib.sha256()
        sequence, size = 1, 0
        for _ in range(int(str(meta.info.get("chunks", 0)))):
            try:
                msg = await js.get_msg(
                    STREAM, seq=sequence, subject=_chunk_subject(meta.nuid), next=True
                )
            except nats.js.errors.NotFoundError:
                return False
            if (msg.seq or 0) > meta.sequence:
                raise _corrupt()  # a chunk stored after the object was complete
            data = msg.data or b""
            out.write(data)
            digest.update(data)
            size += len(data)
            sequence = (msg.seq or 0) + 1
        stored = _DIGEST_PREFIX + base64.urlsafe_b64encode(digest.digest()).decode()
        if size != meta.info.get("size") or stored != meta.info.get("digest"):
            raise _corrupt()
        return True
