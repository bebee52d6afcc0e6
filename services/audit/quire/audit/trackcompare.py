"""CompareTracks: the jobs accepted in a window, summarised per rollout track
from the ledger (issue 20's comparison; ``quire rollout status``).

A job is in the window when admission's ACCEPTED entry occurred (its hashed
``occur_time``) at or after ``start`` and before ``end``; its track, the
states it went through, the actors and attempts of its steps are read from
its entries' hashed bytes, never from a column a table could say otherwise.
The only stored columns used are the ledger's ``to_state`` and
``recorded_at`` (to find the ACCEPTED entries to decode), ``job`` (to read a
job's entries) and the dead-letter rows.

Bounded: at most ``MAX_JOBS`` (100,000) jobs of a window are summarised —
the earliest recorded; the rest are left out — and the ACCEPTED entries
decoded are those recorded since ``start`` less ``CLOCK_SLACK``, so an old
ledger is not decoded for a recent window. Neither column is indexed (the
ledger has an index on ``job`` only), so the look-up is one scan of the
ledger's rows, which the database reads without decoding.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.v1 import audit_service_pb2 as pb
from quire.jobs import state_name
from quire.jobview import JobFacts, fold, is_retirement
from quire.pipeline import QUEUED_STAGES, TERMINAL, State
from quire.type import queue_pb2

__all__ = [
    "MAX_JOBS",
    "MAX_SAMPLE",
    "CLOCK_SLACK",
    "STEP_SERVICES",
    "TRACK_ORDER",
    "Window",
    "compare_tracks",
    "nearest_rank",
]

MAX_JOBS = 100_000
"""The most jobs one comparison summarises (the earliest recorded of the window)."""
MAX_SAMPLE = 200
"""The most completed jobs named per track (``CompareTracksRequest.sample_size``)."""
CLOCK_SLACK = timedelta(minutes=10)
"""How far before ``start`` audit may have recorded an entry that occurred in
the window: the producers' clocks may run ahead of audit's by this much."""
STEP_SERVICES = frozenset(stage.service for stage in QUEUED_STAGES)
"""The stage workers whose entries are steps: validator, assembler, signer."""
TRACK_ORDER = ("candidate", "baseline", "")
CHUNK = 500
"""Jobs per ``IN (...)`` when their entries are read."""
REASONED = frozenset({State.REJECTED, State.FAILED})


@dataclass(frozen=True)
class Window:
    """What CompareTracks summarises: the jobs accepted in ``[start, end)``."""

    start: datetime
    """Inclusive, UTC."""
    end: datetime
    """Exclusive, UTC."""
    stage_service: str = ""
    """Only this service's versions are counted (empty: every step's)."""
    sample_size: int = 0


@dataclass
class _Track:
    jobs: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    steps: int = 0
    retried_steps: int = 0
    versions: Counter[str] = field(default_factory=Counter)
    completed: list[tuple[datetime, str]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def nearest_rank(values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile of ``values`` (0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def _naive(moment: datetime) -> datetime:
    """UTC without tzinfo, as ``Timestamp.ToDatetime()`` gives."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _accepted(connection: Connection, window: Window) -> list[queue_pb2.TransitionEvent]:
    """Admission's ACCEPTED entry of each job accepted in the window (the
    first MAX_JOBS, in ledger order). A dead-letter retry of validation also
    moves a job to ACCEPTED, but its actor is the operator: not an acceptance."""
    table = tables.ledger
    start, end = _naive(window.start), _naive(window.end)
    query = (
        select(table.c.event)
        .where(table.c.to_state == State.ACCEPTED)
        .order_by(table.c.sequence)
        .execution_options(yield_per=1000)
    )
    if start > datetime(1970, 1, 1) + CLOCK_SLACK:
        query = query.where(table.c.recorded_at >= window.start.astimezone(UTC) - CLOCK_SLACK)
    found: dict[str, queue_pb2.TransitionEvent] = {}
    for row in connection.execute(query):
        event = queue_pb2.TransitionEvent.FromString(row.event)
        if event.actor.service != "admission" or event.job in found:
            continue
        if start <= event.occur_time.ToDatetime() < end:
            found[event.job] = event
            if len(found) >= MAX_JOBS:
                break
    return list(found.values())


def _entries(
    connection: Connection, jobs: Sequence[str]
) -> Iterator[tuple[str, list[queue_pb2.TransitionEvent]]]:
    """Each job's entries in ledger order, a chunk of jobs at a time."""
    table = tables.ledger
    for first in range(0, len(jobs), CHUNK):
        chunk = list(jobs[first : first + CHUNK])
        events: dict[str, list[queue_pb2.TransitionEvent]] = {job: [] for job in chunk}
        rows = connection.execute(
            select(table.c.job, table.c.event)
            .where(table.c.job.in_(chunk))
            .order_by(table.c.sequence)
        )
        for row in rows:
            events[row.job].append(queue_pb2.TransitionEvent.FromString(row.event))
        yield from events.items()


def _dead_letters(connection: Connection, jobs: Iterable[str]) -> set[str]:
    table = tables.dead_letters
    names = list(jobs)
    dead: set[str] = set()
    for first in range(0, len(names), CHUNK):
        chunk = names[first : first + CHUNK]
        dead.update(connection.scalars(select(table.c.job).where(table.c.job.in_(chunk))))
    return dead


def _add(
    track: _Track,
    accepted: queue_pb2.TransitionEvent,
    events: list[queue_pb2.TransitionEvent],
    facts: JobFacts | None,
    stage_service: str,
) -> None:
    track.jobs += 1
    track.names.append(accepted.job)
    for event in events:
        if is_retirement(event) or event.actor.service not in STEP_SERVICES:
            continue
        track.steps += 1
        if event.attempt > 1:
            track.retried_steps += 1
        if not stage_service or event.actor.service == stage_service:
            track.versions[f"{event.actor.service}@{event.actor.build_version}"] += 1
    if facts is None or facts.state not in TERMINAL:
        return
    track.endings[facts.state] += 1
    if facts.state in REASONED and facts.reason_code:
        track.reasons[facts.reason_code] += 1
    # The entry that ended the job: the last one moving it to its final state.
    ended = next(
        event
        for event in reversed(events)
        if not is_retirement(event) and state_name(event.to_state) == facts.state
    )
    ended_at = ended.occur_time.ToDatetime()
    latency = (ended_at - accepted.occur_time.ToDatetime()).total_seconds()
    track.latencies.append(max(0.0, latency))
    if facts.state == State.COMPLETED:
        track.completed.append((ended_at, accepted.job))


def compare_tracks(connection: Connection, window: Window) -> list[pb.TrackSummary]:
    """The window's jobs per track (candidate, baseline, then ""; tracks
    without a job are left out); see the module docstring."""
    accepted = _accepted(connection, window)
    by_job = {event.job: event for event in accepted}
    tracks: dict[str, _Track] = {}
    for job, events in _entries(connection, list(by_job)):
        # The track admission pinned: on every entry, the latest non-empty wins.
        facts = fold(events)
        pinned = facts.track if facts is not None else by_job[job].track
        _add(tracks.setdefault(pinned, _Track()), by_job[job], events, facts, window.stage_service)
    dead = _dead_letters(connection, by_job)
    sample = max(0, min(window.sample_size, MAX_SAMPLE))
    summaries = []
    for name in sorted(tracks, key=lambda t: (TRACK_ORDER.index(t) if t in TRACK_ORDER else 3, t)):
        track = tracks[name]
        newest = sorted(track.completed, reverse=True)[:sample]
        summaries.append(
            pb.TrackSummary(
                track=name,
                jobs=track.jobs,
                endings=dict(track.endings),
                reasons=dict(track.reasons),
                latency_p50_seconds=nearest_rank(track.latencies, 50),
                latency_p95_seconds=nearest_rank(track.latencies, 95),
                latency_p99_seconds=nearest_rank(track.latencies, 99),
                steps=track.steps,
                retried_steps=track.retried_steps,
                dead_letters=sum(job in dead for job in track.names),
                versions=dict(track.versions),
                completed_sample=[job for _at, job in newest],
            )
        )
    return summaries
