"""Skewed clocks, rule by rule (issue 42): what a host whose clock is
minutes off may and may not do, each with the fix that made it so.

- **Checkpoints never go back in time.** Audit stamps a checkpoint with its
  clock, or with the time of the tenant's checkpoint before it when its
  clock reads earlier (a clock set back); verification reports a checkpoint
  dated before a shorter one of its tenant (``checkpoint_time``). Before,
  an audit five minutes behind signed a longer log with an earlier time,
  and nothing noticed.
- **A lease several replicas judge is judged on the database's clock.** A
  replica five minutes ahead took the batch dispatch lease another replica
  held live (its own ``now`` was past the other's ``expires_at``); on
  PostgreSQL it now reads ``now()`` from the server, whatever its own
  clock says.
- **Caller proofs beyond the tolerated skew are typed.** A trusted
  service's call made more than 60 s from the receiver's clock is refused
  ``CLOCK_SKEW`` (UNAVAILABLE, so it is retried, and logged with the skew),
  where it was an UNAUTHENTICATED indistinguishable from a forgery; a forged
  proof is still UNAUTHENTICATED whatever its time.
- **A job's deadline is judged on JetStream's clock.** The validator ended a
  job naming a source by reference ``DEADLINE_EXCEEDED`` as soon as its own
  clock ran past admission's deadline, five minutes early on a clock five
  minutes ahead; it now judges on JetStream's clock as its tasks bound it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quire.admission import tables as admission_tables
from quire.admission.batches.dispatchlease import DispatchLease
from quire.audit import ledger, tables
from quire.audit.checkpoints import CheckpointSigner, read_checkpoint_files, stamp
from quire.audit.verification import verify_ledger
from quire.callers import CallerVerifier, ClockSkew, prove
from quire.checkpointfiles import ChainCheckpoint
from quire.database import Database
from quire.errors import Unauthenticated
from quire.identity import ServiceIdentity, TrustStore
from quire.queueclock import QueueClock
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.validator.sources.budget import FetchBudget

FACTORY = EventFactory("test", "instance", "0")
SKEW = timedelta(minutes=5)


def _grow(database: Database, tenant: str, job: str) -> None:
    task = queue_pb2.JobTask(job=job, tenant=tenant)
    event = FACTORY.transition(task, "", "ACCEPTED", attempt=1, lease_token=1)
    database.transaction(lambda s: ledger.append(s, event))


def _round(database: Database, signer: CheckpointSigner, folder: Path) -> list[ChainCheckpoint]:
    """One round as audit takes it: the last heads and times from the files."""
    files = read_checkpoint_files(folder, signer.public_pem)
    last, times = files.latest_heads(), files.latest_times()
    taken = database.transaction(lambda s: signer.take_round(s, last, times))
    signer.write(taken.documents, folder)
    return [ChainCheckpoint(**d["checkpoint"]) for d in taken.documents]


def _findings(database: Database, signer: CheckpointSigner, folder: Path) -> list[str]:
    files = read_checkpoint_files(folder, signer.public_pem)
    report = database.transaction(
        lambda s: verify_ledger(
            s, files.checkpoints, heads=files.heads, refused=files.refused, missing=files.missing
        )
    )
    return [finding.kind for finding in report.findings]


def test_a_checkpoint_is_never_dated_before_the_one_it_extends(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    clock = [datetime(2026, 12, 5, 12, 0, tzinfo=UTC)]
    signer = CheckpointSigner(tmp_path / "keys", clock=lambda: clock[0])
    folder = tmp_path / "checkpoints"
    _grow(database, "t1", "jobs/aa")
    (first,) = _round(database, signer, folder)
    clock[0] -= SKEW  # audit's clock set five minutes back
    _grow(database, "t1", "jobs/bb")
    (second,) = _round(database, signer, folder)
    assert second.length > first.length
    assert datetime.fromisoformat(second.time) == datetime.fromisoformat(first.time)
    clock[0] += 2 * SKEW  # and then five minutes ahead of where it began
    _grow(database, "t1", "jobs/cc")
    (third,) = _round(database, signer, folder)
    assert datetime.fromisoformat(third.time) == clock[0], "a clock ahead is its own time"
    assert _findings(database, signer, folder) == []


def test_a_checkpoint_dated_before_a_shorter_one_is_a_finding(tmp_path: Path) -> None:
    """What the stamping rule prevents, signed by hand: verification sees it."""
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    clock = [datetime(2026, 12, 5, 12, 0, tzinfo=UTC)]
    signer = CheckpointSigner(tmp_path / "keys", clock=lambda: clock[0])
    folder = tmp_path / "checkpoints"
    _grow(database, "t1", "jobs/aa")
    _round(database, signer, folder)
    clock[0] -= SKEW
    _grow(database, "t1", "jobs/bb")
    files = read_checkpoint_files(folder, signer.public_pem)
    taken = database.transaction(lambda s: signer.take_round(s, files.latest_heads(), {}))
    signer.write(taken.documents, folder)
    assert _findings(database, signer, folder) == ["checkpoint_time"]


def test_stamp_keeps_the_later_time() -> None:
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert stamp(now, None) == now
    assert stamp(now, now - SKEW) == now
    assert stamp(now, now + SKEW) == now + SKEW
    assert stamp(now, (now + SKEW).replace(tzinfo=None)) == now + SKEW


def _admission_database(postgres) -> Database:  # type: ignore[no-untyped-def]
    url = postgres.create_database(f"q{uuid.uuid4().hex[:12]}")
    database = Database(url, admission_tables.metadata)
    database.create_schema()
    return database


def test_a_replica_whose_clock_runs_ahead_takes_no_live_lease(postgres) -> None:  # type: ignore[no-untyped-def]
    database = _admission_database(postgres)
    honest = DispatchLease("admission-1", 30.0)
    ahead = DispatchLease("admission-2", 30.0, clock=lambda: datetime.now(UTC) + SKEW)
    behind = DispatchLease("admission-3", 30.0, clock=lambda: datetime.now(UTC) - SKEW)
    assert database.transaction(honest.take)
    assert not database.transaction(ahead.take), "the holder's lease is live by the database"
    assert database.transaction(honest.holds)
    assert not database.transaction(ahead.holds)
    database.transaction(honest.release)
    assert database.transaction(behind.take), "released: the next one takes it"
    assert database.transaction(behind.holds), "its lease is live, however far behind it is"
    assert not database.transaction(honest.take)


def test_a_call_from_a_skewed_clock_is_refused_as_clock_skew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admission = ServiceIdentity.generate("admission")
    verifier = CallerVerifier(TrustStore.of([admission]))
    method = "/quire.audit.v1.AuditService/GetJob"
    now = datetime.now(UTC).timestamp()
    assert verifier.verify(prove(admission, method, now=now + 30), method) == "admission"
    with caplog.at_level(logging.WARNING, logger="quire.callers"):
        for skewed in (now + SKEW.total_seconds(), now - SKEW.total_seconds()):
            with pytest.raises(ClockSkew) as refused:
                verifier.verify(prove(admission, method, now=skewed), method)
            assert refused.value.reason == ReasonCode.CLOCK_SKEW
            assert not refused.value.permanent, "retried: the clocks may agree again"
    assert "calls from admission refused: its clock is +300 s" in caplog.text
    stranger = ServiceIdentity.generate("admission")
    with pytest.raises(Unauthenticated):
        verifier.verify(prove(stranger, method, now=now + SKEW.total_seconds()), method)


def test_a_deadline_is_judged_on_jetstreams_clock_however_this_hosts_runs() -> None:
    """A stage bounds JetStream's clock from the tasks it receives
    (``quire.queueclock``): its own clock set five minutes ahead, then five
    behind (stepped, as libfaketime or an NTP step sets it), it still judges
    a deadline on JetStream's time, never early, late at most by the
    shortest wait seen; its own clock would have ended a healthy job."""
    true, skew, monotonic = [1_000_000.0], [0.0], [50.0]

    def local() -> float:
        return true[0] + skew[0]

    clock = QueueClock(clock=local, monotonic=lambda: monotonic[0])
    clock.observe(true[0] - 0.5)  # a task stored half a second ago, the clock right

    def advance(seconds: float) -> None:
        true[0] += seconds
        monotonic[0] += seconds

    skew[0] = SKEW.total_seconds()
    advance(10)
    assert true[0] - 0.5 <= clock.now() <= true[0], "stepped ahead: the old gap is counted as now"
    clock.observe(true[0] - 2.0)  # a task that waited two seconds
    assert true[0] - 0.5 <= clock.now() <= true[0]
    deadline = true[0] + 60
    assert FetchBudget(deadline, 0, local).passed(), "the host's clock alone ends a live job"
    assert not FetchBudget(deadline, 0, clock.now).passed()
    skew[0] = -SKEW.total_seconds()
    advance(100)
    assert true[0] - 0.5 <= clock.now() <= true[0], "stepped behind"
    assert FetchBudget(true[0] - 1, 0, clock.now).passed(), "a passed deadline is passed"
    assert not FetchBudget(true[0] - 1, 0, local).passed(), "the host's clock alone lets it run"
