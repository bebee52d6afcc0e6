"""A dead-letter retry's new budget, on audit's own database (no stack): the
task the retry publishes, the one a re-drive of a stalled retry publishes,
and the one a retry finished by asking again publishes all carry the
deadline the retry's ledger entry recorded, and only that one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import duration_pb2

from quire.audit import tables
from quire.audit.deadletterdesk import DeadLetterDesk
from quire.audit.retrybudget import checked_budget, retry_entry
from quire.audit.retrydrive import RetryRedriver
from quire.database import Database
from quire.errors import InvalidInput
from quire.jobs import timestamp
from quire.settings import ReconcileSettings
from quire.type import queue_pb2

JOB = "jobs/" + "e5" * 14
OLD_DEADLINE = datetime(2026, 1, 1, tzinfo=UTC)


class _Publisher:
    """Keeps what would be published; refuses the next ``fail`` publishes."""

    def __init__(self) -> None:
        self.tasks: list[queue_pb2.JobTask] = []
        self.fail = 0

    async def publish(self, subject: str, message: Any, msg_id: str) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("queue away")
        self.tasks.append(message)

    async def publish_task(self, stage: str, task: queue_pb2.JobTask, redrive: int = 0) -> None:
        await self.publish(stage, task, f"{task.job}.{redrive}")


class _Gate:
    async def reopen(self, job: str, generation: int) -> str:
        return ""


def _dead(database: Database) -> None:
    """The job FAILED at validate, past its deadline; its letter dead."""
    now = datetime.now(UTC)
    task = queue_pb2.JobTask(job=JOB, tenant="t1", priority="interactive")
    task.deadline.CopyFrom(timestamp(OLD_DEADLINE))

    def write(session: Any) -> None:
        session.execute(
            tables.jobs.insert().values(
                job=JOB,
                tenant="t1",
                state="FAILED",
                reason_code="SOURCE_UNAVAILABLE",
                item_count=1,
                manifest_digest="0" * 64,
                output_digest="",
                ruleset_version="default@1",
                key_version="",
                created_at=now,
                updated_at=now,
            )
        )
        session.execute(
            tables.dead_letters.insert().values(
                job=JOB,
                tenant="t1",
                stage="validate",
                reason_code="SOURCE_UNAVAILABLE",
                deliveries=1,
                generation=0,
                task=task.SerializeToString(),
                status="dead",
                dead_at=now,
                resolved_by="",
            )
        )

    database.transaction(write)


@pytest.fixture
def database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    _dead(database)
    return database


def _budget(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


async def test_the_retry_and_its_redrive_carry_the_new_deadline_the_ledger_records(
    database: Database,
) -> None:
    publisher = _Publisher()
    desk = DeadLetterDesk(database, publisher, _Gate(), "test")  # type: ignore[arg-type]
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
    database: Database,
) -> None:
    publisher = _Publisher()
    desk = DeadLetterDesk(database, publisher, _Gate(), "test")  # type: ignore[arg-type]
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


async def test_a_retry_without_a_budget_keeps_the_jobs_deadline(database: Database) -> None:
    publisher = _Publisher()
    desk = DeadLetterDesk(database, publisher, _Gate(), "test")  # type: ignore[arg-type]
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
    database: Database, budget: duration_pb2.Duration, reason: str
) -> None:
    publisher = _Publisher()
    desk = DeadLetterDesk(database, publisher, _Gate(), "test", max_budget_seconds=3600)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as refused:
        await desk.retry(JOB, "op-1", budget)
    assert refused.value.reason == reason
    assert await database.read(lambda s: retry_entry(s, JOB, 1)) is None and not publisher.tasks
    assert checked_budget(_budget(3600), 3600) == timedelta(hours=1), "the bound itself is fine"
