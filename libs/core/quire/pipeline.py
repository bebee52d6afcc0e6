"""The pipeline, declared once: its job states and its stages.

    admission ──ACCEPTED──▶ validate ──ASSEMBLING──▶ assemble ──SIGNING──▶ sign
        ──COMMITTING──▶ commit (audit) ──▶ COMPLETED

Every other table of the pipeline — which service works which stage, the
state a job waits in before a stage and works in during it, the state a
stage hands on, the history audit must see before completing a job, where a
dead-letter retry puts a job back, which stage a stalled job is re-driven to —
is derived from ``STAGES`` here, so adding or moving a stage is one edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from quire.type import job_pb2

__all__ = [
    "State",
    "Stage",
    "STAGES",
    "STAGE_NAMES",
    "QUEUED_STAGES",
    "TERMINAL",
    "ENDINGS",
    "PARKED",
    "HISTORY_BEFORE_COMPLETION",
    "stage",
    "stage_of_service",
    "steps_of",
    "stage_waiting_in",
    "stage_working_in",
]


class State(StrEnum):
    """A job's state; the same names as ``quire.type.JobState`` without its prefix."""

    ACCEPTED = "ACCEPTED"
    VALIDATING = "VALIDATING"
    REVIEWING = "REVIEWING"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    ASSEMBLING = "ASSEMBLING"
    SIGNING = "SIGNING"
    COMMITTING = "COMMITTING"
    COMPLETED = "COMPLETED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def number(self) -> int:
        """The ``JobState`` enum number carried on the wire."""
        return int(job_pb2.JobState.Value(f"JOB_STATE_{self.value}"))


@dataclass(frozen=True)
class Stage:
    """One queue-driven step of the pipeline."""

    name: str
    """The work subject's stage name: ``quire.work.<name>.<priority>``."""
    service: str
    """The service that consumes it."""
    waiting: State
    """The state a job is in when its task is published for this stage."""
    working: State
    """The state a job is in while the stage works on it."""
    hands_on: State
    """The state a job enters when this stage hands it to the next."""
    next: str | None
    """The next stage's name; None for the last, which completes the job."""
    between: tuple[State, ...] = ()
    """States the stage may move a job through after ``working``, in order."""
    limited: bool = True
    """Whether deliveries are capped (``max_deliver``); the commit stage waits
    for lagging evidence without a limit, and is never dead-lettered."""


STAGES: tuple[Stage, ...] = (
    Stage(
        "validate",
        "validator",
        State.ACCEPTED,
        State.VALIDATING,
        State.ASSEMBLING,
        "assemble",
        between=(State.REVIEWING, State.NEEDS_REVIEW),
    ),
    Stage("assemble", "assembler", State.ASSEMBLING, State.ASSEMBLING, State.SIGNING, "sign"),
    Stage("sign", "signer", State.SIGNING, State.SIGNING, State.COMMITTING, "commit"),
    Stage(
        "commit", "audit", State.COMMITTING, State.COMMITTING, State.COMPLETED, None, limited=False
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
QUEUED_STAGES: tuple[Stage, ...] = tuple(s for s in STAGES if s.limited)
"""The stages whose work can exhaust its deliveries and be dead-lettered."""

ENDINGS = frozenset({State.REJECTED, State.FAILED, State.CANCELLED})
"""Terminal states other than COMPLETED: a stage, admission or audit ends a job."""
TERMINAL = ENDINGS | {State.COMPLETED}
PARKED = frozenset({State.NEEDS_REVIEW})
"""Waiting for an operator, not stalled."""

HISTORY_BEFORE_COMPLETION: tuple[State, ...] = tuple(
    dict.fromkeys(
        state for s in STAGES for state in (s.waiting, s.working, *s.between) if state not in PARKED
    )
)
"""The transitions a job must have in the ledger before audit may complete it."""

_BY_NAME = {s.name: s for s in STAGES}
_BY_SERVICE = {s.service: s for s in STAGES}


def steps_of(service: str) -> frozenset[State]:
    """The transitions ``service`` may record (audit's recorder enforces it)."""
    if service == "admission":
        return frozenset({STAGES[0].waiting, State.CANCELLED})
    if service == "audit":
        # The dead-letter office ends jobs whose worker died on its last try;
        # COMPLETED is audit's too, but never through a queued event.
        return frozenset({State.FAILED, State.CANCELLED})
    own = stage_of_service(service)
    if own is None or not own.limited:
        return frozenset()
    return frozenset({own.working, *own.between, own.hands_on}) | ENDINGS


def stage(name: str) -> Stage:
    return _BY_NAME[name]


def stage_of_service(service: str) -> Stage | None:
    return _BY_SERVICE.get(service)


def stage_waiting_in(state: str) -> Stage | None:
    """The stage whose task a job in ``state`` waits for (None: none does)."""
    return next((s for s in STAGES if s.waiting == state), None)


def stage_working_in(state: str) -> Stage | None:
    """The stage that works on a job in ``state``, waiting for it or working."""
    return next((s for s in STAGES if state in (s.waiting, s.working)), None)
