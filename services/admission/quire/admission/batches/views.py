"""A batch as the API shows it (``quire.admission.v1.Batch``) and as its
completion notification carries it: counts and times from admission's own
row, never a packet's content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quire.admission.v1 import batch_pb2
from quire.database import as_utc
from quire.jobs import state_value, timestamp
from quire.jobstatus import batch_status_document

__all__ = ["BatchRow", "batch_message", "batch_document", "BATCH_PREFIX"]

BATCH_PREFIX = "batches/"
BatchRow = Any
"""A row of ``tables.batches``."""


def _state(row: BatchRow) -> batch_pb2.BatchState:
    return batch_pb2.BatchState.Value(f"BATCH_STATE_{row.state}")  # type: ignore[no-any-return]


def batch_message(row: BatchRow, job_counts: Mapping[str, int] | None = None) -> batch_pb2.Batch:
    """The Batch resource; ``job_counts`` maps a job state's name to its count."""
    batch = batch_pb2.Batch(
        name=row.batch,
        state=_state(row),
        packet_count=row.packet_count,
        dispatched_count=row.dispatched_count,
        cancelled_undispatched_count=row.cancelled_undispatched,
        terminal_count=row.terminal_count,
        create_time=timestamp(as_utc(row.created_at)),
        update_time=timestamp(as_utc(row.updated_at)),
        job_counts=[
            batch_pb2.BatchJobCount(state=state_value(state), count=count)  # type: ignore[arg-type]
            for state, count in sorted((job_counts or {}).items())
            if count
        ],
    )
    if row.finished_at is not None:
        batch.finish_time.CopyFrom(timestamp(as_utc(row.finished_at)))
    return batch


def batch_document(row: BatchRow, job_counts: Mapping[str, int]) -> dict[str, Any]:
    """The batch's final status, as its completion notification carries it."""
    return batch_status_document(batch_message(row, job_counts))
