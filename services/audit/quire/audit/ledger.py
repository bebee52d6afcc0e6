"""The ledger: every transition appended once, hash-chained per tenant.

Appends happen inside the caller's transaction (SQLite ``BEGIN IMMEDIATE``,
PostgreSQL row lock on the chain head), so chain order equals commit order.
An event id already present is a duplicate and changes nothing. The job view
moves forward only: an event that arrives late never drags a job back. The one
exception is an operator's dead-letter retry, which reopens a FAILED job under
a new generation (``FAILED -> <stage entry state>``, ``DEAD_LETTER_RETRIED``).
A retirement entry (``quire.audit.retirement``) and a ruleset-change entry
(``quire.audit.rulesetchanges``) are chained like any other and leave every
job view as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, bindparam, func, null, select, union_all, update

from quire.audit import tables
from quire.audit.succession import Refusal, Wait, judge_step
from quire.database import insert_if_absent
from quire.driversql import DriverStatement
from quire.jobs import state_name
from quire.jobview import COMPARED, JobFacts, apply, moves_no_job
from quire.ledgerchain import GENESIS, entry_hash
from quire.type import queue_pb2

__all__ = [
    "append",
    "append_many",
    "record_many",
    "Outcome",
    "keep_aside",
    "Arrival",
    "Recorded",
    "entry_hash",
    "GENESIS",
    "lock_head",
]

# The hot statements, built once: building a statement and its cache key on
# every call costs more CPU than SQLite takes to run it. Those every append
# runs go to SQLite's cursor directly (``quire.driversql``).
_LOCKED_HEAD = DriverStatement(
    select(tables.chain_heads)
    .where(tables.chain_heads.c.tenant == bindparam("tenant"))
    .with_for_update()
)
_KNOWN_IDS = DriverStatement(
    select(tables.ledger.c.event_id).where(
        tables.ledger.c.event_id.in_(bindparam("ids", expanding=True))
    )
)
_KNOWN_REFUSED = select(tables.refused_events.c.event_id, tables.refused_events.c.event).where(
    tables.refused_events.c.event_id.in_(bindparam("ids", expanding=True))
)
_KNOWN_EITHER = DriverStatement(
    union_all(
        select(tables.ledger.c.event_id, null().label("event")).where(
            tables.ledger.c.event_id.in_(bindparam("ids", expanding=True))
        ),
        _KNOWN_REFUSED,
    )
)
"""Both look-ups in one statement: a ledger row has no ``event`` here, a
finding has its refused event."""
_MOVE_HEAD = DriverStatement(
    update(tables.chain_heads)
    .where(tables.chain_heads.c.tenant == bindparam("b_tenant"))
    .values(head_hash=bindparam("b_hash"), length=bindparam("b_length"))
)
_INSERT_ENTRIES = DriverStatement(
    tables.ledger.insert()
    .values({c.name: bindparam(c.name) for c in tables.ledger.c if c.name != "sequence"})
    .returning(tables.ledger.c.sequence, sort_by_parameter_order=True)
)
"""Each entry's sequence comes back, in the order of the rows inserted."""
_LAST_OF_JOB = (
    select(func.max(tables.ledger.c.sequence))
    .where(tables.ledger.c.job == tables.jobs.c.job)
    .scalar_subquery()
)
_VIEWS_OF = DriverStatement(
    select(tables.jobs, _LAST_OF_JOB.label("last_sequence")).where(
        tables.jobs.c.job.in_(bindparam("jobs", expanding=True))
    )
)
_VIEW_UPDATE = DriverStatement(
    update(tables.jobs)
    .where(tables.jobs.c.job == bindparam("b_job"))
    .values({name: bindparam(f"b_{name}") for name in (*COMPARED, "updated_at")})
)
_NEW_VIEWS = DriverStatement(tables.jobs.insert())


def append(connection: Connection, event: queue_pb2.TransitionEvent) -> bool:
    """Append ``event`` (one of audit's own steps) unless its id is already
    recorded. Returns True when appended.

    A repeated id is found before anything is written, and under the chain
    head's lock (so another audit replica appending the same event at the same
    moment is seen): an insert that conflicts would still use up a sequence
    number on PostgreSQL, and a gap in the sequence reads as a deleted entry to
    the verifier.
    """
    return append_many(connection, [event])[0]


def append_many(connection: Connection, events: list[queue_pb2.TransitionEvent]) -> list[bool]:
    """``append`` for each of audit's own events, in order: not judged (audit
    is the authority that completes, retries and retires)."""
    arrivals = [Arrival(event, producer="audit", judged=False) for event in events]
    return [o.recorded is Recorded.APPENDED for o in record_many(connection, arrivals)]


class Recorded(StrEnum):
    """What became of one arriving event."""

    APPENDED = "APPENDED"
    DUPLICATE = "DUPLICATE"
    """Its id is in the ledger (or among the findings) already: nothing changed."""
    REFUSED = "REFUSED"
    """Kept aside as a finding (``refused_events``), never appended."""
    WAITING = "WAITING"
    """Not explicable yet (``succession.Wait``): deliver it again later."""


@dataclass(frozen=True)
class Arrival:
    """One event to record, as its verified producer sent it."""

    event: queue_pb2.TransitionEvent
    producer: str
    judged: bool = True
    """Whether it must fit the job's history (``succession.judge_step``)."""
    last_chance: bool = False
    """A step still not explicable now is refused instead of waiting again."""


@dataclass(frozen=True)
class Outcome:
    """What became of one arrival and, when it was appended, its entry and its
    job's view right after."""

    recorded: Recorded
    refusal: Refusal | None = None
    """Why it was kept aside, when it was."""
    facts: JobFacts | None = None
    """The job's view right after this event, when it was appended."""
    entry: tuple[int, bytes] | None = None
    """Its ledger sequence and bytes, when it was appended."""
    previous: int | None = None
    """The sequence of the job's entry before it, when known (read under the
    tenant's head lock, so no append of another replica can fall between):
    a watch that has read up to ``previous`` may take ``entry`` as the next."""


def record_many(connection: Connection, arrivals: list[Arrival]) -> list[Outcome]:
    """Each arrival appended, found a duplicate, kept aside or left waiting, in
    order, in fewer statements: each tenant's head locked once (in tenant
    order, so two batches never wait on each other's heads), one look-up of
    the ids, one read of the jobs' views, one insert of every new entry, one
    head update per tenant and one view write per job.

    Each step is judged against its job's view as the steps before it in this
    group leave it. The ids and views are read under the heads' locks, so a
    second audit replica holding the same events finds them recorded instead
    of failing on the unique id; and everything that could fail is worked out
    before the insert. Both keep PostgreSQL from using up sequence numbers on a
    batch that is then rolled back, which the verifier would read as deleted
    entries."""
    heads = {
        tenant: (head.head_hash, head.length)
        for tenant in sorted({a.event.tenant for a in arrivals})
        for head in (_locked_head(connection, tenant),)
    }
    ids = sorted({a.event.event_id for a in arrivals})
    # A finding delivered again is the same finding; another event under its id
    # (the genuine step a forger tried to take first) is judged on its own.
    known: set[str] = set()
    findings: dict[str, bytes] = {}
    if any(a.judged for a in arrivals):
        for row in _KNOWN_EITHER.rows(connection, {"ids": ids}):
            if row.event is None:
                known.add(row.event_id)
            else:
                findings[row.event_id] = row.event
    else:
        known = {row.event_id for row in _KNOWN_IDS.rows(connection, {"ids": ids})}
    stored, last = _stored_views(connection, sorted({a.event.job for a in arrivals}))
    views: dict[str, JobFacts] = dict(stored)
    outcomes: list[Outcome] = []
    fresh: list[queue_pb2.TransitionEvent] = []
    refused: list[tuple[Arrival, Refusal]] = []
    for arrival in arrivals:
        event = arrival.event
        if event.event_id in known or (
            event.event_id in findings
            and findings[event.event_id] == event.SerializeToString(deterministic=True)
        ):
            outcomes.append(Outcome(Recorded.DUPLICATE))
            continue
        verdict = judge_step(views.get(event.job), event) if arrival.judged else None
        if isinstance(verdict, Wait):
            if not arrival.last_chance:
                outcomes.append(Outcome(Recorded.WAITING))
                continue
            verdict = verdict.refusal
        if verdict is not None:
            findings.setdefault(event.event_id, event.SerializeToString(deterministic=True))
            refused.append((arrival, verdict))
            outcomes.append(Outcome(Recorded.REFUSED, verdict))
            continue
        known.add(event.event_id)
        fresh.append(event)
        if not moves_no_job(event):
            views[event.job] = apply(views.get(event.job), event)
        outcomes.append(Outcome(Recorded.APPENDED, facts=views.get(event.job)))
    now = datetime.now(UTC)
    for arrival, refusal in refused:
        keep_aside(connection, arrival, refusal, now)
    if not fresh:
        return outcomes
    entries = iter(_append(connection, heads, fresh, stored, views, now))
    placed: list[Outcome] = []
    for outcome in outcomes:
        if outcome.recorded is Recorded.APPENDED:
            event, entry = next(entries)
            previous = last.get(event.job)
            last[event.job] = entry[0]
            outcome = replace(outcome, entry=entry, previous=previous)
        placed.append(outcome)
    return placed


def keep_aside(connection: Connection, arrival: Arrival, refusal: Refusal, now: datetime) -> None:
    """The refused event as a finding (once per event id)."""
    event = arrival.event
    insert_if_absent(
        connection,
        tables.refused_events,
        {
            "event_id": event.event_id[:128],
            "job": event.job[:64],
            "tenant": event.tenant[:64],
            "producer": arrival.producer[:32],
            "kind": refusal.value,
            "to_state": state_name(event.to_state)[:32],
            "event": event.SerializeToString(deterministic=True),
            "refused_at": now,
        },
    )


def _append(
    connection: Connection,
    heads: dict[str, tuple[str, int]],
    fresh: list[queue_pb2.TransitionEvent],
    stored: dict[str, JobFacts],
    views: dict[str, JobFacts],
    now: datetime,
) -> list[tuple[queue_pb2.TransitionEvent, tuple[int, bytes]]]:
    """Insert the fresh events; each with its (sequence, bytes), in order."""
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
    sequences = _INSERT_ENTRIES.returned_each(connection, rows)
    touched = {event.tenant for event in fresh}
    _MOVE_HEAD.run_each(
        connection,
        [
            {"b_tenant": tenant, "b_hash": digest, "b_length": length}
            for tenant, (digest, length) in heads.items()
            if tenant in touched
        ],
    )
    moved = {event.job for event in fresh if not moves_no_job(event)}
    changed = [
        {"b_job": job, "b_updated_at": now, **_compared(views[job], "b_")}
        for job in sorted(moved)
        if job in stored
    ]
    new = [
        {"job": job, "created_at": now, "updated_at": now, **_compared(views[job], "")}
        for job in sorted(moved)
        if job not in stored
    ]
    _VIEW_UPDATE.run_each(connection, changed)
    _NEW_VIEWS.run_each(connection, new)
    return [
        (event, (sequence, row["event"]))
        for event, sequence, row in zip(fresh, sequences, rows, strict=True)
    ]


def _compared(view: JobFacts, prefix: str) -> dict[str, Any]:
    return {f"{prefix}{name}": getattr(view, name) for name in COMPARED}


def _stored_views(
    connection: Connection, jobs: list[str]
) -> tuple[dict[str, JobFacts], dict[str, int]]:
    """The jobs' views as the ``jobs`` index holds them, and the sequence of
    each one's newest ledger entry (one read)."""
    if not jobs:
        return {}, {}
    views: dict[str, JobFacts] = {}
    last: dict[str, int] = {}
    for row in _VIEWS_OF.rows(connection, {"jobs": jobs}):
        views[row.job] = _facts(row)
        if row.last_sequence is not None:
            last[row.job] = int(row.last_sequence)
    return views, last


def _facts(row: Any) -> JobFacts:
    return JobFacts(
        **{name: getattr(row, name) for name in ("job", *COMPARED)},
        created=row.created_at,
        updated=row.updated_at,
    )


def lock_head(connection: Connection, tenant: str) -> None:
    """Lock the tenant's chain head for this transaction now (appends later in
    it find it locked already)."""
    _locked_head(connection, tenant)


def _locked_head(connection: Connection, tenant: str) -> Any:
    """The tenant's chain head, locked for this transaction (created at
    genesis first if the tenant has none, so that a new tenant's first
    appends serialize on it too)."""
    head = _LOCKED_HEAD.first(connection, {"tenant": tenant})
    if head is None:
        insert_if_absent(
            connection, tables.chain_heads, {"tenant": tenant, "head_hash": GENESIS, "length": 0}
        )
        (head,) = _LOCKED_HEAD.rows(connection, {"tenant": tenant})
    return head
