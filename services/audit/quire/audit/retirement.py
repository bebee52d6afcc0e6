"""Retirement entries: bytes deleted under the retention policy, in the ledger.

``quire retention apply`` asks audit to record each deletion before it
deletes the bytes, so a crash leaves "recorded, bytes maybe still there",
which a rerun finishes, never "bytes gone, unrecorded". Audit is still the
only writer of its ledger: the entry is one more hash-chained
``TransitionEvent`` in the tenant's log, with ``reason_code``
``BYTES_RETIRED`` and a ``retirement`` saying what went (kind, blob key,
digest, size) under which rule.

A retirement changes no job's state. Its ``from_state`` and ``to_state``
are both the state the job had ended in, and the job view skips it
(``quire.jobview``). Only an ended job's bytes retire, and only bytes
the ledger ties to it: a source among its source digests, a repaired
source's clean rewrite among its recorded repairs, the fetched bytes a
source named by reference was pinned to among its recorded pins, its
artifact under its key with its output digest. An upload no job used has
no job; its entry's job is empty and its states UNSPECIFIED. The event id
is fixed by what is retired, so asking again appends nothing.
"""

from __future__ import annotations

import re

from google.protobuf import timestamp_pb2
from sqlalchemy import Connection, select

from quire.audit import ledger, tables
from quire.blobstore import assembled_key, fetched_key, normalized_key, signed_key, source_key
from quire.declarations import SHA256_HEX
from quire.errors import FailedPrecondition, FieldViolation, InvalidInput, NotFound
from quire.jobs import TERMINAL_STATES, job_id, state_value
from quire.jobview import fold, is_retirement
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.type import queue_pb2

__all__ = ["RULES", "is_retirement", "record_retirement", "retirement_event_id"]

RULES = {
    "source": "sources",
    "packet": "packets",
    "artifact": "artifacts",
    "upload": "unused_uploads",
    "normalized": "sources",
    "fetched": "sources",
}
"""Each kind of bytes and the tenant's period that governs it."""
TENANT_ID = re.compile(r"^[0-9a-z_-]{1,64}$")


def retirement_event_id(tenant: str, job: str, retirement: queue_pb2.Retirement) -> str:
    """The one event id of this retirement (so a rerun appends nothing)."""
    if job:
        return f"{job_id(job)}.retired.{retirement.kind}.{retirement.sha256}"
    since = retirement.period_start_time.ToMilliseconds()
    return f"upload.{tenant}.{retirement.sha256}.{since}"


def _invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(ReasonCode.INVALID_MANIFEST, message, (FieldViolation(field, message),))


def _expected_key(tenant: str, job: str, retirement: queue_pb2.Retirement) -> str:
    if retirement.kind == "artifact":
        return signed_key(tenant, job)
    if retirement.kind == "packet":
        return assembled_key(tenant, retirement.sha256)
    if retirement.kind == "normalized":
        return normalized_key(tenant, retirement.sha256)
    if retirement.kind == "fetched":
        return fetched_key(tenant, retirement.sha256)
    return source_key(tenant, retirement.sha256)


def _check_request(tenant: str, job: str, retirement: queue_pb2.Retirement) -> None:
    if not TENANT_ID.match(tenant):
        raise NotFound("tenant not found")
    if RULES.get(retirement.kind) is None:
        raise _invalid(
            "retirement.kind",
            "kind must be source, normalized, fetched, packet, artifact or upload",
        )
    if retirement.rule != RULES[retirement.kind]:
        raise _invalid("retirement.rule", "the rule does not govern this kind")
    if not SHA256_HEX.match(retirement.sha256):
        raise _invalid("retirement.sha256", "not a sha256 digest")
    if (retirement.kind == "upload") == bool(job):
        raise _invalid("job", "an unused upload has no job; every other kind has one")
    if retirement.size_bytes < 0 or retirement.period_seconds < 0:
        raise _invalid("retirement", "sizes and periods are not negative")
    if retirement.blob_key != _expected_key(tenant, job, retirement):
        raise _invalid("retirement.blob_key", "not the key of these bytes")


def _job_events(connection: Connection, job: str) -> list[queue_pb2.TransitionEvent]:
    rows = connection.execute(
        select(tables.ledger.c.event)
        .where(tables.ledger.c.job == job)
        .order_by(tables.ledger.c.sequence)
    )
    return [queue_pb2.TransitionEvent.FromString(row.event) for row in rows]


def _ended_state(
    connection: Connection, tenant: str, job: str, retirement: queue_pb2.Retirement
) -> str:
    """The state the job ended in, once the ledger ties these bytes to it."""
    events = _job_events(connection, job)
    facts = fold(events)
    if facts is None or facts.tenant != tenant:
        raise NotFound("job not found")
    if facts.state not in TERMINAL_STATES:
        raise FailedPrecondition(ReasonCode.JOB_NOT_ENDED, "the job has not ended")
    if retirement.kind == "source" and not any(
        retirement.sha256 in event.source_digests for event in events
    ):
        raise _invalid("retirement.sha256", "not one of the job's sources")
    if retirement.kind == "normalized" and not any(
        retirement.sha256 == repair.normalized_sha256
        for event in events
        for repair in event.repairs
    ):
        raise _invalid("retirement.sha256", "not the clean rewrite of one of the job's sources")
    if retirement.kind == "fetched" and not any(
        retirement.sha256 == pin.sha256 for event in events for pin in event.pins
    ):
        raise _invalid("retirement.sha256", "not the pinned bytes of one of the job's sources")
    if retirement.kind == "artifact" and (
        facts.state != State.COMPLETED or facts.output_digest != retirement.sha256
    ):
        raise _invalid("retirement.sha256", "not the job's signed artifact")
    return facts.state


def record_retirement(
    connection: Connection,
    tenant: str,
    job: str,
    retirement: queue_pb2.Retirement,
    actor: queue_pb2.Actor,
) -> tuple[str, bool]:
    """Append the retirement entry (checked against the ledger); returns its
    event id and whether it was new."""
    _check_request(tenant, job, retirement)
    state = _ended_state(connection, tenant, job, retirement) if job else "UNSPECIFIED"
    occurred = timestamp_pb2.Timestamp()
    occurred.GetCurrentTime()
    event = queue_pb2.TransitionEvent(
        event_id=retirement_event_id(tenant, job, retirement),
        job=job,
        tenant=tenant,
        from_state=state_value(state),  # type: ignore[arg-type]
        to_state=state_value(state),  # type: ignore[arg-type]
        actor=actor,
        reason_code=ReasonCode.BYTES_RETIRED,
        occur_time=occurred,
        retirement=retirement,
    )
    return event.event_id, ledger.append(connection, event)
