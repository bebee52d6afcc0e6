"""A job's view, derived from its ledger entries' hashed bytes.

Audit's ``jobs`` table is an index for listing and for its own bookkeeping;
what the API serves about a job is folded here from the events themselves,
so a value edited in a table is never served as genuine, and the checker and
``quire audit verify`` can compare the index with what the ledger says. It
is shared (``quire-core``) because the operator tools fold the ledger audit
exports by the same rule (``quire check``, ``quire retention``).

The rule is the ledger's: the view moves forward only (a late event never
drags a job back), a terminal state is final, and the one way out of FAILED
is an operator's dead-letter retry. Facts (digests, versions, item count)
take the latest non-empty value. A retirement entry (bytes deleted under the
retention policy, ``quire.audit.retirement``) is not a transition: the view
skips it, so retiring a job's bytes changes nothing audit serves about it.

Deliveries and the current attempt come from the entries' ``attempt`` (the
JetStream delivery count of the message whose work recorded the entry). Only
a stage step counts: an entry a stage's worker recorded (validator,
assembler, signer, audit's commit), or the dead-letter office's ending of a
job whose worker died on its last delivery (its attempt is the deliveries
the stage used; it counts for the stage its ``from_state`` names). Not
admission's acceptance or cancellation, nor an operator's review decision or
dead-letter retry: no delivery made them. ``deliveries`` sums, per stage and
generation, the highest attempt recorded; ``attempt`` is the last step's.
Folding an entry costs O(1): one look-up of its (stage, generation)
maximum, and the running sum moves by how far the entry raises it; the small
table of maxima (at most one key per stage and generation) is copied only
when an entry raises one, never rescanned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from quire.jobs import TERMINAL_STATES, state_name, state_rank
from quire.pipeline import STAGES, State, stage_of_service, stage_working_in
from quire.reasons import ReasonCode
from quire.type import job_pb2, queue_pb2

__all__ = ["JobFacts", "apply", "fold", "is_retirement", "moves_no_job", "step_stage", "COMPARED"]

COMPARED = (
    "tenant",
    "state",
    "reason_code",
    "item_count",
    "manifest_digest",
    "output_digest",
    "ruleset_version",
    "key_version",
)
"""The fields the ``jobs`` index holds that must agree with the ledger."""


@dataclass(frozen=True)
class JobFacts:
    """A job as its ledger entries tell it, the view audit serves; never read
    from a table."""

    job: str
    tenant: str
    state: str
    reason_code: str
    item_count: int
    manifest_digest: str
    output_digest: str
    ruleset_version: str
    key_version: str
    created: datetime
    """When the first recorded event occurred (the producer's clock, hashed)."""
    updated: datetime
    """When the last recorded event occurred."""
    reason_detail: str = ""
    """The sub-code recorded with ``reason_code`` (not in the index)."""
    timings: tuple[job_pb2.PhaseTiming, ...] = ()
    """The phases of the deliveries that moved the job on, in pipeline order:
    each stage's from its latest entry that carries any (a retry's or a
    re-driven generation's measurements replace the earlier ones)."""
    deadline: datetime | None = None
    """When the job's budget runs out (every entry of a job with one carries it)."""
    pins: tuple[job_pb2.SourcePin, ...] = ()
    """What was fetched and pinned for sources named by reference: the latest
    entry's that carries any (pins never change once written)."""
    track: str = ""
    """The rollout track admission pinned the job to (``quire.tracks``): the
    latest entry's that carries one; "" when no rollout was open."""
    deliveries: int = 0
    """Deliveries of the job's tasks to stage workers so far: for each stage
    and generation, the highest attempt a step recorded, summed (0 before any
    stage step)."""
    attempt: int = 0
    """The attempt of the stage step recorded last (0 before any)."""
    step_maxima: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """The highest attempt a step recorded, per (stage, generation); never
    changed in place (a raised maximum makes a new mapping)."""


_OFFICE = "dead-letter"
"""The dead-letter office's actor: it ends a job whose worker died on its
last delivery, recording the deliveries the stage used."""


def step_stage(event: queue_pb2.TransitionEvent) -> str | None:
    """The stage whose delivery recorded ``event``; None when no delivery did
    (admission's acceptance or cancellation, an operator's decision)."""
    if event.actor.service == _OFFICE:
        gave_up = stage_working_in(state_name(event.from_state))
        return gave_up.name if gave_up is not None else None
    own = stage_of_service(event.actor.service)
    return own.name if own is not None else None


def _counted(
    facts: JobFacts | None, event: queue_pb2.TransitionEvent
) -> tuple[int, int, Mapping[tuple[str, int], int]]:
    """(deliveries, attempt, maxima) after ``event``: O(1) but when it raises
    a maximum (then the small (stage, generation) table is copied)."""
    deliveries, attempt, maxima = (
        (facts.deliveries, facts.attempt, facts.step_maxima) if facts else (0, 0, {})
    )
    stage_name = step_stage(event)
    if stage_name is None or event.attempt <= 0:
        return deliveries, attempt, maxima
    key = (stage_name, event.generation)
    highest = maxima.get(key, 0)
    if event.attempt > highest:
        deliveries += event.attempt - highest
        maxima = {**maxima, key: event.attempt}
    return deliveries, event.attempt, maxima


def is_retirement(event: queue_pb2.TransitionEvent) -> bool:
    """Whether ``event`` records retired bytes rather than a transition."""
    return event.HasField("retirement")


def moves_no_job(event: queue_pb2.TransitionEvent) -> bool:
    """Whether ``event`` is a record beside the transitions, which no job's
    view takes: retired bytes (``quire.audit.retirement``) or a change of a
    ruleset's current version (``quire.audit.rulesetchanges``)."""
    return event.HasField("retirement") or event.HasField("ruleset_change")


def _reopens(state: str, event: queue_pb2.TransitionEvent) -> bool:
    """An operator's dead-letter retry: the one way out of FAILED."""
    return (
        state == State.FAILED
        and state_name(event.from_state) == State.FAILED
        and event.reason_code == ReasonCode.DEAD_LETTER_RETRIED
        and event.generation > 0
    )


def apply(facts: JobFacts | None, event: queue_pb2.TransitionEvent) -> JobFacts:
    """The view after ``event`` was recorded on top of ``facts``."""
    if facts is not None and moves_no_job(event):
        return facts
    to_state = state_name(event.to_state)
    occurred = event.occur_time.ToDatetime()
    deliveries, attempt, maxima = _counted(facts, event)
    if facts is None:
        return JobFacts(
            job=event.job,
            tenant=event.tenant,
            state=to_state,
            reason_code=event.reason_code,
            item_count=event.item_count,
            manifest_digest=event.manifest_digest,
            output_digest=event.output_digest,
            ruleset_version=event.ruleset_version,
            key_version=event.key_version,
            created=occurred,
            updated=occurred,
            reason_detail=event.reason_detail,
            timings=_timings((), event),
            deadline=_deadline(event),
            pins=tuple(event.pins),
            track=event.track,
            deliveries=deliveries,
            attempt=attempt,
            step_maxima=maxima,
        )
    state, reason, detail = facts.state, facts.reason_code, facts.reason_detail
    if state not in TERMINAL_STATES and state_rank(to_state) > state_rank(state):
        state, reason, detail = to_state, event.reason_code, event.reason_detail
    elif _reopens(state, event):
        state, reason, detail = to_state, "", ""
    return replace(
        facts,
        state=state,
        reason_code=reason,
        reason_detail=detail,
        item_count=event.item_count or facts.item_count,
        manifest_digest=event.manifest_digest or facts.manifest_digest,
        output_digest=event.output_digest or facts.output_digest,
        ruleset_version=event.ruleset_version or facts.ruleset_version,
        key_version=event.key_version or facts.key_version,
        updated=occurred,
        timings=_timings(facts.timings, event),
        deadline=_deadline(event) or facts.deadline,
        pins=tuple(event.pins) or facts.pins,
        track=event.track or facts.track,
        deliveries=deliveries,
        attempt=attempt,
        step_maxima=maxima,
    )


def _deadline(event: queue_pb2.TransitionEvent) -> datetime | None:
    return event.deadline.ToDatetime() if event.HasField("deadline") else None


_STAGE_ORDER = {stage.name: index for index, stage in enumerate(STAGES)}


def _timings(
    kept: tuple[job_pb2.PhaseTiming, ...], event: queue_pb2.TransitionEvent
) -> tuple[job_pb2.PhaseTiming, ...]:
    if not event.timings:
        return kept
    measured = {timing.stage for timing in event.timings}
    merged = [t for t in kept if t.stage not in measured] + list(event.timings)
    return tuple(sorted(merged, key=lambda t: _STAGE_ORDER.get(t.stage, len(_STAGE_ORDER))))


def fold(events: Iterable[queue_pb2.TransitionEvent]) -> JobFacts | None:
    """A job's view from its events in ledger order; None for no events."""
    facts: JobFacts | None = None
    for event in events:
        if not moves_no_job(event):
            facts = apply(facts, event)
    return facts
