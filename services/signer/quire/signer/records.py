"""What the signer exports of its own records (``quire.export.v1``), for
the operator tools: its signature record of each job (``quire check``
compares it with the ledger and the artifact; ``quire retention`` retires
the artifact) and what each committed delivery signed (its sign task)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import CollectionReader, Collections, Rows, lease_outcomes
from quire.paging import Position, keyset_after
from quire.signer import tables

__all__ = ["collections", "stored_collections"]

SERVICE = "signer"


def _signatures(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.signatures
    query = (
        select(table.c.job, table.c.blob_key, table.c.sha256, table.c.size_bytes)
        .order_by(table.c.job)
        .limit(limit)
    )
    where = keyset_after([table.c.job], after)
    rows = connection.execute(query if where is None else query.where(where))
    return [
        (
            (row.job,),
            pb.Record(
                signature=pb.Signature(
                    job=row.job,
                    blob_key=row.blob_key,
                    sha256=row.sha256 or "",
                    size_bytes=int(row.size_bytes or 0),
                )
            ),
        )
        for row in rows
    ]


def collections() -> Collections:
    """The signer's collections."""
    return Collections(
        SERVICE,
        {
            pb.COLLECTION_SIGNATURES: CollectionReader(_signatures),
            pb.COLLECTION_LEASE_OUTCOMES: lease_outcomes(tables.leases),
        },
    )


def stored_collections(_env: Mapping[str, str]) -> Collections:
    """The ``quire.records`` entry point (``quire.storedexport``)."""
    return collections()
