"""A dead-letter retry's new budget, on audit's own database (no stack): the
task the retry publishes, the one a re-drive of a stalled retry publishes,
and the one a retry finished by asking again publishes all carry the
deadline the retry's ledger entry recorded, and only that one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from conftest import DeadLetters
from google.protobuf import duration_pb2

from quire.audit.retrybudget import checked_budget, retry_entry
from quire.audit.retrydrive import RetryRedriver
from quire.errors import InvalidInput
from quire.jobs import timestamp
from quire.settings import ReconcileSettings

JOB = "jobs/" + "e5" * 14
OLD_DEADLINE = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def letters(dead_letters: DeadLetters) -> DeadLetters:
    """The job FAILED at validate, past its deadline; its letter dead."""
    dead_letters.seed(
        JOB, stage="validate", reason_code="SOURCE_UNAVAILABLE", deadline=OLD_DEADLINE
    )
    return dead_letters


def _budget(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


async def test_the_retry_and_its_redrive_carry_the_new_deadline_the_ledger_records(
    letters: DeadLetters,
) -> None:
    database, desk, publisher = letters.database, letters.desk, letters.publisher
    await desk.retry(JOB, "op-1", _budget(30))
    entry = await database.read(lambda s: retry_entry(s, JOB, 1))
    assert entry is not None and entry.reason_detail == "NEW_BUDGET"
    assert entry.actor.service == "operator" and entry.actor.instance == "op-1"
    given = entry.deadline.ToNanoseconds() - entry.occur_time.ToNanoseconds()
    assert given == 30 * 10**9
    (published,) = publisher.tasks
    assert published.generation == 1 and published.deadline == entry.deadline
    assert await desk.deadline_of(JOB, 1) == entry.deadline

    redriver = RetryRedriver(
        database=database,
        publisher=publisher,  # type: ignore[arg-type]
        settings=ReconcileSettings(default_stall_seconds=0.0),
    )
    assert await redriver.redrive_stalled() == 1
    redriven = publisher.tasks[-1]
    assert redriven.redrive == 1 and redriven.deadline == entry.deadline, "not the failed task's"


async def test_a_retry_finished_by_asking_again_keeps_the_first_asks_deadline(
    letters: DeadLetters,
) -> None:
    database, desk, publisher = letters.database, letters.desk, letters.publisher
    publisher.fail = 1
    with pytest.raises(ConnectionError):
        await desk.retry(JOB, "op-1", _budget(60))  # recorded, not published
    first = await database.read(lambda s: retry_entry(s, JOB, 1))
    assert first is not None
    await desk.retry(JOB, "op-2", _budget(600))  # finishes it: the recorded deadline stands
    (published,) = publisher.tasks
    assert published.deadline == first.deadline
    row = await desk.retry(JOB, "op-3")  # already retried: nothing more
    assert row.status == "retried" and len(publisher.tasks) == 1


async def test_a_retry_without_a_budget_keeps_the_jobs_deadline(letters: DeadLetters) -> None:
    database, desk, publisher = letters.database, letters.desk, letters.publisher
    await desk.retry(JOB, "op-1")
    entry = await database.read(lambda s: retry_entry(s, JOB, 1))
    assert entry is not None and entry.reason_detail == ""
    assert entry.deadline == timestamp(OLD_DEADLINE) == publisher.tasks[0].deadline


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        (duration_pb2.Duration(), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(seconds=-1), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(seconds=1, nanos=-5), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(nanos=2_000_000_000), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(seconds=3601), "BUDGET_TOO_LONG"),
    ],
)
async def test_a_budget_out_of_bounds_is_refused_before_anything_is_done(
    letters: DeadLetters, budget: duration_pb2.Duration, reason: str
) -> None:
    database, publisher = letters.database, letters.publisher
    desk = replace(letters.desk, max_budget_seconds=3600)
    with pytest.raises(InvalidInput) as refused:
        await desk.retry(JOB, "op-1", budget)
    assert refused.value.reason == reason
    assert await database.read(lambda s: retry_entry(s, JOB, 1)) is None and not publisher.tasks
    assert checked_budget(_budget(3600), 3600) == timedelta(hours=1), "the bound itself is fine"
