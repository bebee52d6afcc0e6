"""Which recorded step may follow a job's recorded history.

The recorder already knows that an event's producer may take that kind of
step (``recorder.may_record``). Here the step must also fit the job as the
ledger has it (its view, ``jobview``), judged under the chain head's lock
just before the append:

- a job begins with admission's ACCEPTED; any other first step is not yet
  explicable (its ACCEPTED may still be on its way) and waits, then is
  refused as ``UNKNOWN_JOB``;
- every step names the tenant that ACCEPTED named (``OTHER_TENANT``);
- a stage steps in only once the job has reached the state its stage waits
  in (the signer after the assembler handed the job to signing, ...); an
  earlier step waits, then is refused as ``OUT_OF_TURN``. Steps of a stage
  the job has already passed are late arrivals of work that happened, and are
  appended (the view moves forward only);
- nothing follows an end. After a cancellation or a failure the dead-letter
  office recorded, work that was still under way can still report: that is
  ``LATE`` (kept aside, expected now and then). Anything else after an end,
  such as a rejection after COMPLETED, is ``AFTER_END``.

A refused event is never appended: it is kept aside as a finding
(``refused_events``), counted (``quire_audit_events_refused_total{kind}``)
and reported by ``quire audit verify`` and ``quire check``.
"""

from __future__ import annotations

from enum import StrEnum

from quire.jobs import TERMINAL_STATES, state_name, state_rank
from quire.jobview import JobFacts
from quire.pipeline import State, stage_of_service
from quire.type import queue_pb2

__all__ = ["Refusal", "Wait", "judge_step", "ACTORS_OF_STAGE_SERVICE"]


class Refusal(StrEnum):
    """Why an event was kept out of the ledger (a finding's kind)."""

    UNKNOWN_JOB = "UNKNOWN_JOB"
    OTHER_TENANT = "OTHER_TENANT"
    OUT_OF_TURN = "OUT_OF_TURN"
    AFTER_END = "AFTER_END"
    LATE = "LATE"


class Wait(StrEnum):
    """A step not explicable yet: delivered again later, refused as ``kind`` at last."""

    UNKNOWN_JOB = Refusal.UNKNOWN_JOB.value
    OUT_OF_TURN = Refusal.OUT_OF_TURN.value

    @property
    def refusal(self) -> Refusal:
        return Refusal(self.value)


ACTORS_OF_STAGE_SERVICE = {"operator": "validator"}
"""Actors that step for a stage's service: an operator's review decision is the validator's."""

_ENDED_FROM_OUTSIDE = frozenset({State.CANCELLED.value, State.FAILED.value})
"""Ends made while a worker may still be busy: admission's cancellation, the
dead-letter office's failure."""


def judge_step(view: JobFacts | None, event: queue_pb2.TransitionEvent) -> Refusal | Wait | None:
    """None when ``event`` may be appended after ``view`` (the job's view so
    far, None for a job with no entry); else why not, or why not yet."""
    to_state = state_name(event.to_state)
    actor = event.actor.service
    if view is None:
        if to_state == State.ACCEPTED and actor == "admission":
            return None
        return Wait.UNKNOWN_JOB
    if event.tenant != view.tenant:
        return Refusal.OTHER_TENANT
    if view.state in TERMINAL_STATES:
        if view.state in _ENDED_FROM_OUTSIDE or to_state == State.CANCELLED:
            return Refusal.LATE
        return Refusal.AFTER_END
    if to_state == State.ACCEPTED:
        return Refusal.OUT_OF_TURN  # a job is accepted once (a repeat has the same id)
    stage = stage_of_service(ACTORS_OF_STAGE_SERVICE.get(actor, actor))
    if stage is not None and stage.limited and state_rank(view.state) < state_rank(stage.waiting):
        return Wait.OUT_OF_TURN
    return None
