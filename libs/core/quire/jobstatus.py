"""A job's or a batch's status as a JSON document: what the HTTP door
returns (``GET /v1/pdf/job/get/{job_id}``, the batch endpoints) and what a
completion notification carries.

One shape for both, built from the API's resources only (``quire.type.Job``,
``quire.admission.v1.Batch``), so a document says nothing the API does not:
ids, states, digests, counts and stable reason codes, never document content.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from quire.admission.v1 import batch_pb2
from quire.jobs import TERMINAL_STATES, job_id, state_name
from quire.pipeline import State
from quire.type import job_pb2

__all__ = ["job_status_document", "batch_status_document", "rfc3339"]

_BATCH_STATE_PREFIX = "BATCH_STATE_"


def rfc3339(stamp: Timestamp) -> str | None:
    """``2026-12-01T14:56:30.123456Z``, or None for an unset timestamp."""
    if not stamp.seconds and not stamp.nanos:
        return None
    return stamp.ToJsonString()


def job_status_document(job: job_pb2.Job) -> dict[str, Any]:
    """The job's status: its id and state, the ordered item count, the output
    digest once COMPLETED, the failure code when it ended otherwise, how
    long each phase of its work took, the source systems it waits for
    while the validator has deferred it (empty otherwise), the rollout
    track it was pinned to (null when no rollout was open), and its
    deliveries to stage workers so far and the current step's attempt (both
    0 before any stage has recorded a step)."""
    state = state_name(job.state)
    failed = state in TERMINAL_STATES and state != State.COMPLETED
    return {
        "job_id": job_id(job.name),
        "name": job.name,
        "state": state,
        "terminal": state in TERMINAL_STATES,
        "item_count": job.item_count,
        "manifest_digest": job.manifest_digest,
        "output_digest": job.output_digest or None,
        "failure_code": (job.reason_code or None) if failed else None,
        "failure_detail": (job.reason_detail or None) if failed else None,
        "ruleset_version": job.ruleset_version or None,
        "key_version": job.key_version or None,
        "bundle_id": job.bundle_id or None,
        "batch": job.batch or None,
        "create_time": rfc3339(job.create_time),
        "update_time": rfc3339(job.update_time),
        "timings": [
            {
                "stage": timing.stage,
                "phase": timing.phase,
                "seconds": timing.duration.ToMicroseconds() / 1e6,
                **({"source_system": timing.source_system} if timing.source_system else {}),
            }
            for timing in job.timings
        ],
        "deadline": rfc3339(job.deadline),
        "track": job.track or None,
        "deliveries": job.deliveries,
        "attempt": job.attempt,
        "pins": [
            {
                "position": pin.position,
                "system": pin.system,
                "key": pin.key,
                "sha256": pin.sha256,
                "size_bytes": pin.size_bytes,
                "fetched_sha256": pin.fetched_sha256,
                "schema_version": pin.schema_version or None,
                "fetch_time": rfc3339(pin.fetch_time),
                "normalisations": list(pin.normalisations),
            }
            for pin in job.pins
        ],
        "source_waits": [
            {
                "system": wait.system,
                "breaker": wait.breaker,
                "retry_time": rfc3339(wait.retry_time),
                "since": rfc3339(wait.since),
                "reason_code": wait.reason_code,
            }
            for wait in job.source_waits
        ],
    }


def batch_status_document(batch: batch_pb2.Batch) -> dict[str, Any]:
    """The batch's status: its counts by packet and by job state, and its times."""
    return {
        "batch_id": batch.name.partition("/")[2],
        "name": batch.name,
        "state": batch_pb2.BatchState.Name(batch.state).removeprefix(_BATCH_STATE_PREFIX),
        "packet_count": batch.packet_count,
        "dispatched_count": batch.dispatched_count,
        "cancelled_undispatched_count": batch.cancelled_undispatched_count,
        "terminal_count": batch.terminal_count,
        "job_counts": [
            {"state": state_name(count.state), "count": count.count} for count in batch.job_counts
        ],
        "create_time": rfc3339(batch.create_time),
        "update_time": rfc3339(batch.update_time),
        "finish_time": rfc3339(batch.finish_time),
    }
