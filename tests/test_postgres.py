"""The same storage promises on PostgreSQL: lease fencing, the idempotency
constraint, and the hash-chained ledger."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import MetaData, select

from quire.audit import ledger
from quire.audit import tables as audit_tables
from quire.database import Database, insert_if_absent
from quire.leases import LeaseStore, lease_table
from quire.transitions import EventFactory
from quire.type import queue_pb2


def _database(postgres, metadata: MetaData) -> Database:  # type: ignore[no-untyped-def]
    database = Database(postgres.create_database(f"q{uuid.uuid4().hex[:12]}"), metadata)
    database.create_schema()
    return database


async def test_stale_lease_cannot_commit_on_postgres(postgres) -> None:  # type: ignore[no-untyped-def]
    metadata = MetaData()
    table = lease_table(metadata)
    leases = LeaseStore(_database(postgres, metadata), table)
    first = await leases.acquire("jobs/aa")
    second = await leases.acquire("jobs/aa")
    assert not await leases.complete(first, queue_pb2.StageOutcome())
    assert await leases.complete(second, queue_pb2.StageOutcome())


async def test_concurrent_lease_acquisitions_hand_out_distinct_tokens(postgres) -> None:  # type: ignore[no-untyped-def]
    metadata = MetaData()
    table = lease_table(metadata)
    leases = LeaseStore(_database(postgres, metadata), table)
    await leases.acquire("jobs/bb")
    tokens = await asyncio.gather(*(leases.acquire("jobs/bb") for _ in range(8)))
    assert sorted(lease.token for lease in tokens) == list(range(2, 10))


def test_insert_if_absent_on_postgres(postgres) -> None:  # type: ignore[no-untyped-def]
    metadata = MetaData()
    table = lease_table(metadata)
    database = _database(postgres, metadata)
    from datetime import UTC, datetime

    row = {"job": "jobs/cc", "token": 1, "updated_at": datetime.now(UTC)}
    assert database.transaction(lambda s: insert_if_absent(s, table, row))
    assert not database.transaction(lambda s: insert_if_absent(s, table, row))


async def test_ledger_chain_holds_under_concurrent_appends_on_postgres(postgres) -> None:  # type: ignore[no-untyped-def]
    database = _database(postgres, audit_tables.metadata)
    factory = EventFactory("test", "instance", "0")
    events = [
        factory.transition(
            queue_pb2.JobTask(job=f"jobs/{index:04x}", tenant="t1"),
            "",
            "ACCEPTED",
            attempt=1,
            lease_token=1,
        )
        for index in range(20)
    ]
    await asyncio.gather(*(database.run(lambda s, e=e: ledger.append(s, e)) for e in events))
    rows = database.transaction(
        lambda s: s.execute(
            select(audit_tables.ledger).order_by(audit_tables.ledger.c.sequence)
        ).all()
    )
    assert len(rows) == 20
    previous = ledger.GENESIS
    for row in rows:
        assert row.prev_hash == previous, "appends are serialized by the chain head lock"
        assert row.entry_hash == ledger.entry_hash(row.prev_hash, row.event)
        previous = row.entry_hash


async def test_concurrent_batches_chain_each_tenant_on_postgres(postgres) -> None:  # type: ignore[no-untyped-def]
    """Batches that lock two tenants' heads in one transaction, run at once on
    several connections, neither deadlock nor fork a chain."""
    database = _database(postgres, audit_tables.metadata)
    factory = EventFactory("test", "instance", "0")

    def event(index: int, tenant: str) -> queue_pb2.TransitionEvent:
        task = queue_pb2.JobTask(job=f"jobs/{index:04x}", tenant=tenant)
        return factory.transition(task, "", "ACCEPTED", attempt=1, lease_token=1)

    batches = [
        [event(10 * b + i, ("ta", "tb")[(b + i) % 2]) for i in range(6)][:: 1 if b % 2 else -1]
        for b in range(8)
    ]
    results = await asyncio.gather(
        *(database.run(lambda s, batch=batch: ledger.append_many(s, batch)) for batch in batches)
    )
    assert all(all(appended) for appended in results)
    for tenant in ("ta", "tb"):
        rows = database.transaction(
            lambda s, t=tenant: s.execute(
                select(audit_tables.ledger)
                .where(audit_tables.ledger.c.tenant == t)
                .order_by(audit_tables.ledger.c.sequence)
            ).all()
        )
        assert len(rows) == 24
        previous = ledger.GENESIS
        for row in rows:
            assert row.prev_hash == previous
            assert row.entry_hash == ledger.entry_hash(row.prev_hash, row.event)
            previous = row.entry_hash


@pytest.mark.stack
async def test_the_whole_pipeline_runs_on_postgres(postgres, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A job, then a batch with a notification endpoint: the dispatcher's
    lease and locked pages, the end tracker's compare-and-set and the
    notification outbox, on PostgreSQL."""

    from quire.admission.v1 import batch_pb2
    from quire.client import AdmissionClient, PacketItem
    from quire.jobs import state_name
    from quire.settings import SERVICES
    from quire.stack.ports import free_port
    from quire.stack.supervisor import Stack
    from quire.testing.callbackreceiver import CallbackReceiver
    from quire.testing.pdfs import write_text_pdf
    from quire.type import job_pb2

    env = {
        f"QUIRE_{service.upper()}_DATABASE_URL": postgres.create_database(
            f"{service}_{uuid.uuid4().hex[:8]}"
        )
        for service in SERVICES
    }
    env |= {"QUIRE_NOTIFY_POLL_SECONDS": "0.1", "QUIRE_BATCH_FINISH_POLL_SECONDS": "0.2"}
    stack = Stack(tmp_path / "stack", env=env)
    info = await asyncio.to_thread(stack.start)
    receiver = CallbackReceiver(free_port()).start()
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            path = write_text_pdf(tmp_path / "doc.pdf", ["on postgres"])
            digest = (await client.upload(path)).sha256
            job = await client.wait((await client.submit([PacketItem("doc", digest)])).name)
            assert state_name(job.state) == "COMPLETED", job.reason_code

            receiver.secret = (await client.set_notification_endpoint(receiver.url)).secret
            packets = []
            for n in range(4):
                pdf = write_text_pdf(tmp_path / f"b{n}.pdf", [f"batch {n} {uuid.uuid4().hex}"])
                item = job_pb2.ManifestItem(
                    position=0, document_id=f"b{n}", sha256=(await client.upload(pdf)).sha256
                )
                packets.append(
                    batch_pb2.BatchPacket(
                        bundle_id=f"pg-{n}", manifest=job_pb2.Manifest(items=[item])
                    )
                )
            batch = await client.submit_batch(packets)
            for _ in range(600):  # 60 s at most
                if batch.name in {doc["name"] for doc in receiver.accepted.values()}:
                    break
                await asyncio.sleep(0.1)
            children = [child async for child in client.batch_jobs(batch.name)]
            done = await client.get_batch(batch.name)
            await asyncio.sleep(1.0)  # time for any duplicate to arrive
    finally:
        receiver.stop()
        await asyncio.to_thread(stack.stop)
    assert not list((tmp_path / "stack").glob("*/*.db")), "no service fell back to SQLite"
    assert [child.bundle_id for child in children] == [f"pg-{n}" for n in range(4)]
    assert done.state == batch_pb2.BATCH_STATE_DONE and done.terminal_count == 4
    notified = sorted(doc["name"] for doc in receiver.accepted.values())
    assert notified == sorted([batch.name, *(child.job for child in children)]), "one each"
    assert [r.verdict for r in receiver.received] == ["accepted"] * 5


def test_validator_replicas_starting_together_install_the_rulesets_once(postgres) -> None:  # type: ignore[no-untyped-def]
    """One replica's install is still uncommitted when another installs the same
    rulesets: the second waits, finds the row, and starts (it used to crash on
    the primary key, as two validators starting at once on one database did)."""
    import threading
    from datetime import UTC, datetime

    from quire.validator import tables as validator_tables
    from quire.validator.rulesets import DEFAULT_DIRECTORY, RulesetBook, canonical, load_directory

    database = _database(postgres, validator_tables.metadata)
    shipped = load_directory(DEFAULT_DIRECTORY)
    first = shipped[0]
    engine = database.engine
    with engine.connect() as other_replica:
        transaction = other_replica.begin()
        other_replica.execute(
            validator_tables.rulesets.insert().values(
                key=first.key,
                name=first.name,
                version=first.version,
                digest=first.digest,
                body=canonical(first.body).decode(),
                loaded_at=datetime.now(UTC),
            )
        )
        failures: list[BaseException] = []

        def install() -> None:
            try:
                RulesetBook(database).install(shipped)
            except BaseException as error:  # noqa: BLE001 - reported below
                failures.append(error)

        installing = threading.Thread(target=install)
        installing.start()
        installing.join(timeout=1.0)
        assert installing.is_alive(), "the second install waits for the first's row"
        transaction.commit()
        installing.join(timeout=30)
    assert not installing.is_alive()
    assert failures == []
    book = RulesetBook(database)
    book.reload()
    assert {r.key for r in book.all()} == {r.key for r in shipped}


async def test_a_rolled_back_append_is_no_deletion_but_a_lost_entry_is(postgres) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL's sequences are not transactional: an append rolled back (as
    when an audit replica is killed mid-transaction) uses up a sequence number.
    That gap deleted nothing, and the verifier must not say it did; an entry
    really removed is still found, in the middle by its successor's link and
    at a chain's end by the tenant's head row."""
    from quire.audit.verification import verify_ledger

    database = _database(postgres, audit_tables.metadata)
    factory = EventFactory("test", "instance", "0")

    def event(job: str, from_state: str, to_state: str) -> queue_pb2.TransitionEvent:
        task = queue_pb2.JobTask(job=job, tenant="t1")
        return factory.transition(task, from_state, to_state, attempt=1, lease_token=1)

    class _Killed(Exception):
        pass

    def append_then_die(session, e: queue_pb2.TransitionEvent) -> None:  # type: ignore[no-untyped-def]
        assert ledger.append(session, e)
        raise _Killed

    database.transaction(lambda s: ledger.append(s, event("jobs/01", "", "ACCEPTED")))
    try:
        database.transaction(lambda s: append_then_die(s, event("jobs/02", "", "ACCEPTED")))
    except _Killed:
        pass
    for e in (event("jobs/03", "", "ACCEPTED"), event("jobs/01", "ACCEPTED", "VALIDATING")):
        database.transaction(lambda s, e=e: ledger.append(s, e))
    sequences = database.transaction(
        lambda s: (
            s.execute(
                select(audit_tables.ledger.c.sequence).order_by(audit_tables.ledger.c.sequence)
            )
            .scalars()
            .all()
        )
    )
    assert len(sequences) == 3 and sequences[-1] - sequences[0] == 3, "the rollback left a gap"
    assert database.transaction(lambda s: verify_ledger(s, [])).ok

    database.transaction(
        lambda s: s.execute(
            audit_tables.ledger.delete().where(audit_tables.ledger.c.sequence == sequences[-1])
        )
    )
    findings = database.transaction(lambda s: verify_ledger(s, [])).findings
    assert ("deleted", sequences[-1]) in {(f.kind, f.sequence) for f in findings}, findings
