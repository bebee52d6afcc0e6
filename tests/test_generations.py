"""Dead-letter retries as generations: a retried job gets new event ids, new
stage leases and new message ids, and only an operator's retry reopens a
FAILED job in audit's view."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import MetaData, select

from quire.audit import ledger, tables
from quire.audit.deadletterbook import record_letter
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.leases import LeaseStore, lease_key, lease_table
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import task_message_id

JOB = "jobs/0123456789abcdef"
WORKER = EventFactory("validator", "instance", "0")
OPERATOR = EventFactory("operator", "token-1", "0")


def _task(generation: int = 0) -> queue_pb2.JobTask:
    return queue_pb2.JobTask(job=JOB, tenant="t1", manifest_digest="m" * 64, generation=generation)


def _audit(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    return database


def _state(database: Database) -> tuple[str, str]:
    row = database.transaction(
        lambda s: s.execute(select(tables.jobs).where(tables.jobs.c.job == JOB)).one()
    )
    return row.state, row.reason_code


def _append(database: Database, event: queue_pb2.TransitionEvent) -> bool:
    return database.transaction(lambda s: ledger.append(s, event))


def _failed_job(database: Database) -> None:
    for from_state, to_state, reason in (
        ("", "ACCEPTED", ""),
        ("ACCEPTED", "VALIDATING", ""),
        ("VALIDATING", "FAILED", ReasonCode.RETRY_LIMIT_REACHED),
    ):
        _append(
            database,
            WORKER.transition(
                _task(), from_state, to_state, attempt=5, lease_token=5, reason_code=reason
            ),
        )


def test_each_generation_has_its_own_event_ids_and_message_ids() -> None:
    first = WORKER.transition(_task(0), "ACCEPTED", "VALIDATING", attempt=1, lease_token=1)
    second = WORKER.transition(_task(1), "ACCEPTED", "VALIDATING", attempt=1, lease_token=1)
    assert first.event_id != second.event_id and second.generation == 1
    assert task_message_id(JOB, "validate", 0) != task_message_id(JOB, "validate", 1)
    assert lease_key(JOB, 0) == JOB and lease_key(JOB, 1) != JOB


def test_only_an_operators_retry_reopens_a_failed_job(tmp_path: Path) -> None:
    database = _audit(tmp_path)
    _failed_job(database)
    assert _state(database) == ("FAILED", "RETRY_LIMIT_REACHED")

    late = WORKER.transition(_task(0), "ACCEPTED", "VALIDATING", attempt=6, lease_token=6)
    late.event_id = "late-duplicate-of-an-old-delivery"
    assert _append(database, late)
    assert _state(database)[0] == "FAILED", "a late event never drags a job back"
    forged = WORKER.transition(
        _task(0),
        "FAILED",
        "ACCEPTED",
        attempt=1,
        lease_token=0,
        reason_code=ReasonCode.DEAD_LETTER_RETRIED,
    )
    forged.event_id = "not-a-duplicate-id"
    assert _append(database, forged)
    assert _state(database)[0] == "FAILED", "generation 0 cannot be a retry"

    retry = OPERATOR.transition(
        _task(1),
        "FAILED",
        "ACCEPTED",
        attempt=1,
        lease_token=0,
        reason_code=ReasonCode.DEAD_LETTER_RETRIED,
    )
    assert _append(database, retry)
    assert _state(database) == ("ACCEPTED", "")
    for from_state, to_state in (("ACCEPTED", "VALIDATING"), ("VALIDATING", "ASSEMBLING")):
        _append(
            database, WORKER.transition(_task(1), from_state, to_state, attempt=1, lease_token=1)
        )
    assert _state(database)[0] == "ASSEMBLING", "the new generation moves forward again"
    assert database.transaction(lambda s: verify_ledger(s, [])).ok


async def test_a_new_generation_starts_a_fresh_lease_and_the_old_one_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    leases = LeaseStore(database, table)
    old = await leases.acquire(lease_key(JOB, 0))
    ended = queue_pb2.StageOutcome(
        events=[
            WORKER.transition(_task(), "VALIDATING", "FAILED", attempt=5, lease_token=old.token)
        ]
    )
    assert await leases.complete(old, ended)
    fresh = await leases.acquire(lease_key(JOB, 1))
    assert fresh.committed is None, "the retry is not told the failed outcome"
    again = await leases.acquire(lease_key(JOB, 0))
    assert again.committed == ended, "a stray redelivery of the old generation republishes it"


def test_the_dead_letter_book_keeps_the_latest_generation_once(tmp_path: Path) -> None:
    database = _audit(tmp_path)

    def letter(generation: int, reason: str) -> queue_pb2.DeadLetter:
        return queue_pb2.DeadLetter(
            task=_task(generation), stage="validate", reason_code=reason, deliveries=5
        )

    assert database.transaction(lambda s: record_letter(s, letter(0, "RETRY_LIMIT_REACHED")))
    assert not database.transaction(lambda s: record_letter(s, letter(0, "RETRY_LIMIT_REACHED")))
    assert database.transaction(lambda s: record_letter(s, letter(1, "STORAGE_FAILED")))
    assert not database.transaction(lambda s: record_letter(s, letter(0, "RETRY_LIMIT_REACHED")))
    rows = database.transaction(lambda s: s.execute(select(tables.dead_letters)).all())
    assert [(r.generation, r.reason_code, r.status) for r in rows] == [
        (1, "STORAGE_FAILED", "dead")
    ]
