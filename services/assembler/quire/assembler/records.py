"""What the assembler exports of its own records (``quire.export.v1``), for
the operator tools: the packet it committed for each job (``quire check``
hashes the signed artifact's first bytes against it; ``quire retention``
retires it) and what each committed delivery handed to the signer."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from quire.assembler import tables
from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import CollectionReader, Collections, Rows, lease_outcomes
from quire.paging import Position, keyset_after

__all__ = ["collections", "stored_collections"]

SERVICE = "assembler"


def _packets(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.assemblies
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
                packet=pb.Packet(
                    job=row.job,
                    blob_key=row.blob_key,
                    sha256=row.sha256,
                    size_bytes=int(row.size_bytes),
                )
            ),
        )
        for row in rows
    ]


def collections() -> Collections:
    """The assembler's collections."""
    return Collections(
        SERVICE,
        {
            pb.COLLECTION_PACKETS: CollectionReader(_packets),
            pb.COLLECTION_LEASE_OUTCOMES: lease_outcomes(tables.leases),
        },
    )


def stored_collections(_env: Mapping[str, str]) -> Collections:
    """The ``quire.records`` entry point (``quire.storedexport``)."""
    return collections()
