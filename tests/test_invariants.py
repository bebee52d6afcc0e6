"""The invariant checker (``quire check``): a real run with every kind of
outcome passes, idle and stopped; then copies of its data directory are
tampered with, one promise at a time, and each is reported by its kind.
That run is made once per test session and shared with
tests/test_invariants_attacks.py (``finished_run``)."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from test_faults_common import Running, eventually, kept_armed, running_stack, wait_all

from quire.audit import ledger as audit_ledger
from quire.audit import tables as audit_tables
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.main import main as quire_main
from quire.client import PacketItem
from quire.database import Database
from quire.invariants import KINDS, CheckReport, Finding, check
from quire.invariants_jobs import generations, outcome
from quire.invariants_snapshot import LedgerEntry, read_snapshot
from quire.jobs import job_id, new_job_id, state_name, state_value
from quire.readonlydb import read_only_engine
from quire.runtime import connect_nats
from quire.settings import SERVICES
from quire.tempspace import temp_prefix
from quire.testing.consumers import pause
from quire.testing.pdfs import write_form_pdf, write_text_pdf
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, consumer_name

pytestmark = pytest.mark.stack

CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
UNSIGNED_LEASE = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}
SECRET_TEXT = "confidential-page-text"
"""Written into the documents; must never appear in the checker's output."""


@dataclass(frozen=True)
class FinishedRun:
    data_dir: Path
    jobs: dict[str, str]
    """Outcome -> job name: COMPLETED, REJECTED, NEEDS_REVIEW, CANCELLED."""
    tenant: str
    idle: CheckReport
    stopped: CheckReport


async def _cancelled_job(running: Running, digest: str) -> str:
    """A job cancelled while its validate task waits in a paused queue."""
    nc = await connect_nats(
        running.stack.nats_url, "quire-test-pause", **running.stack.nats_login()
    )
    js = nc.jetstream(timeout=10)
    consumer = consumer_name("validate", "interactive")
    try:
        await pause(js, WORK_STREAM, consumer, minutes=2)
        job = await running.client.submit([PacketItem("c", digest)])
        await running.client.cancel(job.name)
        await js.resume_consumer(WORK_STREAM, consumer)
    finally:
        await nc.close()
    return job.name


async def _finished_run(directory: Path) -> FinishedRun:
    async with running_stack(directory / "stack") as running:
        client = running.client
        good = write_text_pdf(directory / "good.pdf", [SECRET_TEXT, "two"])
        whole = write_text_pdf(directory / "whole.pdf", [SECRET_TEXT] * 3).read_bytes()
        truncated = directory / "truncated.pdf"
        truncated.write_bytes(whole[: len(whole) * 2 // 3])
        lease = write_form_pdf(directory / "lease.pdf", [CLAUSES, SECRET_TEXT], UNSIGNED_LEASE)
        good_digest = (await client.upload(good)).sha256
        bad_digest = (await client.upload(truncated)).sha256
        lease_digest = (await client.upload(lease)).sha256
        names = {
            "COMPLETED": (await client.submit([PacketItem("g", good_digest)])).name,
            "REJECTED": (await client.submit([PacketItem("b", bad_digest)])).name,
            "NEEDS_REVIEW": (
                await client.submit([PacketItem("l", lease_digest)], ruleset="lease-renewal")
            ).name,
            "CANCELLED": await _cancelled_job(running, good_digest),
        }
        finished = await wait_all(client, list(names.values()), timeout=60)
        assert {o: state_name(finished[n].state) for o, n in names.items()} == {o: o for o in names}
        idle = await asyncio.to_thread(check, running.data_dir)
    stopped = await asyncio.to_thread(check, directory / "stack")
    signed = next((directory / "stack" / "blobs" / "signed").iterdir())
    return FinishedRun(directory / "stack", names, signed.name, idle, stopped)


def finished_run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """The finished run, made once per test session and shared read-only.

    This module and tests/test_invariants_attacks.py only read it (each test
    tampers with a copy), so the first to ask starts the stack and the others,
    in any pytest-xdist worker, wait for it under a file lock and reuse it."""
    base = tmp_path_factory.getbasetemp()
    # Under pytest-xdist each worker's base is popen-gwN in the session's directory.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    saved = root / "invariants-run.pickle"
    with open(root / "invariants-run.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved.exists():
            return pickle.loads(saved.read_bytes())  # type: ignore[no-any-return]
        made = asyncio.run(_finished_run(Path(tempfile.mkdtemp(prefix="invariants-", dir=root))))
        saved.write_bytes(pickle.dumps(made))
        return made


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    return finished_run(tmp_path_factory)


@pytest.fixture
def copy(run: FinishedRun, tmp_path: Path) -> Path:
    """A private copy of the stopped run's data directory, to tamper with."""
    target = tmp_path / "data"
    shutil.copytree(run.data_dir, target, ignore=shutil.ignore_patterns("nats", "logs"))
    return target


def _audit(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / "audit" / "audit.db")


def _artifact(data_dir: Path, tenant: str, job: str) -> Path:
    return data_dir / "blobs" / "signed" / tenant / f"{job_id(job)}.pdf"


def test_a_finished_run_with_every_outcome_passes_idle_and_stopped(run: FinishedRun) -> None:
    for report, stopped in ((run.idle, False), (run.stopped, True)):
        assert report.findings == [], report.findings
        assert report.ok and report.stopped is stopped
        assert report.jobs_accepted == 4
        assert dict(report.jobs_by_state) == {
            "CANCELLED": 1,
            "COMPLETED": 1,
            "NEEDS_REVIEW": 1,
            "REJECTED": 1,
        }
        assert report.artifacts == 1
        assert report.ledger_entries >= 7 + 3 + 4 + 2
        assert report.temp_entries == 0
    assert run.stopped.checkpoints_checked >= 1, "the shutdown checkpoint was verified"


def test_the_check_writes_nothing(copy: Path) -> None:
    def fingerprint() -> dict[str, str]:
        return {
            str(p.relative_to(copy)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(copy.rglob("*"))
            if p.is_file()
        }

    before = fingerprint()
    assert check(copy).ok
    assert check(copy, stopped=False).ok  # the mode=ro path, as on a running stack
    after = fingerprint()
    assert {k: v for k, v in after.items() if not k.endswith(("-shm", "-wal"))} == before


def test_a_deleted_artifact_is_missing(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["COMPLETED"]
    _artifact(copy, run.tenant, job).unlink()
    report = check(copy)
    assert {(f.kind, f.job) for f in report.findings} == {("artifact_missing", job)}
    assert not report.ok


def test_a_changed_artifact_does_not_match_its_digest(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["COMPLETED"]
    with open(_artifact(copy, run.tenant, job), "ab") as handle:
        handle.write(b"%appended\n")
    assert ("artifact_digest_mismatch", job) in {(f.kind, f.job) for f in check(copy).findings}


def test_a_stray_artifact_has_no_job(run: FinishedRun, copy: Path) -> None:
    stray = f"jobs/{new_job_id()}"
    source = _artifact(copy, run.tenant, run.jobs["COMPLETED"])
    shutil.copyfile(source, _artifact(copy, run.tenant, stray))
    report = check(copy)
    assert {(f.kind, f.job) for f in report.findings} == {
        ("artifact_without_job", stray),
        ("artifacts_exceed_completions", ""),
    }


def test_a_second_artifact_for_one_job_is_reported(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["COMPLETED"]
    second = _artifact(copy, "another-tenant", job)
    second.parent.mkdir(parents=True)
    shutil.copyfile(_artifact(copy, run.tenant, job), second)
    kinds = {(f.kind, f.job) for f in check(copy).findings}
    assert {("duplicate_artifacts", job), ("artifact_tenant_mismatch", job)} <= kinds


def test_an_unrecognized_file_among_artifacts_is_reported(run: FinishedRun, copy: Path) -> None:
    (copy / "blobs" / "signed" / run.tenant / "notes.txt").write_text("x")
    assert check(copy).kinds() == {"unrecognized_blob"}


def test_an_edited_job_index_disagrees_with_the_ledger(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["REJECTED"]
    with _audit(copy) as db:
        db.execute("UPDATE jobs SET state = 'COMPLETED', reason_code = '' WHERE job = ?", (job,))
    found = {(f.kind, f.job, f.detail) for f in check(copy).findings}
    assert ("job_view_mismatch", job, "state") in found
    assert ("job_view_mismatch", job, "reason_code") in found


def test_an_edited_ledger_event_breaks_the_chain(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["COMPLETED"]
    with _audit(copy) as db:
        sequence, data = db.execute(
            "SELECT sequence, event FROM ledger WHERE job = ? AND to_state = 'SIGNING'", (job,)
        ).fetchone()
        event = queue_pb2.TransitionEvent.FromString(data)
        event.attempt += 1
        db.execute(
            "UPDATE ledger SET event = ? WHERE sequence = ?",
            (event.SerializeToString(deterministic=True), sequence),
        )
    report = check(copy)
    assert ("ledger_edited", job, sequence) in {
        (f.kind, f.job, f.sequence) for f in report.findings
    }


def test_an_edited_ledger_column_disagrees_with_its_event(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["REJECTED"]
    with _audit(copy) as db:
        (sequence,) = db.execute(
            "SELECT sequence FROM ledger WHERE job = ? AND to_state = 'REJECTED'", (job,)
        ).fetchone()
        db.execute(
            "UPDATE ledger SET reason_code = 'TOTAL_MISMATCH' WHERE sequence = ?", (sequence,)
        )
    report = check(copy)
    assert {(f.kind, f.job, f.sequence) for f in report.findings} == {
        ("ledger_row_mismatch", job, sequence)
    }


def test_a_job_whose_audit_record_was_deleted_is_not_in_the_ledger(
    run: FinishedRun, copy: Path
) -> None:
    job = run.jobs["REJECTED"]
    with _audit(copy) as db:
        db.execute("DELETE FROM ledger WHERE job = ?", (job,))
        db.execute("DELETE FROM jobs WHERE job = ?", (job,))
    kinds = check(copy).kinds()
    assert "job_not_in_ledger" in kinds
    assert {"ledger_deleted", "ledger_checkpoint"} & kinds, "the chain shows the gap"


def test_a_job_admission_never_accepted_is_reported(run: FinishedRun, copy: Path) -> None:
    job = run.jobs["REJECTED"]
    with sqlite3.connect(copy / "admission" / "admission.db") as db:
        db.execute("DELETE FROM jobs WHERE job = ?", (job,))
    assert {(f.kind, f.job) for f in check(copy).findings} == {("job_not_accepted", job)}


def test_a_second_terminal_entry_is_reported(run: FinishedRun, copy: Path) -> None:
    """A correctly chained entry, as a stale worker would add it: FAILED after
    the job was COMPLETED."""
    job = run.jobs["COMPLETED"]
    database = Database(f"sqlite:///{copy / 'audit' / 'audit.db'}", audit_tables.metadata)
    try:
        with _audit(copy) as db:
            (data,) = db.execute(
                "SELECT event FROM ledger WHERE job = ? AND to_state = 'COMMITTING'", (job,)
            ).fetchone()
        late = queue_pb2.TransitionEvent.FromString(data)
        late.event_id = f"{job_id(job)}.FAILED"
        late.from_state = state_value("SIGNING")  # type: ignore[assignment]
        late.to_state = state_value("FAILED")  # type: ignore[assignment]
        late.reason_code = "RETRY_LIMIT_REACHED"
        assert database.transaction(lambda s: audit_ledger.append(s, late))
    finally:
        database.close()
    report = check(copy)
    assert {(f.kind, f.job) for f in report.findings} == {("multiple_terminal_entries", job)}


def test_temporary_entries_left_by_a_dead_process_are_reported(copy: Path) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(ended.stdout)
    service, host, _pid, rest = temp_prefix("validator", "attempt").split(".", 3)
    (copy / "blobs" / ".tmp" / f"{service}.{host}.{dead_pid}.{rest}{uuid.uuid4().hex}").mkdir()
    assert check(copy, stopped=False).kinds() == {"temp_leftover"}
    assert check(copy, stopped=True).kinds() == {"temp_leftover"}


def test_a_stopped_stack_leaves_no_temporary_entry_at_all(copy: Path) -> None:
    (copy / "blobs" / ".tmp" / f"{temp_prefix('signer', 'p')}{uuid.uuid4().hex}").touch()
    assert check(copy, stopped=False).ok, "its owner (this process) lives: in use"
    report = check(copy)
    assert report.stopped, "no service answers at stack.json's endpoints"
    assert report.kinds() == {"temp_not_empty"}


def test_the_cli_prints_a_summary_and_exits_non_zero_on_findings(
    run: FinishedRun, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert quire_main(["--data-dir", str(copy), "check"]) == 0
    clean = capsys.readouterr().out
    assert "jobs accepted: 4" in clean and clean.strip().endswith("OK")
    _artifact(copy, run.tenant, run.jobs["COMPLETED"]).unlink()
    assert quire_main(["check", "--data-dir", str(copy), "--stopped"]) == 1
    printed = capsys.readouterr().out
    assert f"finding: artifact_missing  {run.jobs['COMPLETED']}" in printed
    assert "FINDINGS" in printed
    for secret in (SECRET_TEXT, "good.pdf", "lease.pdf", "1 Main St"):
        assert secret not in clean + printed


def test_every_reported_kind_is_documented(run: FinishedRun, copy: Path) -> None:
    with _audit(copy) as db:
        db.execute("DELETE FROM jobs")
    assert check(copy).kinds() <= KINDS


def _entry(sequence: int, to_state: str, reason: str = "", from_state: str = "") -> LedgerEntry:
    return LedgerEntry(
        sequence, f"e{sequence}", "jobs/ab", "t", from_state, to_state, reason, "", True, True
    )


def test_generations_split_at_dead_letter_retries() -> None:
    retried = [
        _entry(1, "ACCEPTED"),
        _entry(2, "VALIDATING"),
        _entry(3, "FAILED", "RETRY_LIMIT_REACHED"),
        _entry(4, "VALIDATING", "DEAD_LETTER_RETRIED", "FAILED"),
        _entry(5, "ASSEMBLING"),
    ]
    assert [len(g) for g in generations(retried)] == [3, 2]
    assert outcome(retried) == "ASSEMBLING"
    assert outcome([*retried, _entry(6, "FAILED"), _entry(7, "SIGNING")]) == "FAILED"
    cancelled_while_working = [
        _entry(1, "ACCEPTED"),
        _entry(2, "CANCELLED"),
        _entry(3, "ASSEMBLING"),
    ]
    assert outcome(cancelled_while_working) == "CANCELLED"


async def test_dead_lettered_jobs_retried_and_discarded_pass_the_check(tmp_path: Path) -> None:
    """Two jobs fail at signing (the signer dies before each commit, perhaps
    after writing an artifact): one is retried into a second generation that
    completes, the other is discarded and stays FAILED. Both are consistent."""
    faults = tmp_path / "faults"
    env = {
        "QUIRE_FAULTS_DIR": str(faults),
        "QUIRE_MAX_DELIVER": "2",
        "QUIRE_ACK_WAIT_SECONDS": "1",
        "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
    }
    async with running_stack(tmp_path / "stack", env=env) as running:
        client = running.client
        names = []
        async with kept_armed(faults, "signer.before_commit"):
            # One at a time: a job alone in the signer always writes its artifact
            # before the signer dies (another job's kill could stop it earlier).
            for index in range(2):
                path = write_text_pdf(tmp_path / f"{index}.pdf", [f"dead letter {index}"])
                digest = (await client.upload(path)).sha256
                names.append((await client.submit([PacketItem("d", digest)])).name)
                await wait_all(client, names[-1:], timeout=90)
            failed = await wait_all(client, names, timeout=90)
        assert {state_name(job.state) for job in failed.values()} == {"FAILED"}
        operator = (("authorization", f"Bearer {running.info.operator_token()}"),)
        async with grpc.aio.insecure_channel(running.info.endpoints["audit"]) as channel:
            audit = audit_service_pb2_grpc.AuditServiceStub(channel)

            async def booked() -> bool:
                reply = await audit.ListDeadLetters(
                    audit_service_pb2.ListDeadLettersRequest(), metadata=operator
                )
                return set(names) <= {letter.job for letter in reply.dead_letters}

            await eventually(booked, 30, "both dead letters booked")
            retried, discarded = names
            await audit.RetryDeadLetter(
                audit_service_pb2.RetryDeadLetterRequest(job=retried), metadata=operator
            )
            await audit.DiscardDeadLetter(
                audit_service_pb2.DiscardDeadLetterRequest(job=discarded), metadata=operator
            )
        done = await client.wait(retried, timeout=60)
        assert state_name(done.state) == "COMPLETED"
        assert (await asyncio.to_thread(check, running.data_dir)).findings == []
    report = check(running.data_dir)
    assert report.findings == [], report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": 1, "FAILED": 1}
    assert report.artifacts == 2, "the discarded job's artifact, left by its failed signing"
    snapshot = read_snapshot(running.data_dir, {}, stopped=True)
    retried_entries = [e for e in snapshot.ledger if e.job == retried]
    assert [g[-1].to_state for g in generations(retried_entries)] == ["FAILED", "COMPLETED"]


async def test_a_run_on_postgresql_is_checked_where_its_data_is(
    postgres,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    env = {
        f"QUIRE_{service.upper()}_DATABASE_URL": postgres.create_database(
            f"check_{service}_{uuid.uuid4().hex[:8]}"
        )
        for service in SERVICES
    }
    async with running_stack(tmp_path / "stack", env=env) as running:
        path = write_text_pdf(tmp_path / "pg.pdf", ["on postgresql"])
        digest = (await running.client.upload(path)).sha256
        name = (await running.client.submit([PacketItem("pg", digest)])).name
        done = await running.client.wait(name, timeout=60)
        assert state_name(done.state) == "COMPLETED"
    data_dir = running.data_dir
    assert not list(data_dir.glob("*/*.db")), "nothing on SQLite"
    report = check(data_dir, env=env)
    assert report.findings == [] and report.ledger_entries >= 7, report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": 1}
    assert "database_missing" in check(data_dir).kinds(), "without the URLs there is nothing"

    engine = read_only_engine(env["QUIRE_AUDIT_DATABASE_URL"], stopped=True)
    try:
        with pytest.raises(DBAPIError), engine.begin() as connection:
            connection.execute(text("DELETE FROM ledger"))
    finally:
        engine.dispose()
    next((data_dir / "blobs" / "signed").rglob("*.pdf")).unlink()
    assert check(data_dir, env=env).kinds() == {"artifact_missing"}

    assembler = create_engine(env["QUIRE_ASSEMBLER_DATABASE_URL"])
    try:
        with assembler.begin() as connection:
            connection.execute(text("UPDATE assemblies SET sha256 = repeat('0', 64)"))
    finally:
        assembler.dispose()
    assert Finding("artifact_input_mismatch", name, detail="signer input differs") in (
        check(data_dir, env=env).findings
    )
