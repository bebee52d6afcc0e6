"""The validator's stage work: the job's pinned ruleset over its sources.

Sources named by reference are fetched and pinned first, before any
validation (``sources.pinning``): each becomes an ordinary source of the
pinned bytes, carrying its pin, for the evaluator and every later stage. A
job of uploads only takes no extra step (not even a database read).

PASSED hands the job to the assembler; REJECTED ends it with the first
failing check's reason; NEEDS_REVIEW parks it, with the task approval will
hand on, until an operator resolves the review.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy import Connection

from quire.driversql import DriverStatement
from quire.errors import JobCancelled, PermanentError, Rejected, SystemFailure
from quire.leases import Lease
from quire.pipeline import State, Verdict
from quire.reasons import ReasonCode
from quire.rolloutboard import StageRollout
from quire.stage import Decided, StageResult, Step
from quire.type import queue_pb2
from quire.validator import tables
from quire.validator.evaluation import Evaluation, Evaluator
from quire.validator.reviewfilters import record_reasons
from quire.validator.rulesets import Ruleset, RulesetBook
from quire.validator.sources.pinning import SourcePinner, wants_fetching

__all__ = ["ValidatorWork"]


_INSERT_VALIDATION = DriverStatement(tables.validations.insert())
"""Built once: building a statement per call costs more CPU than running it."""


def _record(
    task: queue_pb2.JobTask, ruleset: Ruleset, evaluation: Evaluation, token: int
) -> Callable[[Connection], None]:
    def write(connection: Connection) -> None:
        now = datetime.now(UTC)
        _INSERT_VALIDATION.run(
            connection,
            {
                "job": task.job,
                "verdict": evaluation.verdict,
                "reason_code": evaluation.reason,
                "findings": evaluation.findings,
                "decisions": evaluation.decisions_json(),
                "ruleset": ruleset.key,
                "ruleset_digest": ruleset.digest,
                "task": task.SerializeToString(),
                "lease_token": token,
                "decided_at": now,
            },
        )
        if evaluation.verdict is Verdict.NEEDS_REVIEW:
            connection.execute(
                tables.reviews.insert().values(
                    job=task.job,
                    status="PENDING",
                    ruleset=ruleset.key,
                    decisions=evaluation.decisions_json(),
                    next_task=task.SerializeToString(),
                    created_at=now,
                    tenant=task.tenant,
                )
            )
            record_reasons(connection, task.job, evaluation.decisions)

    return write


class ValidatorWork:
    """The validate stage's work: pins the job's sources named by reference, then
    runs its ruleset (a rollout's candidate while that rollout is open)."""

    def __init__(
        self, *, evaluator: Evaluator, book: RulesetBook, sources: SourcePinner | None = None
    ) -> None:
        self._evaluator = evaluator
        self._book = book
        self._sources = sources
        self._rollout: StageRollout | None = None

    def rollout_changed(self, rollout: StageRollout | None) -> None:
        """The validate stage's latest rollout (``quire.workqueue.routing``)."""
        self._rollout = rollout

    def _runs_candidate(self, ruleset: str) -> bool:
        rollout = self._rollout
        return rollout is not None and rollout.open and rollout.candidate_ruleset == ruleset

    def ruleset_keys(self) -> list[str]:
        """The published rulesets this validator can run (its announcement)."""
        return [ruleset.key for ruleset in self._book.all()]

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        return (await self._judged(task, attempt))(lease)

    def early(self, task: queue_pb2.JobTask, attempt: int) -> Awaitable[Decided] | None:
        """The evaluation, started while the runner takes the lease: it reads
        and judges, and the one thing it may store (a repaired source's clean
        rewrite, under its own digest) any delivery stores the same. A job
        whose sources must be fetched first waits for its lease: fetching
        spends the tenant's budget and an outside system's patience."""
        return None if wants_fetching(task) else self._judged(task, attempt)

    async def _judged(self, task: queue_pb2.JobTask, attempt: int) -> Decided:
        """The verdict on ``task``, waiting for the lease to record it under."""
        # A validate rollout's candidate ruleset while that rollout is open;
        # once it is rolled back (the baseline finishing the candidate's
        # jobs, say) or promoted, the job's own. The ledger records which ran.
        candidate = None
        if task.candidate_ruleset and self._runs_candidate(task.candidate_ruleset):
            candidate = await self._book.find(task.candidate_ruleset)
        ruleset = candidate or await self._book.find(task.ruleset)
        if ruleset is None:
            raise Rejected(ReasonCode.RULESET_UNKNOWN, "the job's ruleset is not published")
        # The ruleset is pinned here: every later event and stage carries its
        # digest, a rejection's too.
        pinned = queue_pb2.JobTask()
        pinned.CopyFrom(task)
        pinned.ruleset_digest = ruleset.digest
        pinned.ruleset = ruleset.key  # the candidate's, when it ran: the ledger says which
        if wants_fetching(task):
            if self._sources is None:
                raise SystemFailure(ReasonCode.INTERNAL, "this validator fetches no sources")
            # Deferrals and failures (FAILED) raise; a rejection carries the
            # pins written so far, which every event of the ending records.
            try:
                fetched = await self._sources.pin_sources(pinned, attempt)
            except SystemFailure as failure:  # out of budget, refused, ...
                return _whatever_the_lease(
                    StageResult.fail(await self._sources.with_pins(pinned), failure)
                )
            pinned = fetched.task
            if fetched.rejection is not None:
                return _whatever_the_lease(StageResult.reject(pinned, fetched.rejection))
        try:
            evaluation = await self._evaluator.evaluate(pinned, ruleset, attempt=attempt)
        except (JobCancelled, SystemFailure):
            raise
        except PermanentError as refused:  # DATA_SHREDDED and the like
            return _whatever_the_lease(StageResult.reject(pinned, refused))
        # Later stages read a repaired source's clean rewrite; its digest in the
        # manifest (source.sha256) stays the uploaded bytes'.
        repaired = {repair.position: repair for repair in evaluation.repairs}
        for source in pinned.sources:
            if source.position in repaired:
                source.repair.CopyFrom(repaired[source.position])
        return lambda lease: _result(pinned, ruleset, evaluation, lease.token)


def _whatever_the_lease(result: StageResult) -> Decided:
    """A verdict that records nothing of its own, so needs no lease token."""
    return lambda _lease: result


def _result(
    pinned: queue_pb2.JobTask, ruleset: Ruleset, evaluation: Evaluation, token: int
) -> StageResult:
    """The stage's result for an evaluation, recorded under lease ``token``."""
    record = _record(pinned, ruleset, evaluation, token)
    if evaluation.verdict is Verdict.REJECTED:
        rejection = Rejected(
            evaluation.reason,
            "job rejected",
            detail=evaluation.detail,
            disagreements=tuple(evaluation.disagreements),
        )
        return StageResult.reject(pinned, rejection, record=record)
    accepted: dict[str, object] = {}
    if evaluation.repairs:
        accepted["repairs"] = evaluation.repairs
    if evaluation.disagreements:
        accepted["disagreements"] = evaluation.disagreements
    reviewing = Step(State.VALIDATING, State.REVIEWING, accepted)
    if evaluation.verdict is Verdict.NEEDS_REVIEW:
        parked = Step(
            State.REVIEWING, State.NEEDS_REVIEW, {"reason_code": ReasonCode.REVIEW_REQUIRED}
        )
        return StageResult.park(pinned, steps=(reviewing, parked), record=record)
    return StageResult.hand_on(pinned, steps=(reviewing,), record=record)
