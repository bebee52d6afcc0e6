"""The recorder's second question: does a step fit its job's recorded
history? Judged by ``ledger.record_many`` on a real SQLite ledger, in the
append's transaction; what does not fit is kept aside, never appended."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from quire.audit import ledger, tables
from quire.audit.ledger import Arrival, Recorded
from quire.audit.succession import Refusal
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.transitions import EventFactory
from quire.type import queue_pb2

JOB, TENANT = "jobs/a1", "t1"


def _db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    return database


def _step(
    service: str, from_state: str, to_state: str, *, job: str = JOB, tenant: str = TENANT
) -> Arrival:
    task = queue_pb2.JobTask(job=job, tenant=tenant, manifest_digest="m" * 64)
    event = EventFactory(service, "i", "0").transition(
        task, from_state, to_state, attempt=1, lease_token=1
    )
    event.event_id = f"{event.event_id}-{service}-{tenant}"
    return Arrival(event, producer=service)


def _record(database: Database, *arrivals: Arrival) -> list[ledger.Outcome]:
    return database.transaction(lambda s: ledger.record_many(s, list(arrivals)))


def _entries(database: Database) -> int:
    return database.transaction(
        lambda s: s.execute(select(func.count()).select_from(tables.ledger)).scalar_one()
    )


def _findings(database: Database) -> list[tuple[str, str, str]]:
    table = tables.refused_events
    return database.transaction(
        lambda s: [
            (r.kind, r.producer, r.to_state)
            for r in s.execute(select(table).order_by(table.c.refused_at, table.c.kind))
        ]
    )


def _state(database: Database, job: str = JOB) -> str:
    return database.transaction(
        lambda s: s.execute(select(tables.jobs.c.state).where(tables.jobs.c.job == job)).scalar()
    )


def _through_signing(database: Database) -> None:
    outcomes = _record(
        database,
        _step("admission", "", "ACCEPTED"),
        _step("validator", "ACCEPTED", "VALIDATING"),
        _step("validator", "VALIDATING", "ASSEMBLING"),
        _step("assembler", "ASSEMBLING", "SIGNING"),
    )
    assert [o.recorded for o in outcomes] == [Recorded.APPENDED] * 4, "one group, in order"


def test_a_step_for_a_job_never_accepted_waits_then_is_kept_aside(tmp_path: Path) -> None:
    database = _db(tmp_path)
    ghost = _step("signer", "SIGNING", "COMMITTING", job="jobs/0b0e")
    assert [o.recorded for o in _record(database, ghost)] == [Recorded.WAITING]
    last = Arrival(ghost.event, "signer", last_chance=True)
    (refused,) = _record(database, last)
    assert (refused.recorded, refused.refusal) == (Recorded.REFUSED, Refusal.UNKNOWN_JOB)
    assert _entries(database) == 0 and _state(database, "jobs/0b0e") is None
    assert _findings(database) == [("UNKNOWN_JOB", "signer", "COMMITTING")]
    (again,) = _record(database, last)
    assert again.recorded is Recorded.DUPLICATE, "a redelivered finding is one finding"
    assert len(_findings(database)) == 1


def test_an_acceptance_arriving_after_its_jobs_steps_lets_them_in(tmp_path: Path) -> None:
    database = _db(tmp_path)
    early = _step("validator", "ACCEPTED", "VALIDATING")
    assert _record(database, early)[0].recorded is Recorded.WAITING
    accepted = _record(database, _step("admission", "", "ACCEPTED"), early)
    assert [o.recorded for o in accepted] == [Recorded.APPENDED, Recorded.APPENDED]
    assert _state(database) == "VALIDATING" and _findings(database) == []


def test_a_step_naming_another_tenant_is_refused(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _through_signing(database)
    (other,) = _record(database, _step("signer", "SIGNING", "COMMITTING", tenant="t2"))
    assert other.refusal is Refusal.OTHER_TENANT
    assert _state(database) == "SIGNING" and _entries(database) == 4


def test_a_stage_steps_in_only_in_its_turn(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _record(database, _step("admission", "", "ACCEPTED"))
    early = _step("signer", "SIGNING", "COMMITTING")
    assert _record(database, early)[0].recorded is Recorded.WAITING
    (refused,) = _record(database, Arrival(early.event, "signer", last_chance=True))
    assert refused.refusal is Refusal.OUT_OF_TURN
    assert _state(database) == "ACCEPTED"
    # A second acceptance of the same job is never a step.
    (again,) = _record(database, _step("admission", "", "ACCEPTED", tenant="t1-again"))
    assert again.refusal in (Refusal.OTHER_TENANT, Refusal.OUT_OF_TURN)


def test_a_late_step_of_a_stage_already_passed_is_appended(tmp_path: Path) -> None:
    """Work that happened reports late; the view stays where it was."""
    database = _db(tmp_path)
    _through_signing(database)
    (late,) = _record(database, _step("validator", "VALIDATING", "REVIEWING"))
    assert late.recorded is Recorded.APPENDED
    assert _state(database) == "SIGNING"


def test_nothing_follows_an_end(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _through_signing(database)
    _record(database, _step("signer", "SIGNING", "COMMITTING"))
    database.transaction(
        lambda s: ledger.append(s, _step("audit", "COMMITTING", "COMPLETED").event)
    )
    assert _state(database) == "COMPLETED"
    after = _record(
        database,
        _step("validator", "VALIDATING", "REJECTED"),
        _step("signer", "SIGNING", "FAILED"),
    )
    assert [o.refusal for o in after] == [Refusal.AFTER_END, Refusal.AFTER_END]
    assert _state(database) == "COMPLETED"
    assert database.transaction(lambda s: verify_ledger(s, [])).ok


def test_work_reporting_after_a_cancellation_is_late_not_alarming(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _record(
        database,
        _step("admission", "", "ACCEPTED"),
        _step("admission", "ACCEPTED", "CANCELLED"),
    )
    (late,) = _record(database, _step("validator", "ACCEPTED", "VALIDATING"))
    assert late.refusal is Refusal.LATE
    assert _state(database) == "CANCELLED"
    assert _findings(database) == [("LATE", "validator", "VALIDATING")]


def test_audits_own_steps_are_not_judged(tmp_path: Path) -> None:
    """Completion, retries and retirements are the authority's own: appended as given."""
    database = _db(tmp_path)
    event = _step("audit", "COMMITTING", "COMPLETED", job="jobs/00e1").event
    assert database.transaction(lambda s: ledger.append(s, event))


def test_a_forgery_taking_a_genuine_steps_id_first_does_not_block_it(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _through_signing(database)
    genuine = _step("signer", "SIGNING", "COMMITTING")
    forged = queue_pb2.TransitionEvent()
    forged.CopyFrom(genuine.event)
    forged.tenant = "t2"
    (refused,) = _record(database, Arrival(forged, "signer"))
    assert refused.refusal is Refusal.OTHER_TENANT
    (appended,) = _record(database, genuine)
    assert appended.recorded is Recorded.APPENDED
    assert _state(database) == "COMMITTING"
