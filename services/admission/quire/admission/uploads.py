"""The upload gate: a declared size, type and digest, enforced while streaming.

Nothing is kept until every check has passed: chunks go to a temporary blob
that is discarded on any refusal; the first byte past the declared size stops
the stream. Bytes a tenant already has are stored once (content addressing).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from quire.admission import tables
from quire.admission.tenants import Tenant
from quire.admission.v1 import admission_service_pb2 as pb
from quire.blobstore import LocalBlobStore, source_key
from quire.database import Database, insert_if_absent
from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.settings import AdmissionSettings

__all__ = ["UploadGate", "StoredSource"]

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StoredSource:
    sha256: str
    size_bytes: int
    content_type: str


def _check_header(header: pb.SourceHeader, settings: AdmissionSettings, ceiling: int) -> None:
    if not SHA256_HEX.match(header.sha256):
        raise InvalidInput(
            ReasonCode.DIGEST_MISMATCH,
            "sha256 must be 64 lower-case hex digits",
            (FieldViolation("header.sha256", "not a sha256 digest"),),
        )
    if header.content_type not in settings.allowed_content_types:
        raise InvalidInput(
            ReasonCode.CONTENT_TYPE_NOT_ALLOWED,
            "content type not allowed",
            (FieldViolation("header.content_type", "not in the allow-list"),),
        )
    if header.size_bytes <= 0:
        raise InvalidInput(
            ReasonCode.SIZE_BELOW_DECLARATION,
            "declared size must be positive",
            (FieldViolation("header.size_bytes", "must be positive"),),
        )
    if header.size_bytes > ceiling:
        raise InvalidInput(
            ReasonCode.SIZE_LIMIT_EXCEEDED,
            f"declared size over the {ceiling}-byte ceiling",
            (FieldViolation("header.size_bytes", "over the ceiling"),),
        )


class UploadGate:
    def __init__(
        self, database: Database, blobs: LocalBlobStore, settings: AdmissionSettings
    ) -> None:
        self._db = database
        self._blobs = blobs
        self._settings = settings

    async def receive(
        self, tenant: Tenant, requests: AsyncIterator[pb.UploadSourceRequest]
    ) -> StoredSource:
        first = await anext(requests, None)
        if first is None or first.WhichOneof("payload") != "header":
            raise InvalidInput(
                ReasonCode.UPLOAD_HEADER_MISSING, "the first message must be the header"
            )
        header = first.header
        _check_header(header, self._settings, tenant.upload_ceiling(self._settings))
        known = await self._db.read(lambda s: _known(s, tenant.id, header.sha256))
        if known is not None:
            return _already_stored(known, header)
        return await self._store(tenant.id, header, requests)

    async def _store(
        self,
        tenant: str,
        header: pb.SourceHeader,
        requests: AsyncIterator[pb.UploadSourceRequest],
    ) -> StoredSource:
        with self._blobs.writer(max_bytes=header.size_bytes) as writer:
            async for request in requests:
                if request.WhichOneof("payload") != "chunk":
                    raise InvalidInput(
                        ReasonCode.UPLOAD_HEADER_MISSING, "only one header is allowed"
                    )
                writer.write(request.chunk)
            if writer.size != header.size_bytes:
                raise InvalidInput(ReasonCode.SIZE_BELOW_DECLARATION, "fewer bytes than declared")
            if writer.sha256 != header.sha256:
                raise InvalidInput(
                    ReasonCode.DIGEST_MISMATCH, "bytes do not match the declared sha256"
                )
            key = source_key(tenant, header.sha256)
            await asyncio.to_thread(writer.promote, key)
        stored = StoredSource(header.sha256, header.size_bytes, header.content_type)
        await self._db.run(lambda s: _remember(s, tenant, stored, key))
        return stored


def _known(session: Session, tenant: str, sha256: str) -> StoredSource | None:
    row = session.execute(
        select(tables.sources).where(
            tables.sources.c.tenant == tenant, tables.sources.c.sha256 == sha256
        )
    ).first()
    return None if row is None else StoredSource(row.sha256, row.size_bytes, row.content_type)


def _already_stored(known: StoredSource, header: pb.SourceHeader) -> StoredSource:
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


def _remember(session: Session, tenant: str, source: StoredSource, key: str) -> None:
    insert_if_absent(
        session,
        tables.sources,
        {
            "tenant": tenant,
            "sha256": source.sha256,
            "size_bytes": source.size_bytes,
            "content_type": source.content_type,
            "blob_key": key,
            "created_at": datetime.now(UTC),
        },
    )
