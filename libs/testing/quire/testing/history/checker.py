"""The history checker: ``check(history, facts)`` proves each property of
issue 42 over what the clients saw (``History``) and what the system holds
afterwards (``SystemFacts``), and names the jobs that break one.

It is a pure function of the two, so that its tests feed it histories made
by hand. A job's ledger entries are read by ``quire check``'s own rules
(``quire.invariants_jobs``: generations split at each dead-letter retry,
the outcome folded from the last); the properties of signatures, of
observations and of refusals and requests have a module each.
"""

from __future__ import annotations

from collections.abc import Iterator

from quire.invariants_jobs import generations, outcome, transitions
from quire.jobs import HISTORY_BEFORE_COMPLETION, PARKED_STATES, TERMINAL_STATES
from quire.pipeline import State
from quire.testing.history.calls import one_job_per_request, refusals_typed
from quire.testing.history.facts import JobRecord, LedgerEntry, SystemFacts
from quire.testing.history.observations import no_contradiction
from quire.testing.history.ops import History
from quire.testing.history.signatures import completed, one_signature
from quire.testing.history.verdicts import (
    ENDED,
    HISTORY_WHOLE,
    LEDGER_VERIFIES,
    Verdict,
    Verdicts,
    Violation,
)

__all__ = ["check"]


def check(history: History, facts: SystemFacts) -> Verdicts:
    """Every property's verdict (``quire.testing.history.verdicts.PROPERTIES``)."""
    return Verdicts(
        (
            ended(history, facts),
            history_whole(facts),
            one_signature(history, facts),
            ledger_verifies(facts),
            no_contradiction(history, facts),
            refusals_typed(history),
            one_job_per_request(history, facts),
        )
    )


def ended(history: History, facts: SystemFacts) -> Verdict:
    """Every acknowledged job is in the ledger, ended once per generation,
    and, after the grace period, terminal or parked, as admission shows it."""
    acknowledged = sorted(history.acknowledged())
    found: list[Violation] = []
    for job in acknowledged:
        record = facts.jobs.get(job)
        if record is None or not transitions(list(record.entries)):
            found.append(Violation(job, "acknowledged, never in the ledger"))
            continue
        found += [Violation(job, detail) for detail in _ending_problems(record, facts)]
    return Verdict(ENDED, len(acknowledged), tuple(found))


def _ending_problems(record: JobRecord, facts: SystemFacts) -> Iterator[str]:
    entries = transitions(list(record.entries))
    split = generations(entries)
    for index, generation in enumerate(split):
        ends = [e.to_state for e in generation if e.to_state in TERMINAL_STATES]
        if len(ends) > 1:
            yield f"{len(ends)} terminal entries in generation {index}: {', '.join(ends)}"
        if index + 1 < len(split) and ends[:1] != [State.FAILED]:
            yield f"generation {index} was retried without ending FAILED"
    state = outcome(entries)
    if state not in TERMINAL_STATES | PARKED_STATES:
        yield f"still {state} after the {facts.grace_seconds:g} s grace period"
    if not record.state:
        yield "admission does not know it"
    elif record.state != state:
        yield f"admission shows {record.state}, the ledger {state}"


def history_whole(facts: SystemFacts) -> Verdict:
    """Each completion follows every transition ``HISTORY_BEFORE_COMPLETION``
    names, each first reached in pipeline order, and is recorded once."""
    jobs = completed(facts)
    found = [
        Violation(record.job, detail)
        for record in jobs
        for detail in _history_problems(transitions(list(record.entries)))
    ]
    return Verdict(HISTORY_WHOLE, len(jobs), tuple(found))


def _history_problems(entries: list[LedgerEntry]) -> Iterator[str]:
    completions = [e for e in entries if e.to_state == State.COMPLETED]
    if len(completions) > 1:
        yield f"completed {len(completions)} times"
    completion = completions[0]
    first: dict[str, int] = {}
    for entry in entries:
        if entry.sequence < completion.sequence:
            first.setdefault(entry.to_state, entry.sequence)
    missing = [state for state in HISTORY_BEFORE_COMPLETION if state not in first]
    if missing:
        yield f"completed at sequence {completion.sequence} without {', '.join(missing)}"
    reached = [state for state in HISTORY_BEFORE_COMPLETION if state in first]
    for earlier, later in zip(reached, reached[1:], strict=False):
        if first[later] < first[earlier]:
            yield f"{later} (sequence {first[later]}) before {earlier} ({first[earlier]})"


def ledger_verifies(facts: SystemFacts) -> Verdict:
    """Audit's ``VerifyLedger`` finds nothing, and every job's evidence
    verifies against the pinned checkpoint key and proves the entries
    ``ListJobEvents`` lists."""
    found: list[Violation] = []
    ledger = facts.ledger
    for finding in ledger.findings:
        subject = finding.job or f"sequence {finding.sequence}"
        found.append(Violation(subject, f"VerifyLedger: {finding.kind} (tenant {finding.tenant})"))
    if not ledger.ok and not ledger.findings:
        found.append(Violation("ledger", "VerifyLedger does not hold, naming nothing"))
    evidenced = 0
    for job, record in sorted(facts.jobs.items()):
        if not record.entries:
            continue
        if record.evidence is None:
            found.append(Violation(job, "no evidence exported"))
            continue
        evidenced += 1
        found += [Violation(job, f"evidence: {problem}") for problem in record.evidence.problems]
        listed = tuple(entry.to_state for entry in record.entries)
        if not record.evidence.problems and record.evidence.states != listed:
            found.append(Violation(job, "ListJobEvents lists entries its evidence does not prove"))
    return Verdict(LEDGER_VERIFIES, evidenced, tuple(found))
