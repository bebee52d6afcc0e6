"""The upload gate: a declared size, type and digest, enforced while streaming,
by uploads that stay cheap to refuse.

Refusals come in the order of what they cost. Before the header is read,
temporary space must not be low (``TempSpaceGuard``) and the tenant and the
process must have room for one more upload; once it is read, for its declared
bytes (``UploadLedger``), which must also fit the tenant's storage quota
(``tenants.storagepolicy``). The first bytes are held in memory until they show
the declared type (``typesniff``, ``incoming``); only then is a temporary blob
opened. The first byte past the declared size stops the stream, and a stream
that stalls or crawls is closed (``pace``). Nothing is kept until every check has
passed: the temporary blob is discarded and the slot and its reservation are
returned on every path, the caller's disconnect included. Bytes a tenant
already has are stored once (content addressing).

An answer given while the caller is still sending is given only once the
caller has finished, within bounds (``pace.hear_out``), so that its
client reports the reason rather than a broken stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, select

from quire.admission import tables
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.tenants.storagepolicy import check_quota, count_stored
from quire.admission.uploads.incoming import IncomingSource
from quire.admission.uploads.limits import UploadLedger
from quire.admission.uploads.pace import PacedRequests, hear_out
from quire.admission.uploads.tempguard import TempSpaceGuard
from quire.admission.v1 import admission_service_pb2 as pb
from quire.blobstore import BlobStore, source_key
from quire.database import Database, insert_each_if_absent
from quire.declarations import check_declared_digest, check_declared_size
from quire.driversql import DriverStatement
from quire.errors import FieldViolation, InvalidInput, QuireError
from quire.metrics import ServiceMetrics
from quire.reasons import ReasonCode

__all__ = [
    "UploadGate",
    "StoredSource",
    "check_header",
    "known_source",
    "recorded_as_stored",
    "remember",
]


@dataclass(frozen=True)
class StoredSource:
    """An upload kept under its digest, as the tenant declared it."""

    sha256: str
    size_bytes: int
    content_type: str


def check_header(header: pb.SourceHeader, settings: AdmissionSettings, ceiling: int) -> None:
    check_declared_digest(header.sha256, "header.sha256")
    if header.content_type not in settings.allowed_content_types:
        raise InvalidInput(
            ReasonCode.CONTENT_TYPE_NOT_ALLOWED,
            "content type not allowed",
            (FieldViolation("header.content_type", "not in the allow-list"),),
        )
    check_declared_size(header.size_bytes, "header.size_bytes")
    if header.size_bytes > ceiling:
        raise InvalidInput(
            ReasonCode.SIZE_LIMIT_EXCEEDED,
            f"declared size over the {ceiling}-byte ceiling",
            (FieldViolation("header.size_bytes", "over the ceiling"),),
        )


def _chunk_of(request: pb.UploadSourceRequest) -> bytes:
    if request.WhichOneof("payload") != "chunk":
        raise InvalidInput(ReasonCode.UPLOAD_HEADER_MISSING, "only one header is allowed")
    return request.chunk


StillAuthorized = Callable[[], Awaitable[object]]
"""Raises (Unauthenticated) when the caller's token no longer holds."""


class UploadGate:
    """Takes one upload through every check and stores it under its digest."""

    def __init__(
        self,
        database: Database,
        blobs: BlobStore,
        settings: AdmissionSettings,
        *,
        ledger: UploadLedger,
        temp_space: TempSpaceGuard | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._refused = metrics.counter("quire_uploads_refused_total") if metrics else None
        self._db = database
        self._blobs = blobs
        self._settings = settings
        self._ledger = ledger
        self._temp_space = temp_space
        self._hearing_out = 0

    # What ``inlinesources`` shares with uploads: the same limits, slots and stores.
    @property
    def settings(self) -> AdmissionSettings:
        return self._settings

    @property
    def ledger(self) -> UploadLedger:
        return self._ledger

    @property
    def blobs(self) -> BlobStore:
        return self._blobs

    @property
    def database(self) -> Database:
        return self._db

    def check_temp_space(self) -> None:
        if self._temp_space is not None:
            self._temp_space.check()

    def count_refusal(self, error: QuireError) -> None:
        """Counted where the refusal is made (``quire_uploads_refused_total``)."""
        if self._refused is not None:
            self._refused.labels(reason=error.reason.value).inc()

    async def receive(
        self,
        tenant: Tenant,
        requests: AsyncIterator[pb.UploadSourceRequest],
        *,
        still_authorized: StillAuthorized | None = None,
    ) -> StoredSource:
        """Store the upload, or raise why not once the caller has stopped sending.

        ``still_authorized`` is awaited once every byte has arrived and before
        anything is kept: an upload that outlived its token (revoked while the
        bytes came) is refused (UNAUTHENTICATED) and its bytes discarded."""
        try:
            return await self._receive(tenant, requests, still_authorized)
        except QuireError as error:
            # Counted here, where the refusal is made: a client may not learn
            # the reason (grpc/grpc#36066 turns a status that arrives while the
            # client is writing into INTERNAL), so the server's count is the record.
            self.count_refusal(error)
            if error.reason is not ReasonCode.UPLOAD_IDLE_TIMEOUT:
                await self._hear_out(requests)
            raise

    async def _hear_out(self, requests: AsyncIterator[pb.UploadSourceRequest]) -> None:
        # Refused streams hold no slot, so how many are heard out at once is
        # bounded here; past the bound the answer goes at once.
        if self._hearing_out >= self._settings.max_uploads_in_flight:
            return
        self._hearing_out += 1
        try:
            await hear_out(requests, self._settings)
        finally:
            self._hearing_out -= 1

    async def _receive(
        self,
        tenant: Tenant,
        requests: AsyncIterator[pb.UploadSourceRequest],
        still_authorized: StillAuthorized | None,
    ) -> StoredSource:
        if self._temp_space is not None:
            self._temp_space.check()
        with self._ledger.open(tenant.id) as slot:
            paced = PacedRequests(requests, self._settings)
            first = await anext(paced, None)
            if first is None or first.WhichOneof("payload") != "header":
                raise InvalidInput(
                    ReasonCode.UPLOAD_HEADER_MISSING, "the first message must be the header"
                )
            header = first.header
            check_header(header, self._settings, tenant.upload_ceiling(self._settings))
            # The tenant's data key, before anything is kept or deduplicated: a
            # shredded tenant is refused here (DATA_SHREDDED). Unwrapping may reach
            # a token, so not on the event loop.
            await asyncio.to_thread(self._blobs.keys.for_writing, tenant.id)
            quota = self._settings.storage_quota_bytes
            known = await self._db.read(
                lambda s: _known_or_within_quota(s, tenant.id, header, quota)
            )
            if known is not None:
                stored = recorded_as_stored(known, header)
                await _discard_rest(paced, header.size_bytes)
                if still_authorized is not None:
                    await still_authorized()
                return stored
            slot.reserve(header.size_bytes)
            return await self._store(tenant.id, header, paced, still_authorized)

    async def _store(
        self,
        tenant: str,
        header: pb.SourceHeader,
        requests: PacedRequests,
        still_authorized: StillAuthorized | None,
    ) -> StoredSource:
        with IncomingSource(self._blobs, tenant, header) as incoming:
            async for request in requests:
                incoming.take(_chunk_of(request))
            writer = incoming.complete()
            if still_authorized is not None:
                # Revoked while the bytes came: nothing is kept (the temporary
                # blob goes with the IncomingSource).
                await still_authorized()
            key = source_key(tenant, header.sha256)
            await asyncio.to_thread(writer.promote, key)
        stored = StoredSource(header.sha256, header.size_bytes, header.content_type)
        await self._db.run(lambda s: remember(s, tenant, stored, key))
        return stored


async def _discard_rest(requests: PacedRequests, declared: int) -> None:
    """Read what the caller sends of bytes already stored, keeping nothing."""
    received = 0
    async for request in requests:
        received += len(_chunk_of(request))
        if received > declared:
            raise InvalidInput(ReasonCode.SIZE_EXCEEDS_DECLARATION, "more bytes than declared")


_SOURCE = DriverStatement(
    select(tables.sources).where(
        tables.sources.c.tenant == bindparam("tenant"),
        tables.sources.c.sha256 == bindparam("sha256"),
    )
)
"""Built once: every upload looks."""


_SOURCES = DriverStatement(
    select(tables.sources).where(
        tables.sources.c.tenant == bindparam("tenant"),
        tables.sources.c.sha256.in_(bindparam("digests", expanding=True)),
    )
)


def known_source(connection: Connection, tenant: str, sha256: str) -> StoredSource | None:
    row = _SOURCE.first(connection, {"tenant": tenant, "sha256": sha256})
    return None if row is None else StoredSource(row.sha256, row.size_bytes, row.content_type)


def known_sources(
    connection: Connection, tenant: str, digests: list[str]
) -> dict[str, StoredSource]:
    """``known_source`` for several digests, in one statement."""
    rows = _SOURCES.rows(connection, {"tenant": tenant, "digests": digests})
    return {row.sha256: StoredSource(row.sha256, row.size_bytes, row.content_type) for row in rows}


def _known_or_within_quota(
    connection: Connection, tenant: str, header: pb.SourceHeader, quota: int
) -> StoredSource | None:
    """The tenant's stored copy of these bytes, if any; otherwise the new bytes
    must fit the tenant's storage quota. One read transaction for both."""
    known = known_source(connection, tenant, header.sha256)
    if known is None:
        check_quota(connection, tenant, header.size_bytes, quota)
    return known


def recorded_as_stored(known: StoredSource, header: pb.SourceHeader) -> StoredSource:
    """The tenant has these bytes: nothing to receive, nothing to store twice."""
    if known.size_bytes != header.size_bytes:
        raise InvalidInput(
            ReasonCode.DIGEST_MISMATCH, "this digest is stored with a different size"
        )
    if known.content_type != header.content_type:
        raise InvalidInput(
            ReasonCode.TYPE_MISMATCH, "these bytes were uploaded with another content type"
        )
    return known


def remember(connection: Connection, tenant: str, source: StoredSource, key: str) -> None:
    """Record the stored upload, and count its bytes against the tenant's
    quota unless another upload of the same bytes recorded them first."""
    remember_all(connection, tenant, [(source, key)])


def remember_all(connection: Connection, tenant: str, kept: list[tuple[StoredSource, str]]) -> None:
    """``remember`` for each stored source (each under its own digest), in
    three statements: the rows, then one move of the tenant's stored bytes by
    what the rows recorded first."""
    now = datetime.now(UTC)
    added = insert_each_if_absent(
        connection,
        tables.sources,
        [
            {
                "tenant": tenant,
                "sha256": source.sha256,
                "size_bytes": source.size_bytes,
                "content_type": source.content_type,
                "blob_key": key,
                "created_at": now,
            }
            for source, key in kept
        ],
        "sha256",
    )
    if added:
        count_stored(
            connection,
            tenant,
            sum(source.size_bytes for source, _key in kept if source.sha256 in added),
        )
