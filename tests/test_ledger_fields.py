"""Every field the ledger serves is proven by its hashed bytes.

An adversary with write access to audit's database edits one stored column at
a time — of a ledger row, then of the job index. Each edit is its own finding
of ``verify_ledger`` (behind ``quire audit verify`` and ``quire check``), and
the API keeps serving what the hashed events say, never the edited value."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from quire.audit import ledger, tables
from quire.audit.servicer import AuditServicer
from quire.audit.v1 import audit_service_pb2 as pb
from quire.audit.verification import Finding, verify_ledger
from quire.database import Database
from quire.jobs import state_name
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("test", "instance", "0")
JOB, OTHER = "jobs/aa01", "jobs/bb02"
STEPS = [
    ("", "ACCEPTED", ""),
    ("ACCEPTED", "VALIDATING", ""),
    ("VALIDATING", "ASSEMBLING", ""),
    ("ASSEMBLING", "SIGNING", ""),
    ("SIGNING", "REJECTED", "SIGNING_FAILED"),
]
TARGET = 3
"""The ledger row edited: the JOB's VALIDATING -> ASSEMBLING entry."""


def _event(job: str, from_state: str, to_state: str, reason: str) -> queue_pb2.TransitionEvent:
    task = queue_pb2.JobTask(job=job, tenant="t1", manifest_digest="m" * 64, ruleset="r@1")
    task.sources.add(sha256="s" * 64)
    return FACTORY.transition(
        task, from_state, to_state, attempt=1, lease_token=1, reason_code=reason
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An audit database with two jobs' histories, untouched."""
    path = tmp_path_factory.mktemp("ledger") / "audit.db"
    database = Database(f"sqlite:///{path}", tables.metadata)
    database.create_schema()
    for job in (JOB, OTHER):
        for from_state, to_state, reason in STEPS[: 5 if job == JOB else 2]:
            event = _event(job, from_state, to_state, reason)
            database.transaction(lambda s, e=event: ledger.append(s, e))
    database.close()
    return path


def _findings(path: Path) -> list[Finding]:
    database = Database(f"sqlite:///{path}", tables.metadata)
    try:
        return database.transaction(lambda s: verify_ledger(s, [])).findings
    finally:
        database.close()


def _edit(recorded: Path, tmp_path: Path, sql: str, *args: Any) -> Path:
    copy = tmp_path / "audit.db"
    shutil.copyfile(recorded, copy)
    with sqlite3.connect(copy) as db:
        assert db.execute(sql, args).rowcount == 1
    return copy


def test_the_untouched_ledger_verifies(recorded: Path) -> None:
    assert _findings(recorded) == []


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("event_id", "aa01.COMPLETED"),
        ("job", OTHER),
        ("tenant", "t2"),
        ("from_state", "SIGNING"),
        ("to_state", "COMPLETED"),
        ("reason_code", "MADE_UP"),
    ],
)
def test_an_edited_ledger_column_is_its_own_finding(
    recorded: Path, tmp_path: Path, column: str, value: str
) -> None:
    copy = _edit(
        recorded, tmp_path, f"UPDATE ledger SET {column} = ? WHERE sequence = ?", value, TARGET
    )
    found = {(f.kind, f.column, f.sequence) for f in _findings(copy)}
    assert ("column", column, TARGET) in found


@pytest.mark.parametrize(
    ("column", "value", "kind"),
    [
        ("event", b"\x0a\x03xyz", "edited"),
        ("prev_hash", "0" * 64, "edited"),
        ("entry_hash", "f" * 64, "edited"),
        ("sequence", 99, "deleted"),
    ],
)
def test_an_edited_chain_column_breaks_the_chain(
    recorded: Path, tmp_path: Path, column: str, value: object, kind: str
) -> None:
    copy = _edit(
        recorded, tmp_path, f"UPDATE ledger SET {column} = ? WHERE sequence = ?", value, TARGET
    )
    assert kind in {f.kind for f in _findings(copy)}


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("state", "COMPLETED"),
        ("reason_code", "MADE_UP"),
        ("item_count", 7),
        ("manifest_digest", "e" * 64),
        ("output_digest", "d" * 64),
        ("ruleset_version", "r@2"),
        ("key_version", "v9"),
        ("tenant", "t2"),
    ],
)
async def test_an_edited_job_index_is_reported_and_never_served(
    recorded: Path, tmp_path: Path, column: str, value: object
) -> None:
    copy = _edit(recorded, tmp_path, f"UPDATE jobs SET {column} = ? WHERE job = ?", value, JOB)
    found = {(f.kind, f.column, f.job) for f in _findings(copy)}
    assert ("view", column, JOB) in found
    database = Database(f"sqlite:///{copy}", tables.metadata)
    try:
        servicer = AuditServicer(database)
        served = await servicer.GetJob(pb.GetJobRequest(name=JOB), None)  # type: ignore[arg-type]
        batch = await servicer.BatchGetJobs(pb.BatchGetJobsRequest(names=[JOB]), None)  # type: ignore[arg-type]
    finally:
        database.close()
    for job in (served, batch.jobs[0]):
        assert state_name(job.state) == "REJECTED" and job.reason_code == "SIGNING_FAILED"
        assert job.item_count == 1 and job.manifest_digest == "m" * 64
        assert job.ruleset_version == "r@1" and job.output_digest == job.key_version == ""


def test_an_index_row_without_events_is_reported(recorded: Path, tmp_path: Path) -> None:
    copy = _edit(recorded, tmp_path, "UPDATE jobs SET job = ? WHERE job = ?", "jobs/cc03", OTHER)
    found = {(f.kind, f.column, f.job) for f in _findings(copy)}
    assert {("view", "job", "jobs/cc03"), ("view", "job", OTHER)} <= found
