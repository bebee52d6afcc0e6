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

from sqlalchemy import Connection, bindparam, select, update

from quire.audit import tables
from quire.audit.jobview import COMPARED, JobFacts, apply, is_retirement
from quire.database import insert_if_absent
from quire.jobs import state_name
from quire.type import queue_pb2

__all__ = ["append", "append_many", "entry_hash", "GENESIS", "recorded_states"]

GENESIS = "0" * 64

# The hot statements, built once: building a statement and its cache key on
# every call costs more CPU than SQLite takes to run it.
_LOCKED_HEAD = (
    select(tables.chain_heads)
    .where(tables.chain_heads.c.tenant == bindparam("tenant"))
    .with_for_update()
)
_KNOWN_IDS = select(tables.ledger.c.event_id).where(
    tables.ledger.c.event_id.in_(bindparam("ids", expanding=True))
)
_MOVE_HEAD = (
    update(tables.chain_heads)
    .where(tables.chain_heads.c.tenant == bindparam("b_tenant"))
    .values(head_hash=bindparam("b_hash"), length=bindparam("b_length"))
)
_VIEWS_OF = select(tables.jobs).where(tables.jobs.c.job.in_(bindparam("jobs", expanding=True)))
_VIEW_UPDATE = (
    update(tables.jobs)
    .where(tables.jobs.c.job == bindparam("b_job"))
    .values({name: bindparam(f"b_{name}") for name in (*COMPARED, "updated_at")})
)


def entry_hash(prev_hash: str, event_bytes: bytes) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + event_bytes).hexdigest()


def append(connection: Connection, event: queue_pb2.TransitionEvent) -> bool:
    """Append ``event`` unless its id is already recorded. Returns True when appended.

    A repeated id is found before anything is written, and under the chain
    head's lock (so another audit replica appending the same event at the same
    moment is seen): an insert that conflicts would still use up a sequence
    number on PostgreSQL, and a gap in the sequence reads as a deleted entry to
    the verifier.
    """
    return append_many(connection, [event])[0]


def append_many(connection: Connection, events: list[queue_pb2.TransitionEvent]) -> list[bool]:
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
        for head in (_locked_head(connection, tenant),)
    }
    ids = sorted({event.event_id for event in events})
    known = set(connection.execute(_KNOWN_IDS, {"ids": ids}).scalars())
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
    views = _advanced_views(connection, [event for event in fresh if not is_retirement(event)])
    connection.execute(tables.ledger.insert(), rows)
    connection.execute(
        _MOVE_HEAD,
        [
            {"b_tenant": tenant, "b_hash": digest, "b_length": length}
            for tenant, (digest, length) in heads.items()
        ],
    )
    changed = [
        {"b_job": job, "b_updated_at": now, **{f"b_{k}": v for k, v in values.items()}}
        for job, (values, exists) in views.items()
        if exists
    ]
    new = [
        {"job": job, "created_at": now, "updated_at": now, **values}
        for job, (values, exists) in views.items()
        if not exists
    ]
    if changed:
        connection.execute(_VIEW_UPDATE, changed)
    if new:
        connection.execute(tables.jobs.insert(), new)
    return appended


def _advanced_views(
    connection: Connection, events: list[queue_pb2.TransitionEvent]
) -> dict[str, tuple[dict[str, Any], bool]]:
    """Each job's view after ``events`` (by the job view's rule, ``jobview.apply``; one read for
    all jobs): the values to write, and whether the job has a row already."""
    if not events:
        return {}
    rows = connection.execute(_VIEWS_OF, {"jobs": sorted({event.job for event in events})})
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


def _locked_head(connection: Connection, tenant: str) -> Any:
    """The tenant's chain head, locked for this transaction (created at
    genesis first if the tenant has none, so that a new tenant's first
    appends serialize on it too)."""
    head = connection.execute(_LOCKED_HEAD, {"tenant": tenant}).first()
    if head is None:
        insert_if_absent(
            connection, tables.chain_heads, {"tenant": tenant, "head_hash": GENESIS, "length": 0}
        )
        head = connection.execute(_LOCKED_HEAD, {"tenant": tenant}).one()
    return head


_STATES_OF = select(tables.ledger.c.to_state).where(tables.ledger.c.job == bindparam("job"))


def recorded_states(connection: Connection, job: str) -> set[str]:
    return {row.to_state for row in connection.execute(_STATES_OF, {"job": job})}
