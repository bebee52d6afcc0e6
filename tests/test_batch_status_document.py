"""A batch's status has one JSON shape: the HTTP door's response model and
the completion notification are both ``quire.jobstatus.batch_status_document``."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from quire.admission.v1 import batch_pb2
from quire.gateway.documents import batch_status
from quire.jobstatus import batch_status_document
from quire.type import job_pb2


def _batch() -> batch_pb2.Batch:
    return batch_pb2.Batch(
        name="batches/b7",
        state=batch_pb2.BATCH_STATE_CANCELLED,
        packet_count=10,
        dispatched_count=6,
        cancelled_undispatched_count=4,
        terminal_count=5,
        job_counts=[
            batch_pb2.BatchJobCount(state=job_pb2.JOB_STATE_COMPLETED, count=5),
            batch_pb2.BatchJobCount(state=job_pb2.JOB_STATE_SIGNING, count=1),
        ],
        create_time=Timestamp(seconds=1_796_000_000),
        update_time=Timestamp(seconds=1_796_000_060, nanos=500_000_000),
        finish_time=Timestamp(seconds=1_796_000_060, nanos=500_000_000),
    )


def test_the_document_names_the_batch_its_counts_and_times() -> None:
    document = batch_status_document(_batch())
    assert document == {
        "batch_id": "b7",
        "name": "batches/b7",
        "state": "CANCELLED",
        "packet_count": 10,
        "dispatched_count": 6,
        "cancelled_undispatched_count": 4,
        "terminal_count": 5,
        "job_counts": [{"state": "COMPLETED", "count": 5}, {"state": "SIGNING", "count": 1}],
        "create_time": "2026-11-30T00:53:20Z",
        "update_time": "2026-11-30T00:54:20.500Z",
        "finish_time": "2026-11-30T00:54:20.500Z",
    }


def test_an_unfinished_batch_has_no_finish_time() -> None:
    batch = _batch()
    batch.ClearField("finish_time")
    assert batch_status_document(batch)["finish_time"] is None


def test_the_http_door_answers_with_the_same_document() -> None:
    assert batch_status(_batch()).model_dump() == batch_status_document(_batch())
