"""What the validator fetched and pinned for each position of a job
(``tables.source_pins``), and where the pinned bytes are kept.

A pin is written as soon as its source is fetched and stored, so a crash
loses no finished fetch; it is inserted if absent — the first writer wins,
and two deliveries racing on one job converge on one pin — and never
changes. It needs no fencing: a stale delivery can only write a pin no one
has written yet, which is then the pin. A redelivery, or a dead letter
retried as a new generation, reuses the job's pins and fetches only the
positions that have none, so a job's packet is made from one set of bytes.

The pinned bytes are the validator's own blobs, content-addressed under
``fetched/{tenant}/{sha256}`` (``fetched_key``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Row, bindparam, select

from quire.blobstore import fetched_key
from quire.database import Database, as_utc, insert_if_absent
from quire.type import job_pb2
from quire.validator import tables

__all__ = ["Pin", "PinStore", "fetched_key"]


@dataclass(frozen=True)
class Pin:
    """What was fetched for one position of a job, and where its bytes are kept.
    Written once, never changed."""

    position: int
    system: str
    key: str
    sha256: str
    """Of the bytes later stages read (normalised)."""
    size_bytes: int
    fetched_sha256: str
    """Of the bytes as the system sent them."""
    schema_version: str
    fetched_at: datetime
    normalisations: tuple[str, ...]
    blob_key: str
    schema_error: str = ""
    """Where the pinned bytes first fail their schema; "" when they match."""

    def message(self) -> job_pb2.SourcePin:
        pin = job_pb2.SourcePin(
            position=self.position,
            system=self.system,
            key=self.key,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            fetched_sha256=self.fetched_sha256,
            schema_version=self.schema_version,
            normalisations=list(self.normalisations),
        )
        pin.fetch_time.FromDatetime(self.fetched_at.astimezone(UTC))
        return pin

    def apply(self, source: job_pb2.SourceRef) -> None:
        """Make ``source`` an ordinary source of the pinned bytes."""
        source.sha256 = self.sha256
        source.size_bytes = self.size_bytes
        source.blob_key = self.blob_key
        source.pin.CopyFrom(self.message())


_columns = tables.source_pins.c
_PINS_OF_JOB = (
    select(tables.source_pins).where(_columns.job == bindparam("job")).order_by(_columns.position)
)
_PIN = select(tables.source_pins).where(
    _columns.job == bindparam("job"), _columns.position == bindparam("position")
)
"""Built once: every fetching delivery reads them."""


def _pin_of(row: Row[tuple[object, ...]]) -> Pin:
    return Pin(
        position=row.position,
        system=row.system,
        key=row.key,
        sha256=row.sha256,
        size_bytes=row.size_bytes,
        fetched_sha256=row.fetched_sha256,
        schema_version=row.schema_version,
        fetched_at=as_utc(row.fetched_at),
        normalisations=tuple(row.normalisations),
        blob_key=row.blob_key,
        schema_error=row.schema_error,
    )


def _read(connection: Connection, job: str) -> dict[int, Pin]:
    return {
        pin.position: pin
        for pin in map(_pin_of, connection.execute(_PINS_OF_JOB, {"job": job}).all())
    }


class PinStore:
    """The validator's pins: the first pin written for a position is the pin."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def pinned(self, job: str) -> dict[int, Pin]:
        """The job's pins by position."""
        return await self._database.read(lambda connection: _read(connection, job))

    async def pin(self, job: str, pin: Pin) -> Pin:
        """Record ``pin`` unless the position has one; the position's pin either way."""

        def write(connection: Connection) -> Pin:
            insert_if_absent(
                connection,
                tables.source_pins,
                {
                    "job": job,
                    "position": pin.position,
                    "system": pin.system,
                    "key": pin.key,
                    "sha256": pin.sha256,
                    "size_bytes": pin.size_bytes,
                    "fetched_sha256": pin.fetched_sha256,
                    "schema_version": pin.schema_version,
                    "fetched_at": pin.fetched_at,
                    "normalisations": list(pin.normalisations),
                    "blob_key": pin.blob_key,
                    "schema_error": pin.schema_error,
                },
            )
            row = connection.execute(_PIN, {"job": job, "position": pin.position}).one()
            return _pin_of(row)

        return await self._database.run(write)
