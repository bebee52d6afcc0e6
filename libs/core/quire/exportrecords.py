"""What a service exports of its own records (``quire.export.v1``): one
reader per collection it owns, read a page at a time in the collection's
own order (a unique key, so that each row is served once however the
collection grows meanwhile: a keyset page, ``quire.paging``).

The same readers serve the running service's ``ExportRecords``
(``quire.exportservice``) and a stopped stack's export of the service's
database (``quire.storedexport``): both give the same records, so the
operator tools read either the same way and never a service's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Table, select

from quire.errors import FieldViolation, InvalidInput
from quire.export.v1 import export_service_pb2 as pb
from quire.paging import MAX_PAGE_SIZE, Position, keyset_after
from quire.reasons import ReasonCode

__all__ = [
    "Rows",
    "Reader",
    "CollectionReader",
    "Collections",
    "ExportedPage",
    "lease_outcomes",
]

Rows = list[tuple[Position, pb.Record]]
"""Records in a collection's order, each with its position (its unique sort key)."""
Reader = Callable[[Connection, Position | None, int], Rows]
"""Reads at most ``limit`` records after ``position`` (None: from the first),
in order, each with its own position."""


@dataclass(frozen=True)
class CollectionReader:
    """How one collection is read."""

    read: Reader
    page_limit: int = MAX_PAGE_SIZE
    """Records per page at most: fewer than the API's bound where records are large."""
    numbered: bool = False
    """Its rows are numbered by the database's own sequence, in which only
    SQLite leaves no gap but a deleted row (``sequence_gaps_are_deletions``)."""


@dataclass(frozen=True)
class ExportedPage:
    """One page as read, and the position of its last record when more follow."""

    response: pb.ExportRecordsResponse
    rows: Rows
    more: bool


@dataclass(frozen=True)
class Collections:
    """The collections one service owns."""

    service: str
    readers: Mapping[pb.Collection, CollectionReader]

    def reader(self, collection: pb.Collection) -> CollectionReader:
        """The collection's reader; COLLECTION_NOT_HELD when this service owns none."""
        found = self.readers.get(collection)
        if found is None:
            raise InvalidInput(
                ReasonCode.COLLECTION_NOT_HELD,
                f"{self.service} exports no such collection",
                (FieldViolation("collection", f"not a collection {self.service} owns"),),
            )
        return found

    def page(
        self,
        collection: pb.Collection,
        connection: Connection,
        *,
        after: Position | None,
        size: int,
    ) -> ExportedPage:
        """At most ``size`` records (and the reader's own limit) after ``after``."""
        reader = self.reader(collection)
        size = min(size, reader.page_limit)
        rows = reader.read(connection, after, size + 1)
        served = rows[:size]
        response = pb.ExportRecordsResponse(
            records=[record for _, record in served],
            collection=collection,
            service=self.service,
            sequence_gaps_are_deletions=reader.numbered and connection.dialect.name == "sqlite",
        )
        return ExportedPage(response, served, more=len(rows) > size)


def lease_outcomes(leases: Table) -> CollectionReader:
    """A stage's committed outcomes (its ``quire.leases`` table), by lease
    key: what each delivery handed on, as stored."""

    def read(connection: Connection, after: Position | None, limit: int) -> Rows:
        query = (
            select(leases.c.job, leases.c.outcome)
            .where(leases.c.outcome.is_not(None))
            .order_by(leases.c.job)
            .limit(limit)
        )
        where = keyset_after([leases.c.job], after)
        rows = connection.execute(query if where is None else query.where(where))
        return [
            (
                (row.job,),
                pb.Record(lease_outcome=pb.LeaseOutcome(lease=row.job, outcome=bytes(row.outcome))),
            )
            for row in rows
        ]

    return CollectionReader(read)
