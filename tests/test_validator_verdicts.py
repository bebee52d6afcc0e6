"""The validator's stage work decides and returns; it never changes the task it
was given, and whatever it decides carries the ruleset it pinned."""

from __future__ import annotations

from pathlib import Path

from quire.database import Database
from quire.errors import DataLoss
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.stage import Verdict
from quire.type import job_pb2, queue_pb2
from quire.validator import tables
from quire.validator.rulesets import DEFAULT_DIRECTORY, RulesetBook, load_directory
from quire.validator.work import ValidatorWork

JOB = "jobs/00000000000000aa"


class _ShreddedSources:
    """Stands in for the evaluator: the tenant's data key is gone."""

    async def evaluate(self, task, ruleset, *, attempt):  # type: ignore[no-untyped-def]
        raise DataLoss(ReasonCode.DATA_SHREDDED, "the tenant's data was shredded")


def _book(tmp_path: Path) -> RulesetBook:
    database = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    database.create_schema()
    book = RulesetBook(database)
    book.install(load_directory(DEFAULT_DIRECTORY))
    return book


async def test_a_refusal_from_the_sources_carries_the_pinned_ruleset(tmp_path: Path) -> None:
    book = _book(tmp_path)
    task = queue_pb2.JobTask(
        job=JOB,
        tenant="t1",
        ruleset="default@1",
        sources=[job_pb2.SourceRef(position=1, sha256="ab" * 32)],
    )
    given = task.SerializeToString(deterministic=True)
    work = ValidatorWork(evaluator=_ShreddedSources(), book=book)  # type: ignore[arg-type]

    result = await work.process(task, Lease(JOB, 1, None), 1)

    assert result.verdict is Verdict.REJECT
    assert result.rejection is not None and result.rejection.reason is ReasonCode.DATA_SHREDDED
    ruleset = book.get("default@1")
    assert ruleset is not None
    assert result.task.ruleset_digest == ruleset.digest
    assert task.SerializeToString(deterministic=True) == given, "the given task is unchanged"
