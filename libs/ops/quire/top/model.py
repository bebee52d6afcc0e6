"""From scrapes to what ``quire top`` shows: each stage's figures now, and
its counters as rates between two scrapes.

Replicas: a cluster may run several processes of one stage. What each
process holds (deliveries in flight, its concurrency limit, its temporary
space, its counters) adds up across them. What each process only observes
(its stage's queue: pending messages, the oldest message's age, the age
budget; audit's count of dead letters in the shared book) is the same
reading several times over, so the highest is taken, not the sum.

Counters are turned into rates per process, then added: a process that
restarted (its counter went down) counts from zero, as Prometheus's
``rate()`` does, instead of making the sum go backwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quire.pipeline import QUEUED_STAGES
from quire.top.endpoints import Endpoint
from quire.top.scrape import Samples, Scrape

__all__ = [
    "CLASSES",
    "OUTCOMES",
    "STAGE_NAMES",
    "ServiceStatus",
    "Snapshot",
    "SourceSystemFigures",
    "BREAKER_STATES",
    "StageFigures",
    "Top",
    "Totals",
    "figures",
]

STAGE_NAMES = tuple(stage.name for stage in QUEUED_STAGES)
"""The queued stages in pipeline order (validate, assemble, sign): the
``stage`` label's values."""
CLASSES = ("interactive", "batch")
OUTCOMES = ("done", "ended", "retry", "deferred", "stale", "refused")
_COMPLETIONS = ("done", "ended")
"""A stage has finished with a job when it handed it on or ended it."""


def _matches(labels: frozenset[tuple[str, str]], where: Mapping[str, str]) -> bool:
    return all((key, value) in labels for key, value in where.items())


def _matching(samples: Samples, name: str, where: Mapping[str, str]) -> list[float]:
    return [
        value
        for (series, labels), value in samples.items()
        if series == name and _matches(labels, where)
    ]


def _unstarted(scrape: Scrape, name: str) -> bool:
    """A counter the process declares but has not counted yet: its labelled
    series appear at their first increment (jobs accepted, say), so until
    then the process's count is zero, not unknown."""
    return (
        name.endswith("_total")
        and name in scrape.declared
        and not any(series == name for series, _ in scrape.samples)
    )


def _readings(scrape: Scrape, name: str, where: Mapping[str, str]) -> list[float]:
    found = _matching(scrape.samples, name, where)
    return found or ([0.0] if _unstarted(scrape, name) else [])


@dataclass(frozen=True)
class Snapshot:
    """Every endpoint's answer at one moment (``taken_at``: monotonic seconds)."""

    taken_at: float
    scrapes: tuple[Scrape, ...]

    @property
    def answering(self) -> tuple[Scrape, ...]:
        return tuple(s for s in self.scrapes if s.up)

    def values(self, name: str, **where: str) -> list[float]:
        """Every matching sample of every answering endpoint."""
        return [v for s in self.answering for v in _readings(s, name, where)]

    def total(self, name: str, **where: str) -> float | None:
        found = self.values(name, **where)
        return sum(found) if found else None

    def highest(self, name: str, **where: str) -> float | None:
        found = self.values(name, **where)
        return max(found) if found else None

    def processes_with(self, name: str, **where: str) -> int:
        return sum(1 for s in self.answering if _matching(s.samples, name, where))


def _rise(then: float, now: float) -> float:
    return now - then if now >= then else now  # went down: the process restarted


def _increase(before: Scrape, after: Scrape, name: str, where: Mapping[str, str]) -> float | None:
    """How much one process's matching counters rose; None when it has none.
    A reset counts from zero, as does a series that appeared since."""
    if name not in before.declared:
        return None
    rises = [
        _rise(before.samples.get(key, 0.0), now)
        for key, now in after.samples.items()
        if key[0] == name and _matches(key[1], where)
    ]
    if rises:
        return sum(rises)
    return 0.0 if _unstarted(after, name) else None


def rate(before: Snapshot, after: Snapshot, name: str, **where: str) -> float | None:
    """Per second, summed over the processes that answered both times;
    None when no process did (or no time passed)."""
    elapsed = after.taken_at - before.taken_at
    if elapsed <= 0:
        return None
    earlier: dict[Endpoint, Scrape] = {s.endpoint: s for s in before.answering}
    rises = []
    for scrape in after.answering:
        if scrape.endpoint in earlier:
            rise = _increase(earlier[scrape.endpoint], scrape, name, where)
            if rise is not None:
                rises.append(rise)
    return sum(rises) / elapsed if rises else None


def _count(value: float | None) -> int | None:
    return None if value is None else round(value)


@dataclass(frozen=True)
class StageFigures:
    """One stage across its processes. None: no answering process exports it."""

    stage: str
    processes: int
    """Answering processes that work on this stage (0: its service is down)."""
    pending: Mapping[str, int | None]
    """Messages waiting, by priority class."""
    oldest_ready_age_seconds: Mapping[str, float | None]
    age_budget_seconds: Mapping[str, float | None]
    in_flight: int | None
    limit: int | None
    outcomes: Mapping[str, int | None]
    """Deliveries settled so far, by outcome (counters' current totals)."""
    retries: int | None
    completed_per_second: float | None
    """Deliveries handed on or ended here, per second (None until two scrapes)."""
    retries_per_second: float | None
    dead_letters: int | None
    temp_used_bytes: int | None
    temp_budget_bytes: int | None
    candidate_pending: int | None = None
    """Messages waiting for a rollout's candidate build (both classes; its
    consumer is capped on purpose, so this backlog is shown, not judged)."""
    candidate_oldest_ready_age_seconds: Mapping[str, float | None] | None = None

    def over_budget(self, priority: str) -> bool:
        age = self.oldest_ready_age_seconds.get(priority)
        budget = self.age_budget_seconds.get(priority)
        return age is not None and budget is not None and budget > 0 and age > budget


BREAKER_STATES = ("closed", "half-open", "open")
"""``quire_source_breaker_state``'s values 0, 1 and 2."""


@dataclass(frozen=True)
class SourceSystemFigures:
    """One source system as the validators see it.

    Each validator process keeps its own breaker per system, so the state
    shown is the worst any process holds, with how many hold it open; calls,
    failures and deferrals add up across processes."""

    system: str
    breaker: str | None
    open_in: int
    """Processes whose breaker for this system is open."""
    fetches_per_second: float | None
    failures_per_second: float | None
    deferrals_per_second: float | None


_FETCH_FAILURES = ("timeout", "error", "breaker_open")
"""Fetch outcomes that count against a system (the others are its answers)."""


def _systems(after: Snapshot) -> list[str]:
    names = {
        dict(labels).get("system", "")
        for scrape in after.answering
        for (series, labels) in scrape.samples
        if series.startswith("quire_source_")
    }
    return sorted(name for name in names if name)


def _source_system(before: Snapshot | None, after: Snapshot, system: str) -> SourceSystemFigures:
    def per_second(name: str, **where: str) -> float | None:
        return None if before is None else rate(before, after, name, system=system, **where)

    state = after.highest("quire_source_breaker_state", system=system)
    failures = [per_second("quire_source_fetches_total", outcome=o) for o in _FETCH_FAILURES]
    known = [f for f in failures if f is not None]
    return SourceSystemFigures(
        system=system,
        breaker=None if state is None else BREAKER_STATES[min(int(state), 2)],
        open_in=sum(1 for v in after.values("quire_source_breaker_state", system=system) if v >= 2),
        fetches_per_second=per_second("quire_source_fetches_total"),
        failures_per_second=sum(known) if known else None,
        deferrals_per_second=per_second("quire_source_deferrals_total"),
    )


@dataclass(frozen=True)
class Totals:
    """The whole pipeline: jobs admission accepted, jobs audit completed."""

    accepted: int | None
    completed: int | None
    accepted_per_second: float | None
    completed_per_second: float | None


@dataclass(frozen=True)
class ServiceStatus:
    service: str
    address: str
    up: bool
    error: str = ""


@dataclass(frozen=True)
class Top:
    """Everything one frame of ``quire top`` shows."""

    interval_seconds: float | None
    """Seconds between the two scrapes the rates come from (None: one scrape)."""
    stages: tuple[StageFigures, ...]
    totals: Totals
    services: tuple[ServiceStatus, ...]
    sources: tuple[SourceSystemFigures, ...] = ()
    """Source systems the validators fetch from, by name."""

    @property
    def down(self) -> tuple[ServiceStatus, ...]:
        return tuple(s for s in self.services if not s.up)

    def document(self) -> dict[str, object]:
        """What ``--json`` prints."""
        return {
            "interval_seconds": self.interval_seconds,
            "stages": {
                s.stage: {
                    "processes": s.processes,
                    "pending": dict(s.pending),
                    "oldest_ready_age_seconds": dict(s.oldest_ready_age_seconds),
                    "age_budget_seconds": dict(s.age_budget_seconds),
                    "in_flight": s.in_flight,
                    "limit": s.limit,
                    "outcomes": dict(s.outcomes),
                    "retries": s.retries,
                    "completed_per_second": s.completed_per_second,
                    "retries_per_second": s.retries_per_second,
                    "dead_letters": s.dead_letters,
                    "temp_used_bytes": s.temp_used_bytes,
                    "temp_budget_bytes": s.temp_budget_bytes,
                    "candidate": {
                        "pending": s.candidate_pending,
                        "oldest_ready_age_seconds": dict(
                            s.candidate_oldest_ready_age_seconds or {}
                        ),
                    },
                }
                for s in self.stages
            },
            "totals": {
                "accepted": self.totals.accepted,
                "completed": self.totals.completed,
                "accepted_per_second": self.totals.accepted_per_second,
                "completed_per_second": self.totals.completed_per_second,
            },
            "services": [
                {"service": s.service, "address": s.address, "up": s.up, "error": s.error}
                for s in self.services
            ],
            "source_systems": {
                s.system: {
                    "breaker": s.breaker,
                    "open_in": s.open_in,
                    "fetches_per_second": s.fetches_per_second,
                    "failures_per_second": s.failures_per_second,
                    "deferrals_per_second": s.deferrals_per_second,
                }
                for s in self.sources
            },
        }


def _stage(before: Snapshot | None, after: Snapshot, stage: str) -> StageFigures:
    def per_second(name: str, **where: str) -> float | None:
        return None if before is None else rate(before, after, name, stage=stage, **where)

    completions = [
        per_second("quire_stage_outcomes_total", outcome=outcome) for outcome in _COMPLETIONS
    ]
    known = [r for r in completions if r is not None]
    temp_used = after.total("quire_temp_space_used_bytes", stage=stage)
    temp_budget = after.total("quire_temp_space_budget_bytes", stage=stage)
    return StageFigures(
        stage=stage,
        processes=after.processes_with("quire_stage_concurrency_limit", stage=stage),
        pending={
            c: _count(after.highest("quire_queue_pending_messages", stage=stage, **{"class": c}))
            for c in CLASSES
        },
        oldest_ready_age_seconds={
            c: after.highest("quire_queue_oldest_ready_age_seconds", stage=stage, **{"class": c})
            for c in CLASSES
        },
        age_budget_seconds={
            c: after.highest("quire_queue_age_budget_seconds", stage=stage, **{"class": c})
            for c in CLASSES
        },
        in_flight=_count(after.total("quire_stage_in_flight", stage=stage)),
        limit=_count(after.total("quire_stage_concurrency_limit", stage=stage)),
        outcomes={
            o: _count(after.total("quire_stage_outcomes_total", stage=stage, outcome=o))
            for o in OUTCOMES
        },
        retries=_count(after.total("quire_stage_retries_total", stage=stage)),
        completed_per_second=sum(known) if known else None,
        retries_per_second=per_second("quire_stage_retries_total"),
        dead_letters=_count(after.highest("quire_dead_letters", stage=stage)),
        temp_used_bytes=_count(temp_used),
        temp_budget_bytes=_count(temp_budget),
        candidate_pending=_count(
            after.highest("quire_queue_candidate_pending_messages", stage=stage)
        ),
        candidate_oldest_ready_age_seconds={
            c: after.highest(
                "quire_queue_candidate_oldest_ready_age_seconds", stage=stage, **{"class": c}
            )
            for c in CLASSES
        },
    )


def figures(before: Snapshot | None, after: Snapshot) -> Top:
    """One frame: gauges from ``after``, rates from ``before`` to ``after``."""

    def per_second(name: str) -> float | None:
        return None if before is None else rate(before, after, name)

    return Top(
        interval_seconds=None if before is None else after.taken_at - before.taken_at,
        stages=tuple(_stage(before, after, stage) for stage in STAGE_NAMES),
        totals=Totals(
            accepted=_count(after.total("quire_jobs_accepted_total")),
            completed=_count(after.total("quire_jobs_completed_total")),
            accepted_per_second=per_second("quire_jobs_accepted_total"),
            completed_per_second=per_second("quire_jobs_completed_total"),
        ),
        services=tuple(
            ServiceStatus(s.endpoint.service, s.endpoint.address, s.up, s.error)
            for s in after.scrapes
        ),
        sources=tuple(_source_system(before, after, name) for name in _systems(after)),
    )
