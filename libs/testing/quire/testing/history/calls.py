"""The properties of the calls themselves: every refusal a client got was
typed and, where its fault was transient, retryable; and one request id
made one job.

A refusal is typed when it carries a reason code (``google.rpc.ErrorInfo``,
DESIGN.md "APIs"). A client cannot tell a service it never reached from one
that refused without details: UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED
without a reason are taken as the transport's (a service down, the
client's own deadline, a broken stream) and are retryable by their code.
Any other code needs its reason; UNKNOWN and INTERNAL are an unexpected
error reaching the client whatever they carry; a load refusal
(RESOURCE_EXHAUSTED) carries its retry hint (DESIGN.md invariant 8); and a
transient reason (a ``*_UNAVAILABLE`` dependency, a draining service) comes
with a code that says try again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from quire.reasons import ReasonCode
from quire.testing.history.facts import SystemFacts
from quire.testing.history.ops import History, Kind, Op
from quire.testing.history.verdicts import ONE_JOB_PER_REQUEST, REFUSALS_TYPED, Verdict, Violation

__all__ = ["refusals_typed", "one_job_per_request", "TRANSPORT_CODES", "TRANSIENT_REASONS"]

TRANSPORT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})
"""Codes gRPC itself ends a call with when no service answered it."""
UNEXPECTED_CODES = frozenset({"UNKNOWN", "INTERNAL"})
TRANSIENT_REASONS = frozenset(
    {reason.value for reason in ReasonCode if reason.value.endswith("_UNAVAILABLE")}
    | {ReasonCode.SERVICE_DRAINING.value}
)
"""Reasons that name a passing fault: a dependency away, a service draining."""


def refusals_typed(history: History) -> Verdict:
    refusals = list(history.of(Kind.REFUSED))
    found = [
        Violation(_subject(op), f"{op.rpc} {detail}")
        for op in refusals
        for detail in _refusal_problems(op)
    ]
    return Verdict(REFUSALS_TYPED, len(refusals), tuple(found))


def _subject(op: Op) -> str:
    return op.job or f"request {op.request_id}"


def _refusal_problems(op: Op) -> Iterator[str]:
    if op.code in UNEXPECTED_CODES:
        yield f"{op.code} {op.reason or '(no reason)'}: an unexpected error, not a refusal"
    elif not op.reason and op.code not in TRANSPORT_CODES:
        yield f"{op.code} without a reason code"
    if op.code == "RESOURCE_EXHAUSTED" and op.retry_after is None:
        yield f"RESOURCE_EXHAUSTED {op.reason} without a retry hint"
    if op.reason in TRANSIENT_REASONS and not op.retryable:
        yield f"{op.code} {op.reason}: a transient fault refused as final"


def one_job_per_request(history: History, facts: SystemFacts) -> Verdict:
    """Every acknowledgement of one request id names the same job, no job
    answers two request ids, and admission accepted no more jobs for the
    history's tenants than went unanswered."""
    jobs_of: dict[str, set[str]] = defaultdict(set)
    requests_of: dict[str, set[str]] = defaultdict(set)
    for op in history.of(Kind.ACCEPTED):
        jobs_of[op.request_id].add(op.job)
        requests_of[op.job].add(op.request_id)
    found = [
        Violation(
            f"request {request}", f"acknowledged with {len(jobs)} jobs: {', '.join(sorted(jobs))}"
        )
        for request, jobs in sorted(jobs_of.items())
        if len(jobs) > 1
    ]
    found += [
        Violation(job, f"acknowledged for {len(requests)} request ids")
        for job, requests in sorted(requests_of.items())
        if len(requests) > 1
    ]
    submitted = {op.request_id for op in history.of(Kind.INVOKE) if op.request_id}
    unanswered = submitted - set(jobs_of)
    if len(facts.unclaimed) > len(unanswered):
        found += [
            Violation(
                job,
                f"accepted for no client: {len(facts.unclaimed)} such jobs "
                f"for {len(unanswered)} unanswered request ids",
            )
            for job in facts.unclaimed
        ]
    return Verdict(ONE_JOB_PER_REQUEST, len(submitted), tuple(found))
