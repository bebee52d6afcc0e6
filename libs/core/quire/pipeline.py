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

__all__ = [
    "State",
    "Stage",
    "Verdict",
    "STAGES",
    "ADMISSION",
    "AUDIT",
    "SERVICES",
    "WORKER_SERVICES",
    "TEMP_SPACE_SERVICES",
    "STAGE_NAMES",
    "QUEUED_STAGES",
    "QUEUED_STAGE_NAMES",
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
        from quire.type import job_pb2  # protobuf only where the wire number is needed

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
    temp_space: bool = False
    """Whether its workers hold documents in temporary space under the blob
    store (``quire.tempspace``: a budget, a gauge, a sweep)."""


STAGES: tuple[Stage, ...] = (
    Stage(
        "validate",
        "validator",
        State.ACCEPTED,
        State.VALIDATING,
        State.ASSEMBLING,
        "assemble",
        between=(State.REVIEWING, State.NEEDS_REVIEW),
        temp_space=True,
    ),
    Stage(
        "assemble",
        "assembler",
        State.ASSEMBLING,
        State.ASSEMBLING,
        State.SIGNING,
        "sign",
        temp_space=True,
    ),
    Stage("sign", "signer", State.SIGNING, State.SIGNING, State.COMMITTING, "commit"),
    Stage(
        "commit", "audit", State.COMMITTING, State.COMMITTING, State.COMPLETED, None, limited=False
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
QUEUED_STAGES: tuple[Stage, ...] = tuple(s for s in STAGES if s.limited)
"""The stages whose work can exhaust its deliveries and be dead-lettered."""
QUEUED_STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in QUEUED_STAGES)
"""Their names: the stages a rollout or an operator's re-drive can name."""

ADMISSION = "admission"
"""The service that accepts jobs and publishes the first stage's task."""
AUDIT = STAGES[-1].service
"""The service that keeps the ledger and alone completes a job (the last stage)."""
SERVICES: tuple[str, ...] = (ADMISSION, *dict.fromkeys(s.service for s in STAGES))
"""Every service, in pipeline order: admission, then each stage's."""
WORKER_SERVICES: tuple[str, ...] = tuple(s.service for s in QUEUED_STAGES)
"""The services that work a queued stage's documents (sandboxes, leases)."""
TEMP_SPACE_SERVICES: tuple[str, ...] = tuple(s.service for s in STAGES if s.temp_space)
"""The services whose workers hold documents in temporary space."""


class Verdict(StrEnum):
    """The validator's decision on a job: it goes on, ends, or waits for a person."""

    PASSED = "PASSED"
    REJECTED = "REJECTED"
    NEEDS_REVIEW = "NEEDS_REVIEW"

    @property
    def state(self) -> State:
        """The state the job enters on this verdict."""
        return _VERDICT_STATES[self]


_VERDICT_STATES = {
    Verdict.PASSED: STAGES[0].hands_on,
    Verdict.REJECTED: State.REJECTED,
    Verdict.NEEDS_REVIEW: State.NEEDS_REVIEW,
}

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


_OWN_STEPS: dict[str, frozenset[State]] = {
    ADMISSION: frozenset({STAGES[0].waiting, State.CANCELLED}),
    # The dead-letter office ends jobs whose worker died on its last try;
    # COMPLETED is audit's too, but never through a queued event.
    AUDIT: frozenset({State.FAILED, State.CANCELLED}),
}
"""Transitions of the services that are not a queued stage's worker."""
_STAGE_STEPS: dict[str, frozenset[State]] = {
    s.service: frozenset({s.working, *s.between, s.hands_on}) | ENDINGS for s in QUEUED_STAGES
}


def steps_of(service: str) -> frozenset[State]:
    """The transitions ``service`` may record (audit's recorder enforces it)."""
    return _OWN_STEPS.get(service) or _STAGE_STEPS.get(service, frozenset())


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
