"""What the validator exports of its own records (``quire.export.v1``), for
the operator tools: which job it pinned to which fetched bytes, written as
soon as they were stored, before the job's ledger says so (``quire
retention`` keeps those bytes while such a job has not ended)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import CollectionReader, Collections, Rows
from quire.paging import Position, keyset_after
from quire.validator import tables

__all__ = ["collections", "stored_collections"]

SERVICE = "validator"


def _pins(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.source_pins
    query = (
        select(table.c.job, table.c.position, table.c.blob_key)
        .order_by(table.c.job, table.c.position)
        .limit(limit)
    )
    where = keyset_after([table.c.job, table.c.position], after)
    rows = connection.execute(query if where is None else query.where(where))
    return [
        (
            (row.job, int(row.position)),
            pb.Record(source_pin=pb.SourcePinRow(job=row.job, blob_key=row.blob_key)),
        )
        for row in rows
    ]


def collections() -> Collections:
    """The validator's collections."""
    return Collections(SERVICE, {pb.COLLECTION_SOURCE_PINS: CollectionReader(_pins)})


def stored_collections(_env: Mapping[str, str]) -> Collections:
    """The ``quire.records`` entry point (``quire.storedexport``)."""
    return collections()
