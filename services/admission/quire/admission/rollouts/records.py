"""Rollouts: an operator's candidate (a deployable worker version of one
stage, a ruleset version, or both), the share of new jobs pinned to it, and
its state. Every state transition is here: ``start`` (CANARY), ``promote``
(PROMOTED, share 10,000) and ``roll_back`` (ROLLED_BACK, share 0). A row is
never deleted; the share a rollout was started with is kept
(``canary_share_basis_points``) so that the track of every job accepted
while it was open can be recomputed from the job id.

At most one rollout per stage is open: ``open_stage`` holds the stage while
the rollout is CANARY and is NULL after, under a unique index, so two
concurrent starts cannot both open one (the loser is refused ROLLOUT_OPEN).

``OpenRollouts`` is intake's cached read of the open rollouts: SubmitJob
pins each job to a track from it (``quire.tracks.track_for``) without a
query per submission. It is read again at most once a second, and at once
after this process started, promoted or rolled back a rollout; another
admission replica sees a change within a second.

The queues route a candidate-track job to the candidate's workers
(``quire.workqueue.routing``; the candidate consumer holds
``concurrency_cap``, set by ``quire.admission.rollouts.sync``). A rollout with
a candidate ruleset gives it to its candidate-track jobs; promoting it makes
that ruleset the current version of its name, the one a job that names no
version is pinned to (``quire.admission.rulesets.currents``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from quire.admission import tables
from quire.admission.v1 import rollout_pb2
from quire.database import as_utc
from quire.errors import FailedPrecondition, FieldViolation, InvalidInput, NotFound
from quire.jobs import new_job_id, timestamp
from quire.pipeline import QUEUED_STAGES
from quire.reasons import ReasonCode
from quire.tracks import BASIS_POINTS

__all__ = [
    "CANARY",
    "PROMOTED",
    "ROLLED_BACK",
    "OpenRollouts",
    "RolloutRecord",
    "candidate_ruleset",
    "checked_rollout",
    "get_rollout",
    "latest_per_stage",
    "list_rollouts",
    "parse_name",
    "promote",
    "read_open",
    "roll_back",
    "rollout_message",
    "start",
]

CANARY = "CANARY"
PROMOTED = "PROMOTED"
ROLLED_BACK = "ROLLED_BACK"
_STATES = {
    CANARY: rollout_pb2.ROLLOUT_STATE_CANARY,
    PROMOTED: rollout_pb2.ROLLOUT_STATE_PROMOTED,
    ROLLED_BACK: rollout_pb2.ROLLOUT_STATE_ROLLED_BACK,
}
STAGES = tuple(stage.name for stage in QUEUED_STAGES)
"""The stages a rollout may name: those with workers of their own."""
RULESET_STAGE = "validate"
"""The only stage that runs rulesets."""
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
"""A deployable version (an image tag): matched whole."""
RULESET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}@[0-9]{1,9}")
"""``name@version``: matched whole."""
MAX_TENANTS = 100
MAX_CONCURRENCY_CAP = 10_000
REFRESH_SECONDS = 1.0


@dataclass(frozen=True)
class RolloutRecord:
    """One rollout, as stored. ``tenants`` are tenant ids (not names)."""

    id: str
    stage: str
    candidate_version: str
    candidate_ruleset: str
    share_basis_points: int
    canary_share_basis_points: int
    tenants: tuple[str, ...]
    concurrency_cap: int
    state: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: object) -> RolloutRecord:
        return cls(
            id=row.id,  # type: ignore[attr-defined]
            stage=row.stage,  # type: ignore[attr-defined]
            candidate_version=row.candidate_version,  # type: ignore[attr-defined]
            candidate_ruleset=row.candidate_ruleset,  # type: ignore[attr-defined]
            share_basis_points=row.share_basis_points,  # type: ignore[attr-defined]
            canary_share_basis_points=row.canary_share_basis_points,  # type: ignore[attr-defined]
            tenants=tuple(row.tenants.split()),  # type: ignore[attr-defined]
            concurrency_cap=row.concurrency_cap,  # type: ignore[attr-defined]
            state=row.state,  # type: ignore[attr-defined]
            created_at=as_utc(row.created_at),  # type: ignore[attr-defined]
            updated_at=as_utc(row.updated_at),  # type: ignore[attr-defined]
        )

    @property
    def name(self) -> str:
        return f"rollouts/{self.id}"


def rollout_message(record: RolloutRecord) -> rollout_pb2.Rollout:
    return rollout_pb2.Rollout(
        name=record.name,
        stage=record.stage,
        candidate_version=record.candidate_version,
        candidate_ruleset=record.candidate_ruleset,
        share_basis_points=record.share_basis_points,
        canary_share_basis_points=record.canary_share_basis_points,
        tenants=[f"tenants/{tenant}" for tenant in record.tenants],
        concurrency_cap=record.concurrency_cap,
        state=_STATES[record.state],
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


def parse_name(name: str) -> str:
    """``rollouts/{rollout}`` → the id, or NOT_FOUND."""
    prefix, _, ident = name.partition("/")
    if prefix != "rollouts" or not ident or "/" in ident:
        raise NotFound("rollout not found")
    return ident


def _violation(field: str, description: str) -> FieldViolation:
    return FieldViolation(f"rollout.{field}", description, "BAD_ROLLOUT")


def checked_rollout(rollout: rollout_pb2.Rollout) -> rollout_pb2.Rollout:
    """The request's rollout, or INVALID_ARGUMENT naming every field out of range.
    Tenants are returned as ids, deduplicated in the order given."""
    bad: list[FieldViolation] = []
    if rollout.stage not in STAGES:
        bad.append(_violation("stage", f"one of {', '.join(STAGES)}"))
    if not rollout.candidate_version and not rollout.candidate_ruleset:
        bad.append(
            _violation("candidate_version", "a candidate_version, a candidate_ruleset or both")
        )
    if rollout.candidate_version and not VERSION.fullmatch(rollout.candidate_version):
        bad.append(_violation("candidate_version", "1-128 characters of A-Z a-z 0-9 . _ + -"))
    if rollout.candidate_ruleset:
        if not RULESET.fullmatch(rollout.candidate_ruleset):
            bad.append(_violation("candidate_ruleset", 'a ruleset version, "name@version"'))
        elif rollout.stage != RULESET_STAGE:
            bad.append(
                _violation("candidate_ruleset", f"only a {RULESET_STAGE} rollout runs rulesets")
            )
    if not 0 <= rollout.share_basis_points <= BASIS_POINTS:
        bad.append(_violation("share_basis_points", f"0 to {BASIS_POINTS} (100 %)"))
    if not 1 <= rollout.concurrency_cap <= MAX_CONCURRENCY_CAP:
        bad.append(_violation("concurrency_cap", f"1 to {MAX_CONCURRENCY_CAP}"))
    tenants: list[str] = []
    for index, name in enumerate(rollout.tenants):
        prefix, _, ident = name.partition("/")
        if prefix != "tenants" or not ident or "/" in ident or len(ident) > 64:
            bad.append(_violation(f"tenants[{index}]", '"tenants/{tenant}"'))
        elif ident not in tenants:
            tenants.append(ident)
    if len(tenants) > MAX_TENANTS:
        bad.append(_violation("tenants", f"at most {MAX_TENANTS}"))
    if bad:
        raise InvalidInput(ReasonCode.INVALID_ROLLOUT, "the rollout is invalid", tuple(bad))
    checked = rollout_pb2.Rollout()
    checked.CopyFrom(rollout)
    del checked.tenants[:]
    checked.tenants.extend(tenants)
    return checked


_OPEN = select(tables.rollouts).where(tables.rollouts.c.state == CANARY)


def read_open(connection: Connection) -> tuple[RolloutRecord, ...]:
    """Every open (CANARY) rollout, at most one per stage."""
    return tuple(RolloutRecord.from_row(row) for row in connection.execute(_OPEN))


def start(connection: Connection, wanted: rollout_pb2.Rollout) -> RolloutRecord:
    """Open ``wanted`` (from ``checked_rollout``): refused ROLLOUT_OPEN while
    another rollout of its stage is open, NOT_FOUND for an unknown tenant."""
    if wanted.tenants:
        known = set(
            connection.scalars(
                select(tables.tenants.c.id).where(tables.tenants.c.id.in_(list(wanted.tenants)))
            )
        )
        unknown = [
            _violation(f"tenants[{index}]", "no such tenant")
            for index, tenant in enumerate(wanted.tenants)
            if tenant not in known
        ]
        if unknown:
            raise InvalidInput(ReasonCode.INVALID_ROLLOUT, "the rollout is invalid", tuple(unknown))
    now = datetime.now(UTC)
    values = {
        "id": new_job_id(),
        "stage": wanted.stage,
        "candidate_version": wanted.candidate_version,
        "candidate_ruleset": wanted.candidate_ruleset,
        "share_basis_points": wanted.share_basis_points,
        "canary_share_basis_points": wanted.share_basis_points,
        "tenants": " ".join(wanted.tenants),
        "concurrency_cap": wanted.concurrency_cap,
        "state": CANARY,
        "open_stage": wanted.stage,
        "created_at": now,
        "updated_at": now,
    }
    if connection.scalar(
        select(tables.rollouts.c.id).where(tables.rollouts.c.open_stage == wanted.stage)
    ):
        raise _already_open(wanted.stage)
    try:  # the failed insert aborts the transaction: the refusal rolls it back
        connection.execute(tables.rollouts.insert(), values)
    except IntegrityError:  # a concurrent start of the same stage won
        raise _already_open(wanted.stage) from None
    return RolloutRecord.from_row(_Row(values))


class _Row:
    def __init__(self, values: dict[str, object]) -> None:
        self.__dict__.update(values)


def _already_open(stage: str) -> FailedPrecondition:
    return FailedPrecondition(
        ReasonCode.ROLLOUT_OPEN,
        f"a {stage} rollout is open: promote or roll it back first",
    )


def get_rollout(connection: Connection, rollout_id: str) -> RolloutRecord:
    row = connection.execute(
        select(tables.rollouts).where(tables.rollouts.c.id == rollout_id)
    ).first()
    if row is None:
        raise NotFound("rollout not found")
    return RolloutRecord.from_row(row)


def list_rollouts(
    connection: Connection, *, stage: str = "", open_only: bool = False
) -> list[RolloutRecord]:
    """Rollouts, newest first (ids are time-ordered)."""
    table = tables.rollouts
    query = select(table)
    if stage:
        query = query.where(table.c.stage == stage)
    if open_only:
        query = query.where(table.c.state == CANARY)
    query = query.order_by(table.c.created_at.desc(), table.c.id.desc())
    return [RolloutRecord.from_row(row) for row in connection.execute(query)]


def _close(connection: Connection, rollout_id: str, state: str, share: int) -> RolloutRecord:
    """CANARY → ``state`` with ``share``, as a compare-and-set on the state."""
    table = tables.rollouts
    get_rollout(connection, rollout_id)  # NOT_FOUND first
    closed = connection.execute(
        update(table)
        .where(table.c.id == rollout_id, table.c.state == CANARY)
        .values(
            state=state, share_basis_points=share, open_stage=None, updated_at=datetime.now(UTC)
        )
    )
    if closed.rowcount != 1:  # type: ignore[attr-defined]
        raise FailedPrecondition(
            ReasonCode.ROLLOUT_NOT_OPEN, "the rollout was already promoted or rolled back"
        )
    return get_rollout(connection, rollout_id)


def promote(connection: Connection, rollout_id: str) -> RolloutRecord:
    """The candidate becomes the baseline: PROMOTED, share 10,000."""
    return _close(connection, rollout_id, PROMOTED, BASIS_POINTS)


def roll_back(connection: Connection, rollout_id: str) -> RolloutRecord:
    """No new job is pinned to the candidate: ROLLED_BACK, share 0. Jobs already
    pinned keep their track; nothing is deleted."""
    return _close(connection, rollout_id, ROLLED_BACK, 0)


def candidate_ruleset(ruleset: str, open_rollouts: Iterable[RolloutRecord]) -> str:
    """The ruleset an open rollout's candidate runs on a candidate-track job
    that asked for ``ruleset`` ("name@version"): the rollout's candidate
    ruleset when it has the same name; "" when none does."""
    name = ruleset.partition("@")[0]
    for rollout in open_rollouts:
        if rollout.candidate_ruleset and rollout.candidate_ruleset.partition("@")[0] == name:
            return rollout.candidate_ruleset
    return ""


def latest_per_stage(connection: Connection) -> tuple[RolloutRecord, ...]:
    """Each stage's newest rollout, open or closed (what its workers follow)."""
    latest: dict[str, RolloutRecord] = {}
    for record in list_rollouts(connection):  # newest first
        latest.setdefault(record.stage, record)
    return tuple(latest.values())


class OpenRollouts:
    """The open rollouts, read at most once per ``refresh_seconds`` (and at
    once after ``changed``). ``snapshot`` is called inside intake's writing
    transaction, on a database thread: a stale cache is refreshed with that
    connection, so SubmitJob gains no query except once a second."""

    def __init__(
        self,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._open: tuple[RolloutRecord, ...] = ()
        self._read_at = float("-inf")
        self._generation = 0

    def changed(self) -> None:
        """A rollout was started, promoted or rolled back: read again next time."""
        with self._lock:
            self._generation += 1
            self._read_at = float("-inf")

    def snapshot(self, connection: Connection) -> tuple[RolloutRecord, ...]:
        now = self._clock()
        with self._lock:
            if now - self._read_at < self._refresh:
                return self._open
            generation = self._generation
        found = read_open(connection)
        with self._lock:
            # A change made while this read ran invalidates it: keep it for
            # this call only, and read again next time.
            if generation == self._generation:
                self._open, self._read_at = found, now
        return found
