"""Sources carried inside a SubmitJob, so that a small packet costs one call.

Every inline source meets the checks an upload meets (``gate``): the
declared digest, size and type (``incoming``, ``typesniff``), the tenant's
ceiling and storage quota, content addressing; refusals carry the same
reason codes and name the inline source (``inline_sources[i]...``). They
are checked and kept together, in as few steps as the checks allow: one
read for what the tenant already has and its quota (with the job's own
checks beside it, ``quire.admission.jobs.screening``), one thread hop that
seals, writes and promotes the new blobs (their fsyncs made at once, so
the file system may join their flushes, and their directory fsync'd once).
The new sources are then
recorded in the job's own transaction (``KeptSources.record``, before the
job's rows, which go in a savepoint of their own): a packet costs one
commit, not two. A job refused in that transaction leaves its sources
recorded, and one refused before it gets there has them recorded alone
(``record_alone``), so stored bytes are never left unrecorded.
Cheap refusals come first and keep nothing: the inline sources together
within the limit, each named by a manifest item, none twice. Nothing is
stored until every source has passed; blobs written for a request that is
then refused are discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Connection

from quire.admission.jobs.screening import Screened, Screening
from quire.admission.tenants.directory import Tenant
from quire.admission.tenants.storagepolicy import check_quota
from quire.admission.uploads.gate import (
    StoredSource,
    UploadGate,
    check_header,
    known_sources,
    recorded_as_stored,
    remember_all,
)
from quire.admission.uploads.incoming import IncomingSource
from quire.admission.v1 import admission_service_pb2 as pb
from quire.blobstore import BlobWriter, source_key
from quire.database import Database
from quire.errors import FieldViolation, InvalidInput, QuireError
from quire.reasons import ReasonCode
from quire.threadnames import named_pool

__all__ = ["InlineSources", "KeptSources", "finish_at_once"]

SYNC_THREADS = 16
"""Threads that fsync requests' other sources while each request's own thread
fsyncs its first: enough that concurrent packets rarely queue for one (each
thread starts only when first needed)."""


@dataclass(frozen=True)
class _New:
    index: int
    source: pb.InlineSource


@dataclass
class KeptSources:
    """A request's new inline sources, stored as blobs and not yet recorded."""

    tenant: str
    sources: list[tuple[StoredSource, str]]
    """Each source and its blob key."""
    database: Database
    recorded: bool = field(default=False)
    """Set by whoever committed the transaction that recorded them."""

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(source.sha256 for source, _key in self.sources)

    def record(self, connection: Connection) -> None:
        """Record them in the caller's transaction (it marks them recorded once
        that commits)."""
        remember_all(connection, self.tenant, self.sources)

    async def record_alone(self) -> None:
        """Record them in a transaction of their own, unless that was done."""
        if not self.recorded:
            await self.database.run(self.record)
            self.recorded = True


class InlineSources:
    """Keeps a SubmitJob's inline sources, or refuses the request."""

    def __init__(self, gate: UploadGate, *, limit_bytes: int) -> None:
        self._gate = gate
        self._limit = limit_bytes
        self._syncs: ThreadPoolExecutor = named_pool("io", SYNC_THREADS)
        """Its threads start with the first packet of more than one new source."""

    async def keep(
        self,
        tenant: Tenant,
        request: pb.SubmitJobRequest,
        screening: Screening[Any] | None = None,
    ) -> tuple[KeptSources | None, Screened[Any] | None]:
        """Store every inline source of ``request`` under its digest, or raise
        why not (an upload's reasons, or this module's); the sources new to
        the tenant, still to be recorded, or None when there are none. And
        what ``screening`` (the job's own checks) found, read in the same
        transaction as what the tenant has; sources its checks refuse the
        job for are kept all the same (they are the tenant's: a later
        manifest may name them)."""
        if not request.inline_sources:
            return None, None
        try:
            return await self._keep(tenant, request, screening)
        except QuireError as refused:
            self._gate.count_refusal(refused)
            raise

    async def _keep(
        self, tenant: Tenant, request: pb.SubmitJobRequest, screening: Screening[Any] | None
    ) -> tuple[KeptSources | None, Screened[Any] | None]:
        sources = list(request.inline_sources)
        self._check(request)
        gate = self._gate
        gate.check_temp_space()
        ceiling = tenant.upload_ceiling(gate.settings)
        for index, source in enumerate(sources):
            with _about(index):
                check_header(source.header, gate.settings, ceiling)
        with gate.ledger.open(tenant.id) as slot:
            # The tenant's data key (a shredded tenant takes no new work:
            # SubmitJob's own check, made here once for the whole request)
            # beside the read; its refusal comes first, as if it ran first.
            takes_work, looked_up = await asyncio.gather(
                asyncio.to_thread(gate.blobs.keys.check_takes_work, tenant.id),
                gate.database.read(lambda c: self._look_up(c, tenant.id, sources, screening)),
                return_exceptions=True,
            )
            for failed in (takes_work, looked_up):
                if isinstance(failed, BaseException):
                    raise failed
            known, screened = cast(
                tuple[list[StoredSource | None], Screened[Any] | None], looked_up
            )
            new: list[_New] = []
            for index, (source, stored) in enumerate(zip(sources, known, strict=True)):
                if stored is None:
                    new.append(_New(index, source))
                    continue
                with _about(index):
                    recorded_as_stored(stored, source.header)
            if not new:
                return None, screened
            slot.reserve(sum(item.source.header.size_bytes for item in new))
            keys = await asyncio.to_thread(self._write_all, tenant.id, new)
        kept = [
            (
                StoredSource(
                    i.source.header.sha256, i.source.header.size_bytes, i.source.header.content_type
                ),
                key,
            )
            for i, key in zip(new, keys, strict=True)
        ]

        return KeptSources(tenant.id, kept, gate.database), screened

    def _look_up(
        self,
        connection: Connection,
        tenant: str,
        sources: Sequence[pb.InlineSource],
        screening: Screening[Any] | None,
    ) -> tuple[list[StoredSource | None], Screened[Any] | None]:
        """(what the tenant has of ``sources``, what ``screening`` found), in
        one read transaction, once the new sources fit its storage quota."""
        known = self._known_or_within_quota(connection, tenant, sources)
        return known, None if screening is None else screening.read(connection)

    def _known_or_within_quota(
        self, connection: Connection, tenant: str, sources: Sequence[pb.InlineSource]
    ) -> list[StoredSource | None]:
        stored = known_sources(connection, tenant, [s.header.sha256 for s in sources])
        known = [stored.get(s.header.sha256) for s in sources]
        adding = sum(s.header.size_bytes for s, k in zip(sources, known, strict=True) if k is None)
        if adding:
            check_quota(connection, tenant, adding, self._gate.settings.storage_quota_bytes)
        return known

    def _write_all(self, tenant: str, new: list[_New]) -> list[str]:
        """Check, seal and write every new source, then promote them all
        (off the event loop); nothing is promoted unless every one passed."""
        with contextlib.ExitStack() as cleanup:
            writers: list[tuple[str, BlobWriter]] = []
            for item in new:
                with _about(item.index):
                    incoming = cleanup.enter_context(
                        IncomingSource(self._gate.blobs, tenant, item.source.header)
                    )
                    incoming.take(item.source.content)
                    writers.append(
                        (source_key(tenant, item.source.header.sha256), incoming.complete())
                    )
            finish_at_once([writer for _key, writer in writers], self._syncs)
            # One job's sources share their tenant's directory: it is
            # fsynced once, after the last of them is in place.
            for key, writer in writers:
                writer.promote(key, sync_directory=False)
            keys = [key for key, _writer in writers]
            self._gate.blobs.sync_directories(keys)
            return keys

    def _check(self, request: pb.SubmitJobRequest) -> None:
        total = sum(len(source.content) for source in request.inline_sources)
        if total > self._limit:
            raise InvalidInput(
                ReasonCode.INLINE_SOURCES_TOO_LARGE,
                f"inline sources over the {self._limit}-byte limit in all; upload them",
                (FieldViolation("inline_sources", "over the inline limit"),),
            )
        named = {item.sha256 for item in request.manifest.items if item.sha256}
        seen: set[str] = set()
        for index, source in enumerate(request.inline_sources):
            digest = source.header.sha256
            if digest not in named:
                raise InvalidInput(
                    ReasonCode.INLINE_SOURCE_UNUSED,
                    "an inline source is named by no manifest item",
                    (
                        FieldViolation(
                            f"inline_sources[{index}].header.sha256", "not in the manifest"
                        ),
                    ),
                )
            if digest in seen:
                raise InvalidInput(
                    ReasonCode.INVALID_MANIFEST,
                    "the same inline source twice",
                    (FieldViolation(f"inline_sources[{index}].header.sha256", "sent twice"),),
                )
            seen.add(digest)


def finish_at_once(writers: Sequence[BlobWriter], threads: Executor) -> None:
    """Seal, flush and fsync every writer, the first on this thread and the
    others at the same time on ``threads``; raises the first failure once
    all have ended (none is left writing a file its caller discards)."""
    if len(writers) < 2:
        for writer in writers:
            writer.finish()
        return
    others: list[Future[None]] = []
    try:
        for writer in writers[1:]:
            others.append(threads.submit(writer.finish))
        writers[0].finish()
    finally:
        wait(others)
    for other in others:
        other.result()


@contextlib.contextmanager
def _about(index: int) -> Iterator[None]:
    """A refusal raised within names its field within ``inline_sources[index]``."""
    try:
        yield
    except InvalidInput as refused:
        fields = tuple(
            FieldViolation(
                f"inline_sources[{index}].{violation.field}",
                violation.description,
                violation.reason,
            )
            for violation in refused.violations
        ) or (FieldViolation(f"inline_sources[{index}]", refused.message),)
        raise InvalidInput(refused.reason, refused.message, fields) from None
