"""The ledger: every transition appended once, hash-chained per tenant.

Appends happen inside the caller's transaction (SQLite ``BEGIN IMMEDIATE``,
PostgreSQL row lock on the chain head), so chain order equals commit order.
An event id already present is a duplicate and changes nothing. The job view
moves forward only: an event that arrives late never drags a job back. The one
exception is an operator's dead-letter retry, which reopens a FAILED job under
a new generation (``FAILED -> <stage entry state>``, ``DEAD_LETTER_RETRIED``).
A retirement entry (``quire.audit.retirement``) is chained like any other and
leaves the job view as it was.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from quire.audit import tables
from quire.audit.jobview import COMPARED, JobFacts, apply, is_retirement
from quire.database import insert_if_absent
from quire.jobs import state_name
from quire.type import queue_pb2

__all__ = ["append", "append_many", "entry_hash", "GENESIS", "recorded_states"]

GENESIS = "0" * 64


def entry_hash(prev_hash: str, event_bytes: bytes) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + event_bytes).hexdigest()


def append(session: Session, event: queue_pb2.TransitionEvent) -> bool:
    """Append ``event`` unless its id is already recorded. Returns True when appended.

    A repeated id is found before anything is written, and under the chain
    head's lock (so another audit replica appending the same event at the same
    moment is seen): an insert that conflicts would still use up a sequence
    number on PostgreSQL, and a gap in the sequence reads as a deleted entry to
    the verifier.
    """
    head = _locked_head(session, event.tenant)
    known = session.execute(
        select(tables.ledger.c.sequence).where(tables.ledger.c.event_id == event.event_id)
    ).first()
    if known is not None:
        return False
    prev = head.head_hash
    data = event.SerializeToString(deterministic=True)
    digest = entry_hash(prev, data)
    now = datetime.now(UTC)
    session.execute(
        tables.ledger.insert().values(
            event_id=event.event_id,
            job=event.job,
            tenant=event.tenant,
            from_state=state_name(event.from_state),
            to_state=state_name(event.to_state),
            reason_code=event.reason_code,
            event=data,
            prev_hash=prev,
            entry_hash=digest,
            recorded_at=now,
        )
    )
    session.execute(
        update(tables.chain_heads)
        .where(tables.chain_heads.c.tenant == event.tenant)
        .values(head_hash=digest, length=head.length + 1)
    )
    if not is_retirement(event):
        _advance_view(session, event, now)
    return True


def append_many(session: Session, events: list[queue_pb2.TransitionEvent]) -> list[bool]:
    """``append`` for each event in order, in fewer statements: each tenant's head
    locked once (in tenant order, so two batches never wait on each other's
    heads), one look-up of the ids, one insert of every new entry, one head
    update per tenant and one view write per job. An id already recorded, or
    repeated within ``events``, is a duplicate (False).

    The ids are looked up under the heads' locks, so a second audit replica
    holding the same events finds them recorded instead of failing on the
    unique id; and everything that could fail is worked out before the insert.
    Both keep PostgreSQL from using up sequence numbers on a batch that is then
    rolled back, which the verifier would read as deleted entries."""
    heads = {
        tenant: (head.head_hash, head.length)
        for tenant in sorted({event.tenant for event in events})
        for head in (_locked_head(session, tenant),)
    }
    ids = {event.event_id for event in events}
    known = set(
        session.execute(
            select(tables.ledger.c.event_id).where(tables.ledger.c.event_id.in_(ids))
        ).scalars()
    )
    appended = [False] * len(events)
    fresh: list[queue_pb2.TransitionEvent] = []
    for index, event in enumerate(events):
        if event.event_id not in known:
            known.add(event.event_id)
            appended[index] = True
            fresh.append(event)
    if not fresh:
        return appended
    now = datetime.now(UTC)
    rows = []
    for event in fresh:
        prev, length = heads[event.tenant]
        data = event.SerializeToString(deterministic=True)
        digest = entry_hash(prev, data)
        rows.append(
            {
                "event_id": event.event_id,
                "job": event.job,
                "tenant": event.tenant,
                "from_state": state_name(event.from_state),
                "to_state": state_name(event.to_state),
                "reason_code": event.reason_code,
                "event": data,
                "prev_hash": prev,
                "entry_hash": digest,
                "recorded_at": now,
            }
        )
        heads[event.tenant] = (digest, length + 1)
    views = _advanced_views(session, [event for event in fresh if not is_retirement(event)])
    session.execute(tables.ledger.insert(), rows)
    for tenant, (digest, length) in heads.items():
        session.execute(
            update(tables.chain_heads)
            .where(tables.chain_heads.c.tenant == tenant)
            .values(head_hash=digest, length=length)
        )
    for job, (values, exists) in views.items():
        if exists:
            session.execute(
                update(tables.jobs).where(tables.jobs.c.job == job).values(updated_at=now, **values)
            )
        else:
            session.execute(
                tables.jobs.insert().values(job=job, created_at=now, updated_at=now, **values)
            )
    return appended


def _advanced_views(
    session: Session, events: list[queue_pb2.TransitionEvent]
) -> dict[str, tuple[dict[str, Any], bool]]:
    """Each job's view after ``events`` (by ``_advance_view``'s rule, one read for
    all jobs): the values to write, and whether the job has a row already."""
    if not events:
        return {}
    rows = session.execute(
        select(tables.jobs).where(tables.jobs.c.job.in_({event.job for event in events}))
    )
    stored: dict[str, JobFacts] = {row.job: _facts(row) for row in rows}
    views: dict[str, JobFacts] = dict(stored)
    for event in events:
        views[event.job] = apply(views.get(event.job), event)
    return {
        job: ({name: getattr(after, name) for name in COMPARED}, job in stored)
        for job, after in views.items()
    }


def _facts(row: Any) -> JobFacts:
    return JobFacts(
        **{name: getattr(row, name) for name in ("job", *COMPARED)},
        created=row.created_at,
        updated=row.updated_at,
    )


def _locked_head(session: Session, tenant: str) -> Any:
    """The tenant's chain head, locked for this transaction (created at
    genesis first if the tenant has none, so that a new tenant's first
    appends serialize on it too)."""
    locked = (
        select(tables.chain_heads).where(tables.chain_heads.c.tenant == tenant).with_for_update()
    )
    head = session.execute(locked).first()
    if head is None:
        insert_if_absent(
            session, tables.chain_heads, {"tenant": tenant, "head_hash": GENESIS, "length": 0}
        )
        head = session.execute(locked).one()
    return head


def _advance_view(session: Session, event: queue_pb2.TransitionEvent, now: datetime) -> None:
    """Keep the ``jobs`` index in step, by the same rule the API folds events with."""
    row = session.execute(select(tables.jobs).where(tables.jobs.c.job == event.job)).first()
    current = None
    if row is not None:
        current = JobFacts(
            **{name: getattr(row, name) for name in ("job", *COMPARED)},
            created=row.created_at,
            updated=row.updated_at,
        )
    after = apply(current, event)
    values = {name: getattr(after, name) for name in COMPARED}
    if row is None:
        session.execute(
            tables.jobs.insert().values(job=event.job, created_at=now, updated_at=now, **values)
        )
        return
    session.execute(
        update(tables.jobs).where(tables.jobs.c.job == event.job).values(updated_at=now, **values)
    )


def recorded_states(session: Session, job: str) -> set[str]:
    rows = session.execute(select(tables.ledger.c.to_state).where(tables.ledger.c.job == job))
    return {row.to_state for row in rows}
