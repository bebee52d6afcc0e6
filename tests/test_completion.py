"""Completion is evidence: audit completes a job only with the artifact and the
whole history in hand, in one transaction with its ledger entry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from quire.audit import ledger, tables
from quire.audit.completion import CompletionDesk, Verdict
from quire.audit.history import HistoryWatch
from quire.audit.recorder import EventRecorder
from quire.audit.writes import AuditWrites
from quire.database import Database
from quire.jobs import HISTORY_BEFORE_COMPLETION
from quire.localblobs import LocalBlobStore
from quire.settings import QueueSettings
from quire.testing.sealedstore import sealed_store
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.wire import SIGNATURE_HEADER

JOB = "jobs/0a0b0c0d0e0f"
EVENTS = EventFactory("test", "instance", "0")


HISTORY = HistoryWatch()


def _make_desk(
    tmp_path: Path,
    *,
    history_wait_seconds: float = 3.0,
    transactions: Callable[[str], Callable[[], None]] | None = None,
    writes: Callable[[Database], AuditWrites] | None = None,
) -> tuple[CompletionDesk, Database, LocalBlobStore]:
    database = Database(
        f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata, transactions=transactions
    )
    database.create_schema()
    blobs = sealed_store(tmp_path / "blobs")
    completion = CompletionDesk(
        database=database,
        blobs=blobs,
        events=EVENTS,
        queue=QueueSettings(),
        history=HISTORY,
        history_wait_seconds=history_wait_seconds,
        writes=writes(database) if writes is not None else None,
    )
    return completion, database, blobs


@pytest.fixture
def desk(tmp_path: Path) -> tuple[CompletionDesk, Database, LocalBlobStore]:
    return _make_desk(tmp_path)


def _signed_task(blobs: LocalBlobStore, content: bytes = b"%PDF signed") -> queue_pb2.JobTask:
    with blobs.writer("t1") as writer:
        writer.write(content)
        digest = writer.sha256
        writer.promote("signed/t1/0a0b0c0d0e0f.pdf")
    return queue_pb2.JobTask(
        job=JOB,
        tenant="t1",
        signed=job_pb2.Artifact(blob_key="signed/t1/0a0b0c0d0e0f.pdf", sha256=digest),
    )


def _history(
    task: queue_pb2.JobTask, states: tuple[str, ...], previous: str = ""
) -> list[queue_pb2.TransitionEvent]:
    events = []
    for state in states:
        fields = {"output_digest": task.signed.sha256} if state == "COMMITTING" else {}
        events.append(EVENTS.transition(task, previous, state, attempt=1, lease_token=1, **fields))
        previous = state
    return events


def _record_history(database: Database, task: queue_pb2.JobTask, states: tuple[str, ...]) -> None:
    for event in _history(task, states):
        database.transaction(lambda s, e=event: ledger.append(s, e))


def _state(database: Database) -> str:
    return database.transaction(lambda s: s.execute(select(tables.jobs.c.state)).scalar_one())


async def test_a_job_with_its_whole_history_completes(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    assert (
        await completion.complete(task, 1, await completion.leases.acquire(JOB))
        is Verdict.COMPLETED
    )
    assert _state(database) == "COMPLETED"
    assert (
        await completion.complete(task, 2, await completion.leases.acquire(JOB))
        is Verdict.ALREADY_DONE
    )


async def test_missing_history_keeps_the_job_committing(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "COMMITTING"))
    assert (
        await completion.complete(task, 1, await completion.leases.acquire(JOB))
        is Verdict.HISTORY_INCOMPLETE
    )
    assert _state(database) == "COMMITTING"
    _record_history(database, task, ("ASSEMBLING", "SIGNING"))
    assert (
        await completion.complete(task, 2, await completion.leases.acquire(JOB))
        is Verdict.COMPLETED
    )


async def test_a_missing_artifact_fails_the_job(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    blobs.delete(task.signed.blob_key)
    assert (
        await completion.complete(task, 1, await completion.leases.acquire(JOB)) is Verdict.FAILED
    )
    row = database.transaction(lambda s: s.execute(select(tables.jobs)).one())
    assert (row.state, row.reason_code) == ("FAILED", "ARTIFACT_MISSING")


async def test_an_artifact_with_another_digest_fails_the_job(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    blobs.local_path(task.signed.blob_key).write_bytes(b"%PDF replaced")
    assert (
        await completion.complete(task, 1, await completion.leases.acquire(JOB)) is Verdict.FAILED
    )
    row = database.transaction(lambda s: s.execute(select(tables.jobs)).one())
    assert (row.state, row.reason_code) == ("FAILED", "ARTIFACT_DIGEST_MISMATCH")


async def test_a_superseded_delivery_cannot_complete(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    stale = await completion.leases.acquire(JOB)
    await completion.leases.acquire(JOB)  # a redelivery took the job
    assert await completion.complete(task, 1, stale) is Verdict.STALE
    assert _state(database) == "COMMITTING"


async def test_completion_waits_for_late_events_instead_of_failing(desk) -> None:  # type: ignore[no-untyped-def]
    completion, database, blobs = desk
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "COMMITTING"))

    async def late_events() -> None:
        await asyncio.sleep(0.3)
        _record_history(database, task, ("ASSEMBLING", "SIGNING"))
        HISTORY.notify(JOB)

    arriving = asyncio.create_task(late_events())
    refusal = await completion._refusal(task)  # noqa: SLF001
    verdict = await completion._complete_when_evident(task, 1, refusal)  # noqa: SLF001
    await arriving
    assert verdict is Verdict.COMPLETED
    assert _state(database) == "COMPLETED"


async def test_a_history_wait_cancelled_as_the_history_grows_is_cancelled() -> None:
    """The growth and the cancel in one turn of the loop: the wait must not
    swallow the cancel (asyncio.wait_for did on Python 3.11) and go on as if
    the history had grown, keeping a watch whose caller is gone."""
    from quire.audit.history import HistoryWatch

    history = HistoryWatch()
    waiting = asyncio.create_task(history.wait("jobs/j1", 30))
    await asyncio.sleep(0.05)
    history.notify("jobs/j1")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_events_and_the_completion_they_allow_commit_together(tmp_path: Path) -> None:
    kinds: list[str] = []
    lines: list[AuditWrites] = []

    def line(database: Database) -> AuditWrites:
        lines.append(AuditWrites(database))
        return lines[-1]

    completion, database, blobs = _make_desk(
        tmp_path,
        history_wait_seconds=0.0,
        transactions=lambda kind: lambda: kinds.append(kind),
        writes=line,
    )
    (writes,) = lines  # the line the desk writes through
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING"))
    lease = await completion.leases.acquire(JOB)
    last = _history(task, ("ASSEMBLING", "SIGNING", "COMMITTING"), previous="REVIEWING")
    kinds.clear()
    # A slow write holds the writer; what arrives meanwhile goes in the next group.
    holding = asyncio.create_task(writes.run(lambda _c: time.sleep(0.5)))
    await asyncio.sleep(0.05)
    recorded, verdict = await asyncio.gather(
        writes.record([ledger.Arrival(event, "test", judged=False) for event in last]),
        completion.complete(task, 1, lease),
    )
    await holding
    assert [outcome.recorded for outcome in recorded] == [ledger.Recorded.APPENDED] * 3
    assert verdict is Verdict.COMPLETED, "the completion saw the events of its own group"
    assert kinds == ["write", "write"], "the events and the completion in one transaction"
    assert _state(database) == "COMPLETED"


class _Offers(HistoryWatch):
    """What the desk hands to the job's watches."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[tuple[str, list[tuple[int | None, tuple[int, bytes]]]]] = []

    def appended(self, job: str, entries: list[tuple[int | None, tuple[int, bytes]]]) -> None:
        self.offered.append((job, entries))
        super().appended(job, entries)


async def test_a_delivery_takes_its_token_decides_and_appends_in_one_transaction(
    tmp_path: Path,
) -> None:
    kinds: list[str] = []
    completion, database, blobs = _make_desk(
        tmp_path, transactions=lambda kind: lambda: kinds.append(kind)
    )
    offers = _Offers()
    completion._history = offers  # noqa: SLF001
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    kinds.clear()
    verdict = await completion._complete_when_evident(task, 1, None)  # noqa: SLF001
    assert verdict is Verdict.COMPLETED
    assert kinds == ["write"], "the token, the checks and the entry in one transaction"
    rows = database.transaction(
        lambda s: s.execute(
            select(tables.ledger.c.sequence, tables.ledger.c.event, tables.ledger.c.to_state)
            .where(tables.ledger.c.job == JOB)
            .order_by(tables.ledger.c.sequence)
        ).all()
    )
    *before, last = rows
    assert last.to_state == "COMPLETED"
    completed = queue_pb2.TransitionEvent.FromString(last.event)
    token = database.transaction(
        lambda s: s.execute(select(tables.leases.c.token).where(tables.leases.c.job == JOB))
    ).scalar_one()
    assert completed.lease_token == token == 1
    # The watches get the entry as appended, with the job's entry before it.
    assert offers.offered == [(JOB, [(before[-1].sequence, (last.sequence, last.event))])]


async def test_deliveries_at_once_complete_the_job_once(tmp_path: Path) -> None:
    completion, database, blobs = _make_desk(tmp_path)
    task = _signed_task(blobs)
    _record_history(database, task, HISTORY_BEFORE_COMPLETION)
    verdicts = await asyncio.gather(
        *(completion._complete_when_evident(task, n, None) for n in (1, 2, 3))  # noqa: SLF001
    )
    assert sorted(v.value for v in verdicts) == ["already_done", "already_done", "completed"]
    completed = database.transaction(
        lambda s: s.execute(
            select(tables.ledger.c.sequence).where(tables.ledger.c.to_state == "COMPLETED")
        ).all()
    )
    assert len(completed) == 1


async def test_history_grown_while_the_completion_reads_it_is_not_waited_out(
    tmp_path: Path,
) -> None:
    """Another audit replica records the job's last events and says so while
    this one's read of the history is on its way: the news must wake the
    completion at once, not be lost before it starts waiting (the wait would
    run out and the job would sit COMMITTING until a retry)."""
    history = HistoryWatch()
    completion, database, blobs = _make_desk(tmp_path, history_wait_seconds=30.0)
    completion._history = history  # noqa: SLF001 - this test's own notice
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "COMMITTING"))
    writes = completion._writes  # noqa: SLF001
    run = writes.run
    reads = 0

    async def read_then_news(work, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        decided = await run(work, **kwargs)
        if reads == 1:  # the other replica's append lands just after this read
            _record_history(database, task, ("ASSEMBLING", "SIGNING"))
            history.notify(JOB)
        return decided

    writes.run = read_then_news  # type: ignore[method-assign]
    refusal = await completion._refusal(task)  # noqa: SLF001
    verdict = await asyncio.wait_for(
        completion._complete_when_evident(task, 1, refusal),  # noqa: SLF001
        timeout=10,
    )
    assert verdict is Verdict.COMPLETED
    assert reads == 2


async def test_a_try_that_finds_the_history_incomplete_writes_nothing(tmp_path: Path) -> None:
    """The commit task usually overtakes the signer's last events: that try
    takes no token and changes nothing, so it costs no durable commit."""
    completion, database, blobs = _make_desk(tmp_path, history_wait_seconds=0.0)
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "COMMITTING"))

    def tokens() -> list[int]:
        return (
            database.transaction(
                lambda s: s.execute(select(tables.leases.c.token).where(tables.leases.c.job == JOB))
            )
            .scalars()
            .all()
        )

    verdict = await completion._complete_when_evident(task, 1, None)  # noqa: SLF001
    assert verdict is Verdict.HISTORY_INCOMPLETE
    assert tokens() == [], "no token taken"
    _record_history(database, task, ("ASSEMBLING", "SIGNING"))
    verdict = await completion._complete_when_evident(task, 2, None)  # noqa: SLF001
    assert verdict is Verdict.COMPLETED
    assert tokens() == [1], "the deciding try took the first token"


# --- The signer's events, riding on its commit task ------------------------------

SIGNER = EventFactory("signer", "instance", "0")


class _Delivery:
    """A commit task as the queue worker hands it on, its signature already
    checked (the producer is the header's); records how it was settled."""

    def __init__(self, task: queue_pb2.JobTask, producer: str = "signer") -> None:
        self.subject = "quire.work.commit.interactive"
        self.data = task.SerializeToString()
        self.headers = {SIGNATURE_HEADER: f"{producer}.signature"}
        self.metadata = SimpleNamespace(num_delivered=1, timestamp=datetime.now(UTC))
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.settled.append("nak")

    async def term(self) -> None:
        self.settled.append("term")


def _carrying_desk(
    tmp_path: Path,
    history_wait_seconds: float = 3.0,
    transactions: Callable[[str], Callable[[], None]] | None = None,
) -> tuple[CompletionDesk, Database, LocalBlobStore]:
    database = Database(
        f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata, transactions=transactions
    )
    database.create_schema()
    writes = AuditWrites(database)
    history = HistoryWatch()
    recorder = EventRecorder(writes, history, QueueSettings().backoff)
    desk = CompletionDesk(
        database=database,
        blobs=sealed_store(tmp_path / "blobs"),
        events=EVENTS,
        queue=QueueSettings(),
        history=history,
        history_wait_seconds=history_wait_seconds,
        writes=writes,
        recorder=recorder,
    )
    return desk, database, desk._blobs  # type: ignore[return-value]  # noqa: SLF001


def _carrying(task: queue_pb2.JobTask, *states: str) -> queue_pb2.JobTask:
    """``task`` carrying the signer's steps from SIGNING through ``states``."""
    carried = queue_pb2.JobTask()
    carried.CopyFrom(task)
    previous = "SIGNING"
    for state in states:
        fields = {"output_digest": task.signed.sha256} if state == "COMMITTING" else {}
        carried.events.append(
            SIGNER.transition(task, previous, state, attempt=1, lease_token=1, **fields)
        )
        previous = state
    return carried


def _recorded_states(database: Database) -> list[str]:
    return [
        str(row.to_state)
        for row in database.transaction(
            lambda s: s.execute(
                select(tables.ledger.c.to_state).order_by(tables.ledger.c.sequence)
            ).all()
        )
    ]


async def test_a_commit_task_carrying_the_signers_events_completes_in_one_delivery(
    tmp_path: Path,
) -> None:
    kinds: list[str] = []
    desk, database, blobs = _carrying_desk(
        tmp_path, transactions=lambda kind: lambda: kinds.append(kind)
    )
    task = _signed_task(blobs)
    _record_history(
        database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING")
    )
    delivery = _Delivery(_carrying(task, "COMMITTING"))
    kinds.clear()
    await desk.handle(delivery)  # type: ignore[arg-type]
    assert delivery.settled == ["ack"]
    assert _state(database) == "COMPLETED"
    assert kinds == ["write"], "the carried events and the completion in one transaction"
    again = _Delivery(_carrying(task, "COMMITTING"))
    await desk.handle(again)  # type: ignore[arg-type]
    assert again.settled == ["ack"]
    assert _recorded_states(database).count("COMMITTING") == 1, "each event recorded once"
    assert _recorded_states(database).count("COMPLETED") == 1


async def test_carried_events_that_wait_for_earlier_ones_complete_once_those_arrive(
    tmp_path: Path,
) -> None:
    """The assembler's hand-off is still on the events stream: the carried
    step waits for it (bounded), and is recorded in order once it is in."""
    desk, database, blobs = _carrying_desk(tmp_path)
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING"))
    delivery = _Delivery(_carrying(task, "COMMITTING"))
    handling = asyncio.create_task(desk.handle(delivery))  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert not handling.done() and "COMMITTING" not in _recorded_states(database)
    (signing,) = _history(task, ("ASSEMBLING", "SIGNING"))[1:]
    database.transaction(lambda s: ledger.append(s, signing))
    desk._history.notify(JOB)  # noqa: SLF001 - as the events consumer does
    await asyncio.wait_for(handling, timeout=10)
    assert delivery.settled == ["ack"]
    assert _recorded_states(database)[-3:] == ["SIGNING", "COMMITTING", "COMPLETED"]


async def test_carried_events_still_waiting_after_the_wait_retry_the_task(tmp_path: Path) -> None:
    desk, database, blobs = _carrying_desk(tmp_path, history_wait_seconds=0.2)
    task = _signed_task(blobs)
    _record_history(database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING"))
    delivery = _Delivery(_carrying(task, "COMMITTING"))
    await desk.handle(delivery)  # type: ignore[arg-type]
    assert delivery.settled == ["nak"]
    assert _state(database) == "ASSEMBLING", "nothing appended out of turn, nothing completed"


@pytest.mark.parametrize(
    ("producer", "actor", "state"),
    [
        ("signer", "signer", "VALIDATING"),  # a step the signer never takes
        ("signer", "signer", "COMPLETED"),  # audit's alone
        ("signer", "validator", "COMMITTING"),  # another service's event
    ],
)
async def test_events_a_commit_task_carries_that_its_producer_may_not_make_are_not_recorded(
    tmp_path: Path, producer: str, actor: str, state: str
) -> None:
    desk, database, blobs = _carrying_desk(tmp_path, history_wait_seconds=0.2)
    task = _signed_task(blobs)
    _record_history(
        database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING")
    )
    carried = queue_pb2.JobTask()
    carried.CopyFrom(task)
    carried.events.append(
        EventFactory(actor, "instance", "0").transition(
            task, "SIGNING", state, attempt=1, lease_token=1, output_digest=task.signed.sha256
        )
    )
    delivery = _Delivery(carried, producer)
    await desk.handle(delivery)  # type: ignore[arg-type]
    # As if the event had never come (the events consumer refuses such a
    # message alone): the history stays short, and the task is tried again.
    assert delivery.settled == ["nak"]
    assert _state(database) == "SIGNING", "nothing recorded, nothing completed"


class _Notices(HistoryWatch):
    """Which jobs' histories were said to have grown, however."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[str] = []

    def notify(self, job: str) -> None:
        self.jobs.append(job)
        super().notify(job)

    def appended(self, job: str, entries: list[tuple[int | None, tuple[int, bytes]]]) -> None:
        self.jobs.append(job)
        super().appended(job, entries)


async def test_carried_events_written_before_the_completion_failed_are_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion fails after the group is written again item by item:
    the carried event that did commit is in the ledger, the task is tried
    again, and the job's watchers are told its history grew."""
    desk, database, blobs = _carrying_desk(tmp_path, history_wait_seconds=0.2)
    notices = _Notices()
    desk._history = notices  # noqa: SLF001
    desk._recorder._history = notices  # type: ignore[union-attr]  # noqa: SLF001
    task = _signed_task(blobs)
    _record_history(
        database, task, ("ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING")
    )

    def broken(*_args: object) -> None:
        raise RuntimeError("the completion's write failed")

    monkeypatch.setattr(desk, "_end", broken)
    delivery = _Delivery(_carrying(task, "COMMITTING"))
    await desk.handle(delivery)  # type: ignore[arg-type]
    assert delivery.settled == ["nak"]
    assert _recorded_states(database)[-1] == "COMMITTING", "the event committed alone"
    assert JOB in notices.jobs
