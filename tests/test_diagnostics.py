"""Diagnostics: a failed delivery's original error text is kept a few days,
for operators only, every read recorded; the job's status and the ledger keep
only the stable reason code.

Unit tests of the text (scrubbed, capped), the settings and the store on a
real SQLite database (expiry before and after the sweep, the read log), the
runner keeping a row per failed delivery and never failing for it, and a
stack test: storage refusing writes ends a job FAILED, `quire diagnose` shows
the error text to the operator and lists its reads, a tenant is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from nats.js import JetStreamContext
from sqlalchemy import MetaData, func, select

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.database import Database
from quire.diagnostics.v1 import diagnostics_service_pb2 as dpb
from quire.diagnostics.v1 import diagnostics_service_pb2_grpc as dgrpc
from quire.diagnosticstext import MAX_MESSAGE, scrub, text_of, type_of
from quire.diagnosticstore import DiagnosticsStore, DiagnosticTables, diagnostic_tables
from quire.errors import InvalidSetting, SystemFailure
from quire.jobs import state_name
from quire.leases import LeaseStore, lease_table
from quire.pipeline import stage
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.settings import DiagnosticsSettings, QueueSettings, SandboxSettings
from quire.stack.supervisor import Stack
from quire.stage import StageRunner
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.tls import aio_channel
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, Publisher, consumer_name, work_subject

JOB = "jobs/0123456789abcdef"
INTERNAL_TEXT = "keystore /srv/keys/v7 refused: handle 0x2a closed"


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _store(tmp_path: Path, clock: _Clock, days: int = 7) -> tuple[DiagnosticsStore, Database]:
    metadata = MetaData()
    tables = diagnostic_tables(metadata)
    database = Database(f"sqlite:///{tmp_path / 'stage.db'}", metadata)
    database.create_schema()
    store = DiagnosticsStore(
        database,
        tables,
        stage="assemble",
        instance="assembler-1",
        build_version="0.1.0",
        settings=DiagnosticsSettings(retention_days=days),
        clock=clock,
    )
    return store, database


def _failure() -> SystemFailure:
    try:
        try:
            raise OSError(30, INTERNAL_TEXT)
        except OSError as error:
            raise SystemFailure(ReasonCode.STORAGE_FAILED, "packet not written") from error
    except SystemFailure as failure:
        return failure


# The text ------------------------------------------------------------------


def test_text_is_printable_ascii_only_and_capped() -> None:
    assert scrub("a\x00b\nc\td\u00e9\x7f") == "a?b c d??"
    long = scrub("x" * 10_000)
    assert len(long) == MAX_MESSAGE and long.endswith(" [truncated]")
    assert scrub("y" * MAX_MESSAGE) == "y" * MAX_MESSAGE, "exactly at the cap: nothing cut"
    binary = scrub(bytes(range(256)).decode("latin-1") * 40)
    assert all(" " <= c <= "~" for c in binary) and len(binary) == MAX_MESSAGE


def test_the_type_and_the_chained_cause_are_kept() -> None:
    failure = _failure()
    assert type_of(failure) == "quire.errors.SystemFailure"
    assert type_of(ValueError("x")) == "ValueError"
    assert text_of(failure) == (
        f"STORAGE_FAILED: packet not written; caused by OSError: [Errno 30] {INTERNAL_TEXT}"
    )


def _fails_with_a_chain() -> None:
    """What a sandboxed parse does with a library's error: its own, from it."""
    try:
        try:
            raise KeyError("object 17 0 R")
        except KeyError as inner:
            raise ValueError("xref stream broken") from inner
    except ValueError as error:
        raise SystemFailure(ReasonCode.INTERNAL, "parse failed") from error


async def test_causes_raised_in_a_sandbox_worker_reach_the_diagnostic() -> None:
    """Exceptions cross from a worker pickled, which drops ``__cause__``: the
    worker describes the chain beside the error and the pool chains it back."""
    pool = SandboxPool(SandboxSettings(workers=1, cpu_seconds=5, wall_seconds=10))
    try:
        with pytest.raises(SystemFailure) as raised:
            await pool.run(_fails_with_a_chain)
    finally:
        pool.close()
    assert type_of(raised.value) == "quire.errors.SystemFailure"
    assert text_of(raised.value) == (
        "INTERNAL: parse failed; caused by ValueError: xref stream broken; "
        "caused by KeyError: 'object 17 0 R'"
    )


def test_retention_days_are_read_and_held_to_1_to_365() -> None:
    assert DiagnosticsSettings.from_env({}).retention_days == 7
    assert DiagnosticsSettings.from_env({"QUIRE_DIAGNOSTICS_RETENTION_DAYS": "30"}) == (
        DiagnosticsSettings(retention_days=30)
    )
    for bad in ("0", "366", "-1", "seven", "1.5"):
        with pytest.raises(InvalidSetting) as refused:
            DiagnosticsSettings.from_env({"QUIRE_DIAGNOSTICS_RETENTION_DAYS": bad})
        assert refused.value.variable == "QUIRE_DIAGNOSTICS_RETENTION_DAYS"
        assert bad not in refused.value.message


# The store -----------------------------------------------------------------


async def test_a_kept_diagnostic_is_served_with_every_read_recorded(tmp_path: Path) -> None:
    clock = _Clock()
    store, database = _store(tmp_path, clock)
    try:
        await store.keep(JOB, 2, ReasonCode.STORAGE_FAILED, _failure())
        clock.now += timedelta(minutes=1)
        first = await store.read(JOB, reader="operators/-/tokens/op1")
        (kept,) = first.diagnostics
        assert (kept.job, kept.stage, kept.instance, kept.build_version) == (
            JOB,
            "assemble",
            "assembler-1",
            "0.1.0",
        )
        assert (kept.attempt, kept.reason_code, kept.error_type) == (
            2,
            "STORAGE_FAILED",
            "quire.errors.SystemFailure",
        )
        assert INTERNAL_TEXT in kept.message
        assert kept.expire_time - kept.create_time == timedelta(days=7)
        assert [(r.reader, r.read_at) for r in first.reads] == [
            ("operators/-/tokens/op1", clock.now)
        ]
        clock.now += timedelta(minutes=1)
        second = await store.read(JOB, reader="operators/-/tokens/op2")
        assert [r.reader for r in second.reads] == [
            "operators/-/tokens/op1",
            "operators/-/tokens/op2",
        ], "the read log lists earlier reads, oldest first, this one included"
        other = await store.read("jobs/ffff", reader="operators/-/tokens/op1")
        assert other.diagnostics == () and len(other.reads) == 1, "reads are per job"
    finally:
        database.close()


async def test_an_expired_diagnostic_is_never_served_and_the_sweep_deletes_it(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    store, database = _store(tmp_path, clock, days=1)
    tables = DiagnosticTables(
        database._metadata.tables["diagnostics"],  # noqa: SLF001
        database._metadata.tables["diagnostic_reads"],  # noqa: SLF001
    )

    def count(table: Any) -> int:
        return int(
            database.transaction(
                lambda s: s.execute(select(func.count()).select_from(table)).scalar_one()
            )
        )

    try:
        await store.keep(JOB, 1, ReasonCode.INTERNAL, RuntimeError("early"))
        clock.now += timedelta(hours=12)
        await store.keep(JOB, 2, ReasonCode.INTERNAL, RuntimeError("late"))
        await store.read(JOB, reader="operators/-/tokens/op1")
        clock.now += timedelta(hours=13)  # the first is past its day, the second not
        served = await store.read(JOB, reader="operators/-/tokens/op1")
        assert [d.message for d in served.diagnostics] == ["late"], "expired, not yet swept"
        assert count(tables.diagnostics) == 2
        assert await store.sweep() == 1
        assert count(tables.diagnostics) == 1
        clock.now += timedelta(days=2)
        assert (await store.read(JOB, reader="operators/-/tokens/op1")).diagnostics == ()
        assert await store.sweep() == 1
        assert count(tables.diagnostics) == 0
        assert count(tables.reads) == 1, "only the read from within the retention is left"
        clock.now += timedelta(days=2)
        await store.sweep()
        assert count(tables.reads) == 0, "a job's reads go once it has nothing kept"
    finally:
        database.close()


async def test_a_failed_write_is_logged_by_type_only_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    store, database = _store(tmp_path, clock)
    database.close()  # every write now fails
    with caplog.at_level(logging.WARNING):
        await store.keep(JOB, 1, ReasonCode.INTERNAL, _failure())
    assert "not kept" in caplog.text
    assert INTERNAL_TEXT not in caplog.text and "packet not written" not in caplog.text


# The runner ----------------------------------------------------------------


class _FailingWork:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def process(self, task: queue_pb2.JobTask, lease: Any, attempt: int) -> Any:
        raise self.error


class _BrokenDiagnostics:
    async def keep(self, job: str, attempt: int, reason: str, error: BaseException) -> None:
        raise RuntimeError("diagnostics down")


async def _deliver_once(
    tmp_path: Path,
    jetstream: JetStreamContext,
    queue: QueueSettings,
    error: Exception,
    diagnostics: Any,
) -> queue_pb2.StageOutcome:
    metadata = MetaData()
    leases = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'runner.db'}", metadata)
    database.create_schema()
    runner = StageRunner(
        stage=stage("assemble"),
        work=_FailingWork(error),
        leases=LeaseStore(database, leases),
        publisher=Publisher(jetstream),
        events=EventFactory("assembler", "test", "0"),
        queue=queue,
        diagnostics=diagnostics,
    )
    task = queue_pb2.JobTask(job=JOB, tenant="t1", priority="interactive")
    await jetstream.publish(work_subject("assemble", "interactive"), task.SerializeToString())
    work = await jetstream.pull_subscribe_bind(
        durable=consumer_name("assemble", "interactive"), stream=WORK_STREAM
    )
    try:
        (delivery,) = await work.fetch(1, timeout=5)
        await runner.handle(delivery)
        committed = (await LeaseStore(database, leases).acquire(JOB)).committed
        assert committed is not None, "the delivery ended the job"
        return committed
    finally:
        database.close()


def _ended_failed_with_the_code_only(outcome: queue_pb2.StageOutcome) -> None:
    assert state_name(outcome.events[-1].to_state) == "FAILED"
    assert outcome.events[-1].reason_code == "STORAGE_FAILED"
    assert outcome.dead_letter.reason_code == "STORAGE_FAILED"
    assert INTERNAL_TEXT.encode() not in outcome.SerializeToString()
    assert b"packet not written" not in outcome.SerializeToString()


async def test_the_runner_keeps_a_failed_deliverys_text_and_the_outcome_carries_the_code(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    clock = _Clock()
    store, database = _store(tmp_path, clock)
    try:
        outcome = await _deliver_once(tmp_path, jetstream, fast_queue, _failure(), store)
        reading = await store.read(JOB, reader="operators/-/tokens/op1")
    finally:
        database.close()
    (kept,) = reading.diagnostics
    assert (kept.attempt, kept.reason_code) == (1, "STORAGE_FAILED")
    assert INTERNAL_TEXT in kept.message
    _ended_failed_with_the_code_only(outcome)


async def test_a_failing_diagnostics_store_never_changes_the_outcome(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    outcome = await _deliver_once(tmp_path, jetstream, fast_queue, _failure(), _BrokenDiagnostics())
    _ended_failed_with_the_code_only(outcome)


# The stack -----------------------------------------------------------------


async def _ledger(address: str, operator: str, job: str) -> list[apb.LedgerEntry]:
    async with aio_channel(address, None) as channel:
        reply = await agrpc.AuditServiceStub(channel).ListJobEvents(
            apb.ListJobEventsRequest(job=job, page_size=1000), metadata=bearer_metadata(operator)
        )
    return list(reply.entries)


def _diagnose(data_dir: Path, job: str) -> dict[str, Any]:
    done = run_quire(data_dir, "diagnose", job, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.stack
async def test_on_the_stack_the_operator_reads_the_error_text_and_the_ledger_keeps_the_code(
    tmp_path: Path,
) -> None:
    (tmp_path / "faults").mkdir()
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_FAULTS_DIR": str(tmp_path / "faults"),
            "QUIRE_DRAIN_SECONDS": "5",
            "QUIRE_ACK_WAIT_SECONDS": "10",
            "QUIRE_MAX_DELIVER": "3",
            "QUIRE_DIAGNOSTICS_RETENTION_DAYS": "2",
        },
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            path = write_text_pdf(tmp_path / "s.pdf", [f"diagnostics {uuid.uuid4().hex}"])
            digest = (await client.upload(path)).sha256
            (tmp_path / "faults" / "storage.permanent").touch()  # storage refuses writes
            job = await client.submit([PacketItem("doc", digest)])
            done = await client.wait(job.name, timeout=90)
        assert (state_name(done.state), done.reason_code) == ("FAILED", "STORAGE_FAILED")

        first = await asyncio.to_thread(_diagnose, stack.data_dir, job.name)
        kept = [d for reply in first["stages"].values() for d in reply.get("diagnostics", [])]
        assert kept, first
        failure = kept[-1]
        assert failure["job"] == job.name
        assert failure["reason_code"] == "STORAGE_FAILED"
        assert failure["error_type"] == "quire.errors.SystemFailure"
        # The fault's own words (quire.faultyblobs), as the stage raised them.
        faults_say = {
            "blob write failed",
            "blob not promoted",
            "temporary file not created",
            "temporary directory not created",
        }
        text = failure["message"].removeprefix("STORAGE_FAILED: ")
        assert text in faults_say, failure
        created = datetime.fromisoformat(failure["create_time"].replace("Z", "+00:00"))
        expires = datetime.fromisoformat(failure["expire_time"].replace("Z", "+00:00"))
        assert expires - created == timedelta(days=2)

        # The status and the ledger carry the reason code and never the text.
        assert text not in str(done)
        entries = await _ledger(info.endpoints["audit"], info.operator_token(), job.name)
        assert any(e.event.reason_code == "STORAGE_FAILED" for e in entries)
        assert all(text.encode() not in e.SerializeToString() for e in entries)

        # Every read is recorded: the second lists the first, under the operator.
        second = await asyncio.to_thread(_diagnose, stack.data_dir, job.name)
        for service, reply in second["stages"].items():
            readers = [r["reader"] for r in reply["reads"]]
            assert len(readers) == 2, (service, reply)
            assert all(r.startswith("operators/-/tokens/") for r in readers)

        # A tenant's token, and no token, are refused at every stage.
        for service in ("validator", "assembler", "signer"):
            async with aio_channel(info.endpoints[service], None) as channel:
                stub = dgrpc.DiagnosticsServiceStub(channel)
                for metadata in (bearer_metadata(info.token()), ()):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await stub.ListDiagnostics(
                            dpb.ListDiagnosticsRequest(job=job.name), metadata=metadata
                        )
                    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, service
        third = await asyncio.to_thread(_diagnose, stack.data_dir, job.name)
        assert all(len(reply["reads"]) == 3 for reply in third["stages"].values()), (
            "a refused call reads nothing and records nothing"
        )
    finally:
        await asyncio.to_thread(stack.stop)
