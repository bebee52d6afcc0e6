"""A job's timeline from its ledger entries: one bar per state, placed on
one time axis, with the queue wait and the work apart where the stage that
left the state measured them.

A state lasts from the entry that entered it to the next entry; the last
state lasts until ``now`` unless it ended the job. Widths and offsets are
shares of the whole span (per cent), so the page draws them with CSS alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from quire.jobs import state_name
from quire.pipeline import STAGE_NAMES, TERMINAL, stage
from quire.type import queue_pb2

__all__ = ["Bar", "Phase", "Timeline", "timeline_of"]


@dataclass(frozen=True)
class Phase:
    """A measured part of the work that ended a state."""

    stage: str
    phase: str
    seconds: float
    share: float
    """Of the bar it belongs to, per cent."""
    source_system: str = ""


@dataclass(frozen=True)
class Bar:
    """One state the job was in."""

    state: str
    start: datetime
    seconds: float
    offset: float
    """From the timeline's start, per cent."""
    width: float
    """Per cent of the timeline."""
    actor: str
    attempt: int
    reason_code: str
    ongoing: bool
    phases: tuple[Phase, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    """A job's bars and what the page says beside them."""

    bars: tuple[Bar, ...]
    start: datetime | None
    seconds: float
    deadline: datetime | None
    budget_seconds: float | None
    """From acceptance to the deadline."""
    budget_used: float | None
    """Share of the budget the timeline spans, per cent (over 100: late)."""
    trace_id: str
    generations: int
    attempts: int
    """The most deliveries any transition took."""
    tenant: str
    fetches: tuple[Phase, ...] = field(default_factory=tuple)
    """Source fetches by source system (multi-source jobs)."""


def _actor(event: queue_pb2.TransitionEvent) -> str:
    actor = event.actor
    return f"{actor.service} {actor.instance}".strip() or "?"


def timeline_of(events: Sequence[queue_pb2.TransitionEvent], now: datetime) -> Timeline:
    """The timeline of a job's transitions (its ledger entries in order)."""
    moves = [e for e in events if e.to_state and e.HasField("occur_time")]
    if not moves:
        return Timeline((), None, 0.0, None, None, None, "", 0, 0, "")
    times = [e.occur_time.ToDatetime() for e in moves]
    last = moves[-1]
    ended = state_name(last.to_state) in TERMINAL
    stop = times[-1] if ended else max(now, times[-1])
    start = times[0]
    total = max((stop - start).total_seconds(), 1e-3)
    spans = []
    for index in range(len(moves)):
        end = times[index + 1] if index + 1 < len(moves) else stop
        spans.append(max(0.0, (end - times[index]).total_seconds()))
    states = [state_name(e.to_state) for e in moves]
    phases = _placed_phases(moves, states, spans)
    bars = tuple(
        Bar(
            state=states[index],
            start=times[index],
            seconds=spans[index],
            offset=100.0 * (times[index] - start).total_seconds() / total,
            width=100.0 * spans[index] / total,
            actor=_actor(event),
            attempt=event.attempt,
            reason_code=event.reason_code,
            ongoing=index == len(moves) - 1 and not ended,
            phases=tuple(phases[index]),
            note=event.note,
        )
        for index, event in enumerate(moves)
    )
    deadline = next((e.deadline.ToDatetime() for e in moves if e.HasField("deadline")), None)
    budget = (deadline - start).total_seconds() if deadline is not None else None
    return Timeline(
        bars=bars,
        start=start,
        seconds=(stop - start).total_seconds(),
        deadline=deadline,
        budget_seconds=budget,
        budget_used=(100.0 * (stop - start).total_seconds() / budget) if budget else None,
        trace_id=next((e.trace_id for e in moves if e.trace_id), ""),
        generations=1 + max(e.generation for e in moves),
        attempts=max(e.attempt for e in moves),
        tenant=moves[0].tenant,
        fetches=tuple(
            Phase(t.stage, t.phase, _seconds(t.duration), 0.0, t.source_system)
            for e in moves
            for t in e.timings
            if t.phase == "fetch"
        ),
    )


def _seconds(duration: object) -> float:
    return duration.ToTimedelta() / timedelta(seconds=1)  # type: ignore[attr-defined, no-any-return]


def _placed_phases(
    moves: Sequence[queue_pb2.TransitionEvent], states: Sequence[str], spans: Sequence[float]
) -> list[list[Phase]]:
    """Each bar's measured phases. A stage reports its timings on the last
    entry its delivery made; a queue wait belongs to the state the job waited
    in (the stage's ``waiting`` state), the work to the state it was worked
    in (``working``): the latest such bar before the reporting entry."""
    placed: list[list[Phase]] = [[] for _ in moves]
    for index, event in enumerate(moves):
        for timing in event.timings:
            known = timing.stage in STAGE_NAMES
            wanted = ""
            if known:
                step = stage(timing.stage)
                wanted = step.waiting if timing.phase == "queue_wait" else step.working
            target = next(
                (j for j in range(index - 1, -1, -1) if states[j] == wanted), max(index - 1, 0)
            )
            took = _seconds(timing.duration)
            share = 100.0 * took / spans[target] if spans[target] > 0 else 0.0
            placed[target].append(
                Phase(timing.stage, timing.phase, took, min(share, 100.0), timing.source_system)
            )
    return placed
