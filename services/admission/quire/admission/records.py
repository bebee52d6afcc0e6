"""What admission exports of its own records (``quire.export.v1``), for the
operator tools: the jobs it accepted (``quire check``: every job audit knows
must be one; ``quire retention``: which sources each job's task names),
the uploads it holds and each tenant's own retention periods
(``quire retention``).

A job's task is exported as what retention needs of it (the digests and
references of its sources), never its manifest's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, select

from quire.admission import tables
from quire.database import as_utc
from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import CollectionReader, Collections, Rows
from quire.paging import Position, keyset_after
from quire.type import queue_pb2

__all__ = ["collections", "stored_collections"]

SERVICE = "admission"


def _task_sources(task: object) -> tuple[list[str], list[pb.SourceReference]]:
    """The source digests a stored task names, and its references; none when
    the task does not decode."""
    try:
        sources = queue_pb2.JobTask.FromString(bytes(task)).sources  # type: ignore[call-overload]
    except (DecodeError, TypeError):
        return [], []
    references = [
        pb.SourceReference(system=s.fetch.system, key=s.fetch.key)
        for s in sources
        if s.HasField("fetch")
    ]
    return [s.sha256 for s in sources], references


def _accepted(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.jobs
    query = (
        select(table.c.job, table.c.tenant, table.c.created_at, table.c.task)
        .order_by(table.c.job)
        .limit(limit)
    )
    where = keyset_after([table.c.job], after)
    found: Rows = []
    for row in connection.execute(query if where is None else query.where(where)):
        digests, references = _task_sources(row.task)
        job = pb.AcceptedJob(
            job=row.job, tenant=row.tenant, source_sha256=digests, references=references
        )
        job.create_time.FromDatetime(as_utc(row.created_at))
        found.append(((row.job,), pb.Record(accepted_job=job)))
    return found


def _uploads(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.sources
    query = (
        select(
            table.c.tenant, table.c.sha256, table.c.size_bytes, table.c.blob_key, table.c.created_at
        )
        .order_by(table.c.tenant, table.c.sha256)
        .limit(limit)
    )
    where = keyset_after([table.c.tenant, table.c.sha256], after)
    found: Rows = []
    for row in connection.execute(query if where is None else query.where(where)):
        upload = pb.Upload(
            tenant=row.tenant,
            sha256=row.sha256,
            size_bytes=int(row.size_bytes),
            blob_key=row.blob_key,
        )
        upload.create_time.FromDatetime(as_utc(row.created_at))
        found.append(((row.tenant, row.sha256), pb.Record(upload=upload)))
    return found


def _periods(row: Any) -> pb.TenantPeriods:
    return pb.TenantPeriods(
        tenant=row.id,
        sources_seconds=row.sources_seconds or 0,
        packets_seconds=row.packets_seconds or 0,
        artifacts_seconds=row.artifacts_seconds or 0,
        unused_uploads_seconds=row.unused_uploads_seconds or 0,
    )


def _tenant_periods(connection: Connection, after: Position | None, limit: int) -> Rows:
    tenants, storage = tables.tenants, tables.tenant_storage
    query = (
        select(
            tenants.c.id,
            storage.c.sources_seconds,
            storage.c.packets_seconds,
            storage.c.artifacts_seconds,
            storage.c.unused_uploads_seconds,
        )
        .select_from(tenants.outerjoin(storage, storage.c.tenant == tenants.c.id))
        .order_by(tenants.c.id)
        .limit(limit)
    )
    where = keyset_after([tenants.c.id], after)
    rows = connection.execute(query if where is None else query.where(where))
    return [((row.id,), pb.Record(tenant_periods=_periods(row))) for row in rows]


def collections() -> Collections:
    """Admission's collections."""
    return Collections(
        SERVICE,
        {
            pb.COLLECTION_ACCEPTED_JOBS: CollectionReader(_accepted),
            pb.COLLECTION_UPLOADS: CollectionReader(_uploads),
            pb.COLLECTION_TENANT_PERIODS: CollectionReader(_tenant_periods),
        },
    )


def stored_collections(_env: Mapping[str, str]) -> Collections:
    """The ``quire.records`` entry point (``quire.storedexport``)."""
    return collections()
