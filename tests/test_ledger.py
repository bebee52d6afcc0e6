"""The ledger: one entry per event id, hash-chained per tenant, view moves forward only."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from quire.audit import ledger, tables
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("test", "instance", "0")


def _db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    return database


def _event(job: str, tenant: str, from_state: str, to_state: str) -> queue_pb2.TransitionEvent:
    task = queue_pb2.JobTask(job=job, tenant=tenant, manifest_digest="m" * 64)
    return FACTORY.transition(task, from_state, to_state, attempt=1, lease_token=1)


def test_duplicate_events_leave_one_entry(tmp_path: Path) -> None:
    database = _db(tmp_path)
    event = _event("jobs/aa", "t1", "", "ACCEPTED")
    assert database.transaction(lambda s: ledger.append(s, event))
    assert not database.transaction(lambda s: ledger.append(s, event))
    rows = database.transaction(lambda s: s.execute(select(tables.ledger)).all())
    assert len(rows) == 1
    assert database.transaction(lambda s: verify_ledger(s, [])).ok


def test_entries_chain_per_tenant(tmp_path: Path) -> None:
    database = _db(tmp_path)
    events = [
        _event("jobs/aa", "t1", "", "ACCEPTED"),
        _event("jobs/bb", "t2", "", "ACCEPTED"),
        _event("jobs/aa", "t1", "ACCEPTED", "VALIDATING"),
    ]
    for event in events:
        database.transaction(lambda s, e=event: ledger.append(s, e))
    rows = database.transaction(
        lambda s: s.execute(select(tables.ledger).order_by(tables.ledger.c.sequence)).all()
    )
    t1 = [row for row in rows if row.tenant == "t1"]
    assert t1[0].prev_hash == ledger.GENESIS
    assert t1[1].prev_hash == t1[0].entry_hash
    for row in rows:
        assert row.entry_hash == ledger.entry_hash(row.prev_hash, row.event)
    assert rows[1].prev_hash == ledger.GENESIS, "each tenant has its own chain"


def test_a_late_event_never_moves_a_job_back(tmp_path: Path) -> None:
    database = _db(tmp_path)
    for from_state, to_state in [
        ("ACCEPTED", "VALIDATING"),
        ("VALIDATING", "REVIEWING"),
        ("", "ACCEPTED"),
    ]:
        event = _event("jobs/aa", "t1", from_state, to_state)
        database.transaction(lambda s, e=event: ledger.append(s, e))
    state = database.transaction(lambda s: s.execute(select(tables.jobs.c.state)).scalar_one())
    assert state == "REVIEWING"
    report = database.transaction(lambda s: verify_ledger(s, []))
    assert report.ok and report.entries == 3, "out-of-order arrival still chains cleanly"
