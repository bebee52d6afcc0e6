"""The validator's stage work: the job's pinned ruleset over its sources.

PASSED hands the job to the assembler; REJECTED ends it with the first
failing check's reason; NEEDS_REVIEW parks it, with the task approval will
hand on, until an operator resolves the review.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from quire.errors import Rejected
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.stage import StageResult
from quire.type import queue_pb2
from quire.validator import tables
from quire.validator.evaluation import Evaluation, Evaluator
from quire.validator.rulesets import Ruleset, RulesetBook

__all__ = ["ValidatorWork", "SourcesRejected"]


class SourcesRejected(Rejected):
    """The job failed a check or a rule; carries the evaluation for the record."""

    def __init__(self, evaluation: Evaluation, write: Callable[[Session], None]) -> None:
        super().__init__(evaluation.reason, "job rejected", detail=evaluation.detail)
        self.write = write


def _record(
    task: queue_pb2.JobTask, ruleset: Ruleset, evaluation: Evaluation, token: int
) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        now = datetime.now(UTC)
        session.execute(
            tables.validations.insert().values(
                job=task.job,
                verdict=evaluation.verdict,
                reason_code=evaluation.reason,
                findings=evaluation.findings,
                decisions=evaluation.decisions_json(),
                ruleset=ruleset.key,
                ruleset_digest=ruleset.digest,
                task=task.SerializeToString(),
                lease_token=token,
                decided_at=now,
            )
        )
        if evaluation.verdict == "NEEDS_REVIEW":
            session.execute(
                tables.reviews.insert().values(
                    job=task.job,
                    status="PENDING",
                    ruleset=ruleset.key,
                    decisions=evaluation.decisions_json(),
                    next_task=task.SerializeToString(),
                    created_at=now,
                )
            )

    return write


class ValidatorWork:
    stage_state = "VALIDATING"
    next_state = "ASSEMBLING"
    next_stage = "assemble"

    def __init__(self, *, evaluator: Evaluator, book: RulesetBook) -> None:
        self._evaluator = evaluator
        self._book = book

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        ruleset = self._book.get(task.ruleset)
        if ruleset is None:
            raise Rejected(ReasonCode.RULESET_UNKNOWN, "the job's ruleset is not published")
        # The ruleset is pinned here: every later event and stage carries its digest.
        task.ruleset_digest = ruleset.digest
        evaluation = await self._evaluator.evaluate(task, ruleset, attempt=attempt)
        # Later stages read a repaired source's clean rewrite; its digest in the
        # manifest (source.sha256) stays the uploaded bytes'.
        repaired = {repair.position: repair for repair in evaluation.repairs}
        for source in task.sources:
            if source.position in repaired:
                source.repair.CopyFrom(repaired[source.position])
        accepted = {"repairs": evaluation.repairs} if evaluation.repairs else {}
        write = _record(task, ruleset, evaluation, lease.token)
        if evaluation.verdict == "REJECTED":
            raise SourcesRejected(evaluation, write)
        if evaluation.verdict == "NEEDS_REVIEW":
            return StageResult(
                next_task=None,
                extra_events=[
                    ("VALIDATING", "REVIEWING", accepted),
                    ("REVIEWING", "NEEDS_REVIEW", {"reason_code": ReasonCode.REVIEW_REQUIRED}),
                ],
                record=write,
            )
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        return StageResult(
            next_task=next_task,
            extra_events=[("VALIDATING", "REVIEWING", accepted)],
            record=write,
        )

    def record_rejection(
        self, task: queue_pb2.JobTask, error: Exception
    ) -> Callable[[Session], None] | None:
        return error.write if isinstance(error, SourcesRejected) else None
