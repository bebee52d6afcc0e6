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


def test_a_batch_appends_exactly_what_one_by_one_appends_would(tmp_path: Path) -> None:
    """The recorder appends groups with ``append_many``; chain, view and
    duplicates must come out as appending each event alone would make them."""
    steps = ["ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING", "COMMITTING"]
    events = []
    for job, tenant in (("jobs/a1", "t1"), ("jobs/b2", "t2"), ("jobs/c3", "t1")):
        for before, after in zip(["", *steps], steps, strict=False):
            events.append(_event(job, tenant, before, after))
    rejected = _event("jobs/c3", "t1", "COMMITTING", "REJECTED")
    late = _event("jobs/a1", "t1", "ACCEPTED", "VALIDATING")  # a repeat: a duplicate
    order = [events[4], events[0], late, events[7], rejected, *events, events[2]]
    first, rest = order[:5], order[5:]

    one_by_one = Database(f"sqlite:///{tmp_path / 'one.db'}", tables.metadata)
    one_by_one.create_schema()
    expected = [one_by_one.transaction(lambda s, e=e: ledger.append(s, e)) for e in order]

    batched = Database(f"sqlite:///{tmp_path / 'many.db'}", tables.metadata)
    batched.create_schema()
    got = batched.transaction(lambda s: ledger.append_many(s, first))
    got += batched.transaction(lambda s: ledger.append_many(s, rest))
    assert got == expected
    assert got.count(True) == len(events) + 1

    def snapshot(database: Database) -> tuple[list[tuple[object, ...]], ...]:
        def read(s):  # type: ignore[no-untyped-def]
            ledger_rows = s.execute(
                select(
                    tables.ledger.c.event_id,
                    tables.ledger.c.tenant,
                    tables.ledger.c.prev_hash,
                    tables.ledger.c.entry_hash,
                ).order_by(tables.ledger.c.sequence)
            ).all()
            heads = s.execute(select(tables.chain_heads).order_by("tenant")).all()
            views = s.execute(
                select(tables.jobs.c.job, tables.jobs.c.state, tables.jobs.c.reason_code).order_by(
                    tables.jobs.c.job
                )
            ).all()
            return (
                [tuple(r) for r in ledger_rows],
                [tuple(r) for r in heads],
                [tuple(r) for r in views],
            )

        return database.transaction(read)

    assert snapshot(batched) == snapshot(one_by_one)
    assert batched.transaction(lambda s: verify_ledger(s, [])).ok


def test_losing_a_chains_last_entry_is_found_by_its_head_row(tmp_path: Path) -> None:
    """No successor links to a tenant's last entry, so only the head row
    (moved in the same transaction as every append) shows it is gone."""
    database = _db(tmp_path)
    for event in (
        _event("jobs/aa", "t1", "", "ACCEPTED"),
        _event("jobs/bb", "t2", "", "ACCEPTED"),
        _event("jobs/aa", "t1", "ACCEPTED", "VALIDATING"),
    ):
        database.transaction(lambda s, e=event: ledger.append(s, e))
    last = database.transaction(
        lambda s: (
            s.execute(
                select(tables.ledger.c.sequence)
                .where(tables.ledger.c.tenant == "t1")
                .order_by(tables.ledger.c.sequence.desc())
            )
            .scalars()
            .first()
        )
    )
    database.transaction(
        lambda s: s.execute(tables.ledger.delete().where(tables.ledger.c.sequence == last))
    )
    findings = database.transaction(lambda s: verify_ledger(s, [])).findings
    assert [(f.kind, f.tenant) for f in findings if f.kind == "deleted"] == [("deleted", "t1")]
