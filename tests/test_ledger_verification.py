"""Tamper tests: edit, delete, reorder and insert ledger rows directly in the
database; verification detects each and says where. A rewrite that recomputes
every hash is caught by a signed checkpoint held outside the database."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select, text, update

from quire.audit import ledger, tables
from quire.audit.checkpoints import CheckpointSigner, load_checkpoints, read_checkpoint_files
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("test", "instance", "0")
STATES = ["ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING", "COMMITTING", "COMPLETED"]


@pytest.fixture
def audit(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    for job in ("jobs/aa", "jobs/bb"):
        previous = ""
        for state in STATES:
            task = queue_pb2.JobTask(job=job, tenant="t1" if job == "jobs/aa" else "t2")
            event = FACTORY.transition(task, previous, state, attempt=1, lease_token=1)
            database.transaction(lambda s, e=event: ledger.append(s, e))
            previous = state
    signer = CheckpointSigner(tmp_path / "keys")
    signer.write(database.transaction(signer.take), tmp_path / "checkpoints")
    return database, signer, tmp_path / "checkpoints"


def _verify(audit):  # type: ignore[no-untyped-def]
    database, signer, folder = audit
    files = read_checkpoint_files(folder, signer.public_pem)
    return database.transaction(
        lambda s: verify_ledger(
            s, files.checkpoints, heads=files.heads, refused=files.refused, missing=files.missing
        )
    )


def _t1_sequences(database: Database) -> list[int]:
    return database.transaction(
        lambda s: [
            r.sequence
            for r in s.execute(
                select(tables.ledger.c.sequence)
                .where(tables.ledger.c.tenant == "t1")
                .order_by(tables.ledger.c.sequence)
            )
        ]
    )


def test_an_untouched_ledger_verifies(audit) -> None:  # type: ignore[no-untyped-def]
    report = _verify(audit)
    assert (
        report.ok
        and report.entries == 14
        and report.chains == 2
        and report.checkpoints_checked == 2
    )


def test_an_edited_entry_is_found(audit) -> None:  # type: ignore[no-untyped-def]
    database = audit[0]
    target = _t1_sequences(database)[3]
    database.transaction(
        lambda s: s.execute(
            update(tables.ledger).where(tables.ledger.c.sequence == target).values(event=b"forged")
        )
    )
    assert ("edited", target) in {(f.kind, f.sequence) for f in _verify(audit).findings}


def test_a_deleted_entry_is_found(audit) -> None:  # type: ignore[no-untyped-def]
    database = audit[0]
    target = _t1_sequences(database)[2]
    database.transaction(
        lambda s: s.execute(tables.ledger.delete().where(tables.ledger.c.sequence == target))
    )
    assert ("deleted", target) in {(f.kind, f.sequence) for f in _verify(audit).findings}


def test_reordered_entries_are_found(audit) -> None:  # type: ignore[no-untyped-def]
    database = audit[0]
    first, second = _t1_sequences(database)[2:4]

    def swap(session) -> None:  # type: ignore[no-untyped-def]
        table = tables.ledger
        rows = {
            r.sequence: r
            for r in session.execute(select(table).where(table.c.sequence.in_([first, second])))
        }
        for sequence, other in ((first, second), (second, first)):
            source = rows[other]
            session.execute(
                update(table)
                .where(table.c.sequence == sequence)
                .values(
                    event_id=f"swap-{sequence}",
                    event=source.event,
                    prev_hash=source.prev_hash,
                    entry_hash=source.entry_hash,
                )
            )

    database.transaction(swap)
    kinds = {(f.kind, f.sequence) for f in _verify(audit).findings}
    assert ("reordered", first) in kinds or ("reordered", second) in kinds


def test_an_inserted_entry_is_found(audit) -> None:  # type: ignore[no-untyped-def]
    database = audit[0]
    sequences = _t1_sequences(database)
    at = sequences[4]

    def insert(session) -> None:  # type: ignore[no-untyped-def]
        table = tables.ledger
        for sequence in sorted(
            (s for s in session.execute(select(table.c.sequence)).scalars() if s >= at),
            reverse=True,
        ):
            session.execute(
                update(table).where(table.c.sequence == sequence).values(sequence=sequence + 1)
            )
        before = session.execute(select(table).where(table.c.sequence == at - 1)).one()
        forged = b"forged event"
        session.execute(
            table.insert().values(
                sequence=at,
                event_id="forged",
                job="jobs/aa",
                tenant="t1",
                from_state="",
                to_state="COMPLETED",
                reason_code="",
                event=forged,
                prev_hash=before.entry_hash,
                entry_hash=ledger.entry_hash(before.entry_hash, forged),
                recorded_at=before.recorded_at,
            )
        )

    database.transaction(insert)
    assert ("inserted", at) in {(f.kind, f.sequence) for f in _verify(audit).findings}


def _renoted(data: bytes) -> bytes:
    """The same event with a different operator note: every column still agrees."""
    event = queue_pb2.TransitionEvent.FromString(data)
    event.note = "rewritten"
    return event.SerializeToString(deterministic=True)


def _rewrite_t1(session) -> None:  # type: ignore[no-untyped-def]
    """Change t1's third entry and recompute every hash and the chain head, as
    a writer of audit's database who knows the scheme would."""
    table = tables.ledger
    rows = session.execute(
        select(table).where(table.c.tenant == "t1").order_by(table.c.sequence)
    ).all()
    previous = ledger.GENESIS
    for index, row in enumerate(rows):
        event = _renoted(row.event) if index == 2 else row.event
        digest = ledger.entry_hash(previous, event)
        session.execute(
            update(table)
            .where(table.c.sequence == row.sequence)
            .values(event=event, prev_hash=previous, entry_hash=digest)
        )
        previous = digest
    session.execute(
        text("UPDATE chain_heads SET head_hash = :h WHERE tenant = 't1'"), {"h": previous}
    )


def test_a_rewrite_that_recomputes_every_hash_is_caught_by_the_checkpoint(audit) -> None:  # type: ignore[no-untyped-def]
    database = audit[0]
    database.transaction(_rewrite_t1)
    findings = _verify(audit).findings
    assert {f.kind for f in findings} == {"checkpoint"}
    assert {f.tenant for f in findings} == {"t1"}
    assert {f.column for f in findings} == {"", "log head"}, "the chain head and the Merkle root"


def test_a_forged_checkpoint_file_is_not_trusted(audit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    database, signer, folder = audit
    impostor = CheckpointSigner(tmp_path / "impostor")
    impostor.write(database.transaction(impostor.take), tmp_path / "forged")
    assert load_checkpoints(tmp_path / "forged", signer.public_pem) == []
    assert len(load_checkpoints(folder, signer.public_pem)) == 2


@pytest.mark.stack
async def test_the_running_audit_service_checkpoints_and_finds_tampering(tmp_path: Path) -> None:
    import asyncio
    import sqlite3

    import grpc

    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.client import AdmissionClient, PacketItem
    from quire.stack.supervisor import Stack
    from quire.testing.pdfs import write_text_pdf

    # A drain of 5 s, as the other stacks of the suite: audit's own (20 s by
    # default) was sometimes taken whole when it stopped, for 38 s in all.
    stack = Stack(tmp_path / "stack", env={"QUIRE_DRAIN_SECONDS": "5"})
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["ledger"]))).sha256
            await client.wait((await client.submit([PacketItem("d", digest)])).name)
        await asyncio.to_thread(stack.stop_service, "audit")  # drains, then checkpoints
        folder = Path(stack.data_dir) / "audit" / "checkpoints"
        assert list(folder.glob("*.json")), "a signed checkpoint was written out of the database"
        with sqlite3.connect(Path(stack.data_dir) / "audit" / "audit.db") as db:
            db.execute("UPDATE ledger SET reason_code = 'X', event = X'00' WHERE sequence = 3")
        await asyncio.to_thread(stack.start_service, "audit")
        await asyncio.to_thread(stack.wait_healthy)
        async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
            report = await audit_service_pb2_grpc.AuditServiceStub(channel).VerifyLedger(
                audit_service_pb2.VerifyLedgerRequest(),
                metadata=(("authorization", f"Bearer {info.operator_token()}"),),
            )
        assert not report.ok
        assert ("edited", 3) in {(f.kind, f.sequence) for f in report.findings}
        assert report.checkpoints_checked >= 1
    finally:
        await asyncio.to_thread(stack.stop)


def test_an_evidence_export_verifies_offline_and_a_tampered_one_does_not(audit) -> None:  # type: ignore[no-untyped-def]
    import base64
    import copy
    import json

    from cryptography.hazmat.primitives import serialization
    from test_evidence_format import verify_evidence as verify_independently

    from quire.audit.evidence import build_evidence
    from quire.evidenceverify import public_key_fingerprint, summaries, verify_evidence

    database, signer, _folder = audit
    first = database.transaction(signer.take)
    # The tenant's log grows after the job; a second checkpoint covers both.
    for job in ("jobs/cc", "jobs/dd"):
        task = queue_pb2.JobTask(job=job, tenant="t1")
        event = FACTORY.transition(task, "", "ACCEPTED", attempt=1, lease_token=1)
        database.transaction(lambda s, e=event: ledger.append(s, e))
    documents = first + database.transaction(signer.take)
    evidence = database.transaction(
        lambda s: build_evidence(s, "jobs/aa", documents, signer.public_pem)
    )
    trusted = public_key_fingerprint(signer.public_pem)
    assert verify_evidence(evidence, trusted) == []
    assert [e["to_state"] for e in summaries(evidence)] == STATES
    assert len(evidence["consistency"]) == 1, "from the first covering checkpoint to the latest"

    # Written to the specification, without Quire's code: the same file verifies.
    public = serialization.load_pem_public_key(signer.public_pem.encode()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    proven = verify_independently(json.dumps(evidence), "quire/t1", public)
    assert [index for index, _ in proven] == [e["index"] for e in evidence["entries"]]

    edited = copy.deepcopy(evidence)
    last = queue_pb2.TransitionEvent.FromString(base64.b64decode(edited["entries"][-1]["entry"]))
    last.output_digest = "f" * 64
    edited["entries"][-1]["entry"] = base64.b64encode(last.SerializeToString()).decode()
    assert verify_evidence(edited, trusted)

    proof = copy.deepcopy(evidence)
    hashes = proof["entries"][0]["inclusion_proof"]
    hashes[0] = base64.b64encode(bytes(32)).decode()
    assert verify_evidence(proof, trusted)

    other_origin = copy.deepcopy(evidence)
    other_origin["origin"] = "quire/t2"
    assert verify_evidence(other_origin, trusted)

    impostor = CheckpointSigner(Path(_folder).parent / "impostor-keys")
    forged = build_evidence_with(database, impostor)
    assert any("trusted" in p for p in verify_evidence(forged, trusted))


def build_evidence_with(database, signer):  # type: ignore[no-untyped-def]
    from quire.audit.evidence import build_evidence

    documents = database.transaction(signer.take)
    return database.transaction(
        lambda s: build_evidence(s, "jobs/aa", documents, signer.public_pem)
    )


@pytest.mark.parametrize("part", ["length", "head_hash", "note size", "note root", "signature"])
def test_an_edited_checkpoint_file_is_reported(audit, part: str) -> None:  # type: ignore[no-untyped-def]
    import json

    _database, _signer, folder = audit
    path = sorted(folder.glob("*t1.json"))[0]
    document = json.loads(path.read_text())
    if part == "length":
        document["checkpoint"]["length"] -= 1
    elif part == "head_hash":
        document["checkpoint"]["head_hash"] = "0" * 64
    elif part == "note size":
        origin, size, rest = document["note"].split("\n", 2)
        document["note"] = "\n".join((origin, str(int(size) - 1), rest))
    elif part == "note root":
        origin, size, root, rest = document["note"].split("\n", 3)
        document["note"] = "\n".join((origin, size, "A" * 43 + "=", rest))
    else:
        document["signature"] = document["signature"][::-1]
    path.write_text(json.dumps(document))
    findings = _verify(audit).findings
    assert ("checkpoint_file", path.name) in {(f.kind, f.column) for f in findings}


ODD_ROWS = [
    ("event", "'an event rewritten as text'"),
    ("event", "12345"),
    ("event", "x'ffffffffff'"),
    ("prev_hash", "x'00ff'"),
    ("prev_hash", "'not hex at all'"),
    ("entry_hash", "42"),
    ("tenant", "42"),
    ("to_state", "x'00'"),
]


@pytest.mark.parametrize(("column", "value"), ODD_ROWS)
def test_a_row_of_any_odd_type_is_a_finding_never_an_error(audit, column: str, value: str) -> None:  # type: ignore[no-untyped-def]
    """SQLite keeps whatever a writer puts in a column: verification names the
    entry, and evidence over it is refused as DATA_LOSS, not an internal error."""
    from quire.audit.evidence import build_evidence
    from quire.errors import DataLoss

    database, signer, _folder = audit
    target = _t1_sequences(database)[2]
    database.transaction(
        lambda s: s.execute(
            text(f"UPDATE ledger SET {column} = {value} WHERE sequence = :s"), {"s": target}
        )
    )
    report = _verify(audit)
    assert not report.ok
    assert target in {f.sequence for f in report.findings}, report.findings
    documents = database.transaction(signer.take)
    try:
        database.transaction(lambda s: build_evidence(s, "jobs/aa", documents, signer.public_pem))
    except DataLoss as refused:
        assert refused.reason.value == "LEDGER_DAMAGED"
        assert "rewritten" not in refused.message


def _grow(database: Database, tenant: str, job: str) -> None:
    task = queue_pb2.JobTask(job=job, tenant=tenant)
    event = FACTORY.transition(task, "", "ACCEPTED", attempt=1, lease_token=1)
    database.transaction(lambda s: ledger.append(s, event))


async def test_no_checkpoint_is_signed_over_a_rewrite(audit) -> None:  # type: ignore[no-untyped-def]
    """Audit proves each tenant's stored log consistent with its last signed
    head before signing again: after a rewrite that recomputes every hash, t1
    gets nothing signed (however it grows), t2 goes on, and the honest
    checkpoint stays, so verification keeps failing."""
    from quire.audit.checkpoints import CheckpointBook

    database, signer, folder = audit
    refusals: list[int] = []
    book = CheckpointBook(database, signer, folder, refused=lambda: refusals.append(1))
    before = {path.name: path.read_text() for path in folder.glob("*.json")}
    assert await book.take() == 0, "nothing grew: nothing signed again"
    database.transaction(_rewrite_t1)
    _grow(database, "t1", "jobs/ee")
    _grow(database, "t2", "jobs/ff")
    assert await book.take() == 1, "t2 only"
    assert refusals == [1]
    after = {path.name: path.read_text() for path in folder.glob("*.json")}
    assert {n: after[n] for n in before} == before, "no checkpoint file replaced"
    (grown,) = set(after) - set(before)
    assert grown.endswith("-t2.json") and '"previous_length": 7' in after[grown]
    findings = _verify(audit).findings
    assert {f.kind for f in findings} == {"checkpoint"} and {f.tenant for f in findings} == {"t1"}


async def test_a_checkpoint_for_one_tenant_reads_and_proves_that_tenants_log_only(  # type: ignore[no-untyped-def]
    audit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an evidence export takes: a round for one tenant builds one
    tree and reads that tenant's files (a tenant named with another's name
    as its tail included), so its cost does not grow with other tenants'
    logs; the others grow until the next whole round."""
    from quire.audit import checkpoints
    from quire.audit.checkpoints import CheckpointBook

    database, signer, folder = audit
    book = CheckpointBook(database, signer, folder)
    for tenant, job in (("t1", "jobs/ee"), ("t2", "jobs/ff"), ("x-t1", "jobs/dd")):
        _grow(database, tenant, job)
    built: list[int] = []
    real_tree = checkpoints.tenant_tree

    def counted(entries):  # type: ignore[no-untyped-def]
        built.append(len(entries))
        return real_tree(entries)

    monkeypatch.setattr(checkpoints, "tenant_tree", counted)
    before = {path.name for path in folder.glob("*.json")}
    assert await book.take(tenant="t1") == 1
    assert built == [8], "one tree, of t1's eight entries"
    (signed,) = {path.name for path in folder.glob("*.json")} - before
    assert signed == "000000000008-t1.json"
    assert {d["checkpoint"]["tenant"] for d in book.documents("t1")} == {"t1"}
    assert [c.length for c in book.load("t1")] == [7, 8]
    assert {d["checkpoint"]["tenant"] for d in book.documents("x-t1")} == set()
    assert await book.take() == 2, "t2 and x-t1 at the next whole round"
    assert {d["checkpoint"]["tenant"] for d in book.documents("x-t1")} == {"x-t1"}
    assert not _verify(audit).findings


def test_a_deleted_checkpoint_is_a_finding(audit) -> None:  # type: ignore[no-untyped-def]
    database, signer, folder = audit
    first = {path.name for path in folder.glob("*-t2.json")}
    _grow(database, "t2", "jobs/ff")
    last = read_checkpoint_files(folder, signer.public_pem).latest_heads()
    signer.write(database.transaction(lambda s: signer.take_round(s, last)).documents, folder)
    for name in first:
        (folder / name).unlink()
    findings = _verify(audit).findings
    assert [(f.kind, f.tenant, f.sequence) for f in findings] == [("checkpoint_missing", "t2", 7)]


def test_a_checkpoint_file_is_written_once(audit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    database, signer, _folder = audit
    folder = tmp_path / "once"
    documents = database.transaction(signer.take)
    signer.write(documents, folder)
    written = {path.name: path.read_text() for path in folder.glob("*.json")}
    later = database.transaction(signer.take)  # the same heads at another time
    assert later != documents
    signer.write(later, folder)
    assert {path.name: path.read_text() for path in folder.glob("*.json")} == written


@contextmanager
def _files_limited_to(size: int) -> Iterator[None]:
    """Writes past ``size`` bytes fail (``EFBIG``), as on a disk that fills
    mid-write; the limit is this process's own and is restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_checkpoint_file_is_whole_or_absent(audit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A write that fails midway leaves nothing under the checkpoint's name
    (a reader would have read it torn, and the next round, finding the name
    taken, would have kept the torn file for good); the next round writes it
    whole."""
    database, signer, _folder = audit
    folder = tmp_path / "torn"
    folder.mkdir()
    documents = database.transaction(signer.take)
    with _files_limited_to(64), pytest.raises(OSError):
        signer.write(documents, folder)
    assert list(folder.iterdir()) == [], "no file, torn or temporary, is left"
    signer.write(documents, folder)
    assert len(load_checkpoints(folder, signer.public_pem)) == len(documents)


@pytest.mark.stack
async def test_a_rewritten_ledger_stays_unverified_past_the_checkpoint_interval(
    tmp_path: Path,
) -> None:
    """The issue's attack on the running stack: a COMPLETED entry's output
    digest changed in audit's database, every hash and the chain head
    recomputed. Past the checkpoint interval the ledger still does not
    verify, no checkpoint was signed over the rewrite, and the refusal is
    counted for the alert."""
    import asyncio
    import sqlite3

    import grpc
    import httpx

    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.client import AdmissionClient, PacketItem
    from quire.stack.supervisor import Stack
    from quire.testing.pdfs import write_text_pdf

    stack = Stack(
        tmp_path / "stack",
        env={"QUIRE_DRAIN_SECONDS": "5", "QUIRE_AUDIT_CHECKPOINT_SECONDS": "0.5"},
    )
    info = await asyncio.to_thread(stack.start)
    folder = Path(stack.data_dir) / "audit" / "checkpoints"
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["rewrite"]))).sha256
            done = await client.wait((await client.submit([PacketItem("d", digest)])).name)
        with sqlite3.connect(Path(stack.data_dir) / "audit" / "audit.db") as db:
            tenant, length = db.execute("SELECT tenant, length FROM chain_heads").fetchone()
        for _ in range(100):  # the head with the completion, signed
            if (folder / f"{length:012d}-{tenant}.json").exists():
                break
            await asyncio.sleep(0.1)
        signed = {path.name: path.read_text() for path in folder.glob("*.json")}
        assert f"{length:012d}-{tenant}.json" in signed
        with sqlite3.connect(Path(stack.data_dir) / "audit" / "audit.db") as db:
            rows = db.execute(
                "SELECT sequence, event, to_state FROM ledger WHERE tenant = ? ORDER BY sequence",
                (tenant,),
            ).fetchall()
            previous = ledger.GENESIS
            for sequence, data, to_state in rows:
                if to_state == "COMPLETED":
                    event = queue_pb2.TransitionEvent.FromString(data)
                    event.output_digest = "0" * 64
                    data = event.SerializeToString(deterministic=True)
                digest_now = ledger.entry_hash(previous, data)
                db.execute(
                    "UPDATE ledger SET event = ?, prev_hash = ?, entry_hash = ? WHERE sequence = ?",
                    (data, previous, digest_now, sequence),
                )
                previous = digest_now
            db.execute("UPDATE chain_heads SET head_hash = ? WHERE tenant = ?", (previous, tenant))
        await asyncio.sleep(2.0)  # four checkpoint intervals
        assert {path.name: path.read_text() for path in folder.glob("*.json")} == signed
        async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
            report = await audit_service_pb2_grpc.AuditServiceStub(channel).VerifyLedger(
                audit_service_pb2.VerifyLedgerRequest(),
                metadata=(("authorization", f"Bearer {info.operator_token()}"),),
            )
        assert not report.ok
        assert "checkpoint" in {f.kind for f in report.findings}
        metrics = httpx.get(f"http://{info.metrics_endpoints['audit']}/metrics").text
        refused = [
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("quire_audit_checkpoints_refused_total ")
        ]
        assert refused and refused[0] >= 1
        assert done.output_digest != "0" * 64
    finally:
        await asyncio.to_thread(stack.stop)


def _aa_evidence(database: Database, signer: CheckpointSigner) -> dict:  # type: ignore[type-arg]
    from quire.audit.evidence import build_evidence

    documents = database.transaction(signer.take)
    return database.transaction(
        lambda s: build_evidence(s, "jobs/aa", documents, signer.public_pem)
    )


def test_evidence_is_read_strictly(audit) -> None:  # type: ignore[no-untyped-def]
    """A repeated member name, an index given as a string, and entries that
    are not the canonical encoding of their event, or that carry only one of
    a retirement's two signs, are refused (readers would differ on them)."""
    import copy

    from quire.audit.evidence import dumps
    from quire.evidenceverify import public_key_fingerprint, repeated_names, verify_evidence

    database, signer, _folder = audit
    evidence = _aa_evidence(database, signer)
    trusted = public_key_fingerprint(signer.public_pem)
    assert verify_evidence(evidence, trusted) == []
    text = dumps(evidence)
    assert repeated_names(text) == []
    doubled = text.replace('"job": "jobs/aa"', '"job": "jobs/zz", "job": "jobs/aa"', 1)
    assert repeated_names(doubled) == ["job"]
    as_text = copy.deepcopy(evidence)
    as_text["entries"][0]["index"] = str(as_text["entries"][0]["index"])
    assert any("JSON integer" in p for p in verify_evidence(as_text, trusted))
    as_flag = copy.deepcopy(evidence)
    as_flag["entries"][0]["index"] = bool(as_flag["entries"][0]["index"])
    assert verify_evidence(as_flag, trusted)

    # One sign of a retirement without the other, appended as audit would.
    task = queue_pb2.JobTask(job="jobs/aa", tenant="t1")
    half = FACTORY.transition(
        task, "COMPLETED", "COMPLETED", attempt=1, lease_token=1, reason_code="BYTES_RETIRED"
    )
    half.event_id = "half-a-retirement"
    database.transaction(lambda s: ledger.append(s, half))
    problems = verify_evidence(_aa_evidence(database, signer), trusted)
    assert "a retirement marked by only one of its two signs" in problems


@pytest.mark.parametrize(
    "tail",
    [bytes([0x10, 0x05]), bytes([0xF8, 0x06, 0x01])],
    ids=["a known field with a wrong wire type", "an unknown field"],
)
def test_an_entry_not_canonically_encoded_is_refused(audit, tail: bytes) -> None:  # type: ignore[no-untyped-def]
    from quire.evidenceverify import public_key_fingerprint, verify_evidence

    database, signer, _folder = audit

    def append_raw(session) -> None:  # type: ignore[no-untyped-def]
        table = tables.ledger
        last = session.execute(
            select(table).where(table.c.tenant == "t1").order_by(table.c.sequence.desc())
        ).first()
        task = queue_pb2.JobTask(job="jobs/aa", tenant="t1")
        event = FACTORY.transition(task, "COMMITTING", "COMPLETED", attempt=2, lease_token=1)
        event.event_id = "odd-encoding"
        data = event.SerializeToString(deterministic=True) + tail
        digest = ledger.entry_hash(last.entry_hash, data)
        session.execute(
            table.insert().values(
                event_id=event.event_id,
                job="jobs/aa",
                tenant="t1",
                from_state="COMMITTING",
                to_state="COMPLETED",
                reason_code="",
                event=data,
                prev_hash=last.entry_hash,
                entry_hash=digest,
                recorded_at=last.recorded_at,
            )
        )
        session.execute(
            text("UPDATE chain_heads SET head_hash = :h, length = length + 1 WHERE tenant = 't1'"),
            {"h": digest},
        )

    database.transaction(append_raw)
    trusted = public_key_fingerprint(signer.public_pem)
    problems = verify_evidence(_aa_evidence(database, signer), trusted)
    assert any("not canonically encoded" in p for p in problems), problems
