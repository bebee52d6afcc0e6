"""``quire check`` names what an attack on Quire's internal channels leaves
behind (issue 11): a signed artifact for a job audit does not show COMPLETED,
an artifact whose input is not its job's assembled packet, a job audit knows
but admission never accepted, and more artifacts than completions.

Each test tampers with a copy of a real run's data directory the way the
attack would have left it (a forged sign task makes the signer write an
artifact and commit its records; forged events add correctly chained ledger
entries) and asserts that the attack's own kind is reported. The real run is
tests/test_invariants.py's, made once per test session."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_invariants import FinishedRun, finished_run

from quire.audit import ledger as audit_ledger
from quire.audit import tables as audit_tables
from quire.database import Database
from quire.invariants import Finding, check
from quire.invariants_blobs import Artifact
from quire.invariants_provenance import provenance_findings
from quire.invariants_records import PacketRef
from quire.invariants_snapshot import AcceptedJob, JobView, LedgerEntry, Snapshot, read_snapshot
from quire.jobs import job_id, new_job_id
from quire.testing.sealedstore import plaintext
from quire.type import queue_pb2

pytestmark = pytest.mark.stack

ATTACK_KINDS = {"artifact_not_completed", "artifact_input_mismatch", "artifacts_exceed_completions"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """A stopped stack with one job of each outcome: COMPLETED, REJECTED,
    NEEDS_REVIEW and CANCELLED: the session's one, shared with test_invariants.py."""
    return finished_run(tmp_path_factory)


@pytest.fixture
def copy(run: FinishedRun, tmp_path: Path) -> Path:
    """A private copy of the stopped run's data directory, to tamper with."""
    target = tmp_path / "data"
    shutil.copytree(run.data_dir, target, ignore=shutil.ignore_patterns("nats", "logs"))
    return target


def _db(data_dir: Path, service: str) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / service / f"{service}.db")


def _artifact(data_dir: Path, tenant: str, job: str) -> Path:
    return data_dir / "blobs" / "signed" / tenant / f"{job_id(job)}.pdf"


def _outcome(data_dir: Path, service: str, job: str) -> queue_pb2.StageOutcome:
    with _db(data_dir, service) as db:
        (data,) = db.execute("SELECT outcome FROM stage_leases WHERE job = ?", (job,)).fetchone()
    return queue_pb2.StageOutcome.FromString(data)


def _store_outcome(data_dir: Path, service: str, job: str, outcome: queue_pb2.StageOutcome) -> None:
    with _db(data_dir, service) as db:
        db.execute(
            "INSERT INTO stage_leases (job, token, outcome, updated_at) VALUES (?, 1, ?, "
            "'2026-11-30 00:00:00') ON CONFLICT (job) DO UPDATE SET outcome = excluded.outcome",
            (job, outcome.SerializeToString()),
        )


def _renamed(packet: PacketRef) -> PacketRef:
    """Another of the tenant's blobs, as a forged sign task would name it."""
    other = hashlib.sha256(b"another document").hexdigest()
    return PacketRef(packet.blob_key.rsplit("/", 1)[0] + f"/{other}", other, packet.size_bytes)


def _name_packet(data_dir: Path, service: str, job: str, packet: PacketRef) -> None:
    """Make ``service``'s committed outcome for ``job`` hand on ``packet``."""
    outcome = _outcome(data_dir, service, job)
    outcome.next_task.assembled.blob_key = packet.blob_key
    outcome.next_task.assembled.sha256 = packet.sha256
    _store_outcome(data_dir, service, job, outcome)


def _found(data_dir: Path) -> set[tuple[str, str, str]]:
    return {(f.kind, f.job, f.detail) for f in check(data_dir).findings}


def test_the_untampered_run_shows_where_its_artifact_came_from(
    run: FinishedRun, copy: Path
) -> None:
    """The facts the attack findings compare are read, and agree, on a clean run."""
    job = run.jobs["COMPLETED"]
    snapshot = read_snapshot(copy, {}, stopped=True)
    packet = snapshot.assemblies[job]
    assert packet.size_bytes > 0 and packet.blob_key.startswith("assembled/")
    assert snapshot.assembler_handed[job] == [PacketRef(packet.blob_key, packet.sha256)]
    assert snapshot.signer_inputs[job] == [PacketRef(packet.blob_key, packet.sha256)]
    signed = plaintext(
        copy, _artifact(copy, run.tenant, job).relative_to(copy / "blobs").as_posix()
    )
    assembled = plaintext(copy, packet.blob_key)
    assert signed[: len(assembled)] == assembled, "the signature is an incremental update"
    assert check(copy).findings == []


@pytest.mark.parametrize("state", ["REJECTED", "NEEDS_REVIEW", "CANCELLED"])
def test_a_signed_artifact_for_a_job_not_completed_is_reported(
    run: FinishedRun, copy: Path, state: str
) -> None:
    """A forged sign task for a job that never reached signing: the signer
    signs the packet the task names (here the completed job's), records it,
    and leaves a valid artifact under the victim job's name."""
    done, victim = run.jobs["COMPLETED"], run.jobs[state]
    shutil.copyfile(_artifact(copy, run.tenant, done), _artifact(copy, run.tenant, victim))
    outcome = _outcome(copy, "signer", done)
    outcome.next_task.job = victim
    _store_outcome(copy, "signer", victim, outcome)
    found = _found(copy)
    assert ("artifact_not_completed", victim, state) in found
    assert ("artifact_input_mismatch", victim, "no assembly recorded") in found
    assert ("artifacts_exceed_completions", "", "2 artifacts, 1 completed") in found
    assert {kind for kind, _job, _detail in found} <= ATTACK_KINDS


def test_an_artifact_for_a_rejected_job_alone_is_reported(run: FinishedRun, copy: Path) -> None:
    """Only the file, as when the signer's records are lost or never made."""
    done, victim = run.jobs["COMPLETED"], run.jobs["REJECTED"]
    shutil.copyfile(_artifact(copy, run.tenant, done), _artifact(copy, run.tenant, victim))
    assert _found(copy) == {
        ("artifact_not_completed", victim, "REJECTED"),
        ("artifact_input_mismatch", victim, "no assembly recorded"),
        ("artifacts_exceed_completions", "", "2 artifacts, 1 completed"),
    }


def test_a_signing_of_another_blob_than_the_assembled_packet_is_reported(
    run: FinishedRun, copy: Path
) -> None:
    """A forged sign task for a job in flight names another blob: what the
    signer committed as its input is not what the assembler made."""
    job = run.jobs["COMPLETED"]
    packet = read_snapshot(copy, {}, stopped=True).assemblies[job]
    _name_packet(copy, "signer", job, _renamed(packet))
    assert _found(copy) == {("artifact_input_mismatch", job, "signer input differs")}


def test_an_assembler_record_other_than_what_was_signed_is_reported(
    run: FinishedRun, copy: Path
) -> None:
    job = run.jobs["COMPLETED"]
    other = hashlib.sha256(b"another packet").hexdigest()
    with _db(copy, "assembler") as db:
        db.execute("UPDATE assemblies SET sha256 = ? WHERE job = ?", (other, job))
    assert _found(copy) == {
        ("artifact_input_mismatch", job, "assembler hand-off differs"),
        ("artifact_input_mismatch", job, "signer input differs"),
        ("artifact_input_mismatch", job, "signed revision differs"),
    }


def test_an_artifact_whose_signed_revision_is_not_the_packet_is_reported(
    run: FinishedRun, copy: Path
) -> None:
    """Every record agrees on a packet, but the artifact's signed bytes are
    another's: only the artifact itself shows it."""
    job = run.jobs["COMPLETED"]
    forged = _renamed(read_snapshot(copy, {}, stopped=True).assemblies[job])
    with _db(copy, "assembler") as db:
        db.execute(
            "UPDATE assemblies SET blob_key = ?, sha256 = ? WHERE job = ?",
            (forged.blob_key, forged.sha256, job),
        )
    for service in ("assembler", "signer"):
        _name_packet(copy, service, job, forged)
    assert _found(copy) == {("artifact_input_mismatch", job, "signed revision differs")}


def test_a_job_admission_never_accepted_but_audit_completed_is_reported(
    run: FinishedRun, copy: Path
) -> None:
    """Forged events, appended as audit's recorder appends them (so the
    chain verifies), make audit show a job COMPLETED that admission never
    accepted."""
    done = run.jobs["COMPLETED"]
    forged = f"jobs/{new_job_id()}"
    with _db(copy, "audit") as db:
        events = [
            queue_pb2.TransitionEvent.FromString(data)
            for (data,) in db.execute(
                "SELECT event FROM ledger WHERE job = ? ORDER BY sequence", (done,)
            )
        ]
    database = Database(f"sqlite:///{copy / 'audit' / 'audit.db'}", audit_tables.metadata)
    try:
        for event in events:
            event.event_id = event.event_id.replace(job_id(done), job_id(forged))
            event.job = forged
            assert database.transaction(lambda s, e=event: audit_ledger.append(s, e))
    finally:
        database.close()
    report = check(copy)
    assert Finding("job_not_accepted", forged) in report.findings
    assert not {kind for kind in report.kinds() if kind.startswith("ledger_")}, "chained"
    assert {f.job for f in report.findings} == {forged}
    assert report.jobs_by_state["COMPLETED"] == 2


def test_one_more_artifact_than_completions_is_reported(run: FinishedRun, copy: Path) -> None:
    """An artifact under a name no job has: its own finding, and the count's."""
    stray = f"jobs/{new_job_id()}"
    source = _artifact(copy, run.tenant, run.jobs["COMPLETED"])
    shutil.copyfile(source, _artifact(copy, run.tenant, stray))
    assert _found(copy) == {
        ("artifact_without_job", stray, ""),
        ("artifacts_exceed_completions", "", "2 artifacts, 1 completed"),
    }


def _entry(sequence: int, from_state: str, to_state: str) -> LedgerEntry:
    return LedgerEntry(
        sequence, f"e{sequence}", "jobs/ab", "t", from_state, to_state, "", "", True, True
    )


def _snapshot(failed_from: str) -> Snapshot:
    states = ["ACCEPTED", "VALIDATING", "ASSEMBLING", "SIGNING"]
    entries = [_entry(i + 1, "", state) for i, state in enumerate(states)]
    entries.append(_entry(len(entries) + 1, failed_from, "FAILED"))
    return Snapshot(
        accepted={"jobs/ab": AcceptedJob("jobs/ab", "t")},
        ledger=entries,
        views={"jobs/ab": JobView("jobs/ab", "FAILED")},
        signatures={},
        verification=None,
        missing_databases=(),
        assemblies={"jobs/ab": PacketRef("assembled/t/p", "p", 10)},
    )


def test_an_artifact_left_by_a_signing_that_failed_is_tolerated() -> None:
    """The signer may die after writing the artifact and before committing on
    its last delivery: the job ends FAILED out of SIGNING, with the artifact of
    its own packet. That is no attack; failing out of any other state is."""
    artifact = Artifact("signed/t/ab.pdf", "t", "jobs/ab", "s", revision_sha256="p")
    assert provenance_findings(_snapshot("SIGNING"), [artifact]) == []
    assert provenance_findings(_snapshot("VALIDATING"), [artifact]) == [
        Finding("artifact_not_completed", "jobs/ab", detail="FAILED"),
        Finding("artifacts_exceed_completions", detail="1 artifacts, 0 completed"),
    ]
    forged = Artifact("signed/t/ab.pdf", "t", "jobs/ab", "s", revision_sha256="other")
    assert provenance_findings(_snapshot("SIGNING"), [forged]) == [
        Finding("artifact_input_mismatch", "jobs/ab", detail="signed revision differs")
    ]


@pytest.mark.parametrize(
    ("column", "value"),
    [("event", "'rewritten as text'"), ("event", "7"), ("tenant", "42"), ("prev_hash", "x'00'")],
)
def test_a_ledger_row_of_another_type_is_a_finding_not_a_crash(
    run: FinishedRun, copy: Path, column: str, value: str
) -> None:
    """A database writer puts a value of another type in a ledger column:
    ``quire check`` reports it, and nothing of the row reaches its report."""
    job = run.jobs["COMPLETED"]
    with _db(copy, "audit") as db:
        (sequence,) = db.execute(
            "SELECT max(sequence) FROM ledger WHERE job = ?", (job,)
        ).fetchone()
        db.execute(f"UPDATE ledger SET {column} = {value} WHERE sequence = ?", (sequence,))
    report = check(copy)
    assert not report.ok
    assert any(f.sequence == sequence for f in report.findings), report.findings
    assert "rewritten" not in " ".join(str(f) for f in report.findings)
