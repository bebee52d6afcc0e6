"""A job's status as a JSON document: what the HTTP door returns for
``GET /v1/pdf/job/get/{job_id}`` and what a completion notification carries.

One shape for both, built from the ``quire.type.Job`` resource only, so the
document says nothing the API does not: ids, states, digests, counts and
stable reason codes, never document content.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from quire.jobs import TERMINAL_STATES, job_id, state_name
from quire.type import job_pb2

__all__ = ["job_status_document", "rfc3339"]


def rfc3339(stamp: Timestamp) -> str | None:
    """``2026-12-01T14:56:30.123456Z``, or None for an unset timestamp."""
    if not stamp.seconds and not stamp.nanos:
        return None
    return stamp.ToJsonString()


def job_status_document(job: job_pb2.Job) -> dict[str, Any]:
    """The job's status: its id and state, the ordered item count, the output
    digest once COMPLETED, and the failure code when it ended otherwise."""
    state = state_name(job.state)
    failed = state in TERMINAL_STATES and state != "COMPLETED"
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
    }
