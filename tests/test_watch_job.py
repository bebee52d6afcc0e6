"""WatchJob (issue 14, "what must be shown" 3): a client sees each change of a
job's state once, in ledger order, ending at the terminal state — also when
admission restarts in the middle of the watch — without polling.

The stack tests compare what the watch delivered with the ledger's own
sequence of state changes for the job (audit's ListJobEvents, folded by the
job view's rule). The unit tests drive audit's watches over a SQLite ledger:
an append wakes a watch at once, a resumed watch repeats nothing, the bound
refuses RESOURCE_EXHAUSTED and draining ends the open watches."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from quire.admission.v1 import admission_service_pb2 as pb
from quire.audit import ledger, tables
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.audit.watch import JobWatches
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.database import Database
from quire.errors import Overloaded, TransientError
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.jobview import JobFacts, apply, is_retirement
from quire.reasons import ReasonCode
from quire.settings import WatchSettings
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.damaged import AMBIGUOUS
from quire.testing.pdfs import write_text_pdf
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2

Changes = list[tuple[int, str]]


async def _ledger_changes(stack: Stack, job: str) -> Changes:
    """(sequence, state) of each ledger entry that changed the job's state."""
    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        reply = await audit.ListJobEvents(
            audit_service_pb2.ListJobEventsRequest(job=job, page_size=500),
            metadata=bearer_metadata(info.operator_token()),
        )
    facts: JobFacts | None = None
    changes: Changes = []
    for entry in reply.entries:
        if is_retirement(entry.event):
            continue
        before, facts = facts, apply(facts, entry.event)
        if before is None or before.state != facts.state:
            changes.append((entry.sequence, facts.state))
    return changes


def _seen(changes: list[object]) -> Changes:
    return [(c.sequence, state_name(c.job.state)) for c in changes]  # type: ignore[attr-defined]


async def _let_in(submit: Callable[[], Awaitable[job_pb2.Job]]) -> job_pb2.Job:
    """Accepted, waiting as a client does while the session's stack sheds load
    (QUEUE_BACKLOG: its queue-age budget is 2 s, and a busy machine passes it)."""
    for _ in range(300):
        try:
            return await submit()
        except grpc.aio.AioRpcError as error:
            if reason_of(error) != ReasonCode.QUEUE_BACKLOG:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("never accepted")


async def _one_page_job(client: AdmissionClient, folder: Path, text: str) -> str:
    source = await client.upload(write_text_pdf(folder / f"{text}.pdf", [text]))
    return (await _let_in(lambda: client.submit([PacketItem(text, source.sha256)]))).name


async def _following(
    client: AdmissionClient, name: str, received: list[object]
) -> asyncio.Task[None]:
    """Watch ``name`` in the background into ``received``; returns once the
    first change has arrived."""
    first = asyncio.Event()

    async def follow() -> None:
        changes = client.watch_changes(name, timeout=120)
        async with contextlib.aclosing(changes):
            async for change in changes:
                received.append(change)
                first.set()

    watching = asyncio.create_task(follow())
    await asyncio.wait_for(first.wait(), 30)
    return watching


@pytest.mark.stack
async def test_a_watch_delivers_every_state_change_in_ledger_order(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    name = await _one_page_job(client, tmp_path, "watched")
    changes = [change async for change in client.watch_changes(name, timeout=60)]
    seen = _seen(changes)
    states = [state for _, state in seen]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED", states
    assert {"VALIDATING", "ASSEMBLING", "SIGNING", "COMMITTING"} <= set(states), states
    assert len(states) == len(set(states)), "no state twice"
    assert seen == await _ledger_changes(stack, name), "exactly the ledger's changes, in order"
    assert changes[-1].job == await client.get_job(name), "the last view is GetJob's"

    # Watching a finished job again replays the same; after its end, nothing.
    assert _seen([c async for c in client.watch_changes(name, timeout=10)]) == seen
    after_end = client.watch_changes(name, after_sequence=seen[-1][0], timeout=10)
    assert [c async for c in after_end] == []
    # Resuming from the middle gives the rest and only the rest.
    middle = seen[1][0]
    rest = client.watch_changes(name, after_sequence=middle, timeout=10)
    assert _seen([c async for c in rest]) == seen[2:]

    jobs = [job async for job in client.watch(name, timeout=10)]
    assert [state_name(job.state) for job in jobs] == states
    assert await client.wait(name, timeout=10) == changes[-1].job

    # Settled only: the terminal change alone, at the ledger's sequence.
    settled = client.watch_changes(name, timeout=10, settled_only=True)
    assert _seen([c async for c in settled]) == seen[-1:]


@pytest.mark.stack
async def test_every_watched_change_carries_the_jobs_bundle_id(
    client: AdmissionClient, tmp_path: Path
) -> None:
    source = await client.upload(write_text_pdf(tmp_path / "bundled.pdf", ["bundled"]))
    manifest = job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=0, document_id="bundled", sha256=source.sha256)]
    )
    request = pb.SubmitJobRequest(
        request_id=uuid.uuid4().hex, manifest=manifest, bundle_id="lease-7"
    )
    job = await _let_in(lambda: client.submit_request(request))
    changes = [change async for change in client.watch_changes(job.name, timeout=60)]
    assert state_name(changes[-1].job.state) == "COMPLETED"
    assert {change.job.bundle_id for change in changes} == {"lease-7"}
    assert changes[-1].job == await client.get_job(job.name), "the last view is GetJob's"


@pytest.mark.stack
@pytest.mark.fault
async def test_a_watch_resumes_across_an_admission_restart(  # type: ignore[no-untyped-def]
    stack: Stack, client: AdmissionClient, validate_queue, tmp_path: Path
) -> None:
    await validate_queue.pause()  # the job waits at ACCEPTED until admission is killed
    name = await _one_page_job(client, tmp_path, "restarted")
    received: list[object] = []
    watching = await _following(client, name, received)
    assert _seen(received) == [(_seen(received)[0][0], "ACCEPTED")]

    restarts = stack.restarts("admission")
    stack.kill("admission")
    await validate_queue.resume()  # the job moves on while admission is down
    deadline = time.monotonic() + 60
    while stack.restarts("admission") == restarts:
        assert time.monotonic() < deadline, "admission was not restarted"
        await asyncio.sleep(0.1)
    await asyncio.to_thread(stack.wait_healthy)
    await asyncio.wait_for(watching, 120)

    seen = _seen(received)
    states = [state for _, state in seen]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED", states
    assert len(states) == len(set(states)), "nothing repeated after the resume"
    assert seen == await _ledger_changes(stack, name), "nothing missed either"
    assert stack.restarts("admission") == restarts + 1


@pytest.mark.stack
@pytest.mark.fault
async def test_a_watch_resumes_when_admission_drains(  # type: ignore[no-untyped-def]
    stack: Stack, client: AdmissionClient, validate_queue, tmp_path: Path
) -> None:
    """A graceful stop (SIGTERM) ends the relay with SERVICE_DRAINING rather than
    leaving it hanging; the client watches again from its last sequence."""
    await validate_queue.pause()
    name = await _one_page_job(client, tmp_path, "drained")
    received: list[object] = []
    watching = await _following(client, name, received)
    process = stack._children["admission"].process  # noqa: SLF001 - its exit status
    await asyncio.to_thread(stack.stop_service, "admission")
    assert process.returncode == 0, "admission drained and exited cleanly"
    assert not watching.done(), "the client is waiting to watch again, not finished"
    await validate_queue.resume()
    stack.start_service("admission")
    await asyncio.to_thread(stack.wait_healthy)
    await asyncio.wait_for(watching, 120)

    seen = _seen(received)
    states = [state for _, state in seen]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED", states
    assert len(states) == len(set(states)), "nothing repeated after the resume"
    assert seen == await _ledger_changes(stack, name), "nothing missed either"


@pytest.mark.stack
async def test_another_tenants_job_cannot_be_watched(  # type: ignore[no-untyped-def]
    stack: Stack, client: AdmissionClient, tenants, tmp_path: Path
) -> None:
    name = await _one_page_job(client, tmp_path, "private")
    stranger = await tenants("stranger")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _change in stranger.watch_changes(name, timeout=10):
            pass
    with pytest.raises(grpc.aio.AioRpcError) as looked:
        await stranger.get_job(name)
    assert refused.value.code() == looked.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(refused.value) == reason_of(looked.value)


@pytest.mark.stack
async def test_a_rejected_jobs_watch_ends_at_rejected(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    builder, sub_code = AMBIGUOUS["revisions-disagree"]
    source = await client.upload(builder(tmp_path / "revisions.pdf"))
    name = (await _let_in(lambda: client.submit([PacketItem("guess", source.sha256)]))).name
    changes = [change async for change in client.watch_changes(name, timeout=60)]
    seen = _seen(changes)
    assert seen[0][1] == "ACCEPTED" and seen[-1][1] == "REJECTED", seen
    assert (changes[-1].job.reason_code, changes[-1].job.reason_detail) == (
        "MALFORMED_PDF",
        sub_code,
    )
    assert seen == await _ledger_changes(stack, name)
    final = await client.wait(name, timeout=10)
    assert state_name(final.state) == "REJECTED"
    settled = client.watch_changes(name, timeout=10, settled_only=True)
    assert _seen([c async for c in settled]) == seen[-1:]


FACTORY = EventFactory("test", "instance", "0")
JOB = "jobs/aa01"


def _append(database: Database, from_state: str, to_state: str, reason: str = "") -> None:
    task = queue_pb2.JobTask(job=JOB, tenant="t1", manifest_digest="m" * 64, ruleset="r@1")
    event = FACTORY.transition(
        task, from_state, to_state, attempt=1, lease_token=1, reason_code=reason
    )
    database.transaction(lambda s: ledger.append(s, event))


@pytest.fixture
def database(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    opened.create_schema()
    yield opened
    opened.close()


async def test_an_append_wakes_the_watch_at_once_and_a_resume_repeats_nothing(
    database: Database,
) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))  # the poll never helps
    _append(database, "", "ACCEPTED")
    changes = watches.changes(JOB, 0)
    facts, first = await asyncio.wait_for(anext(changes), 5)
    assert facts.state == "ACCEPTED"
    pending = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0.05)
    assert not pending.done(), "nothing new yet"
    _append(database, "ACCEPTED", "VALIDATING")
    _append(database, "ACCEPTED", "VALIDATING", "LATE")  # a late duplicate step: no change
    watches.notify(JOB)
    facts, second = await asyncio.wait_for(pending, 1)
    assert facts.state == "VALIDATING" and second > first
    _append(database, "VALIDATING", "REJECTED", "MALFORMED_PDF")
    watches.notify(JOB)
    facts, third = await asyncio.wait_for(anext(changes), 1)
    assert (facts.state, facts.reason_code) == ("REJECTED", "MALFORMED_PDF")
    with pytest.raises(StopAsyncIteration):
        await anext(changes)
    assert watches.open == 0

    resumed = [(f.state, s) async for f, s in watches.changes(JOB, second)]
    assert resumed == [("REJECTED", third)]
    assert [s async for s in watches.changes(JOB, third)] == []


async def test_a_settled_only_watch_is_told_only_of_parked_and_terminal_states(
    database: Database,
) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    changes = watches.changes(JOB, 0, settled_only=True)
    pending = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0.05)
    for before, after in [("", "ACCEPTED"), ("ACCEPTED", "VALIDATING")]:
        _append(database, before, after)
        watches.notify(JOB)
    await asyncio.sleep(0.05)
    assert not pending.done(), "the stages' states are not told"
    _append(database, "VALIDATING", "NEEDS_REVIEW")
    watches.notify(JOB)
    facts, parked = await asyncio.wait_for(pending, 1)
    assert facts.state == "NEEDS_REVIEW"
    _append(database, "NEEDS_REVIEW", "ASSEMBLING")
    _append(database, "ASSEMBLING", "FAILED")
    watches.notify(JOB)
    facts, failed = await asyncio.wait_for(anext(changes), 1)
    assert facts.state == "FAILED" and failed > parked
    with pytest.raises(StopAsyncIteration):
        await anext(changes)
    # Resuming after the parked state's sequence: the rest, settled only.
    resumed = [(f.state, s) async for f, s in watches.changes(JOB, parked, settled_only=True)]
    assert resumed == [("FAILED", failed)]
    every = [f.state async for f, _s in watches.changes(JOB, 0)]
    assert every == ["ACCEPTED", "VALIDATING", "NEEDS_REVIEW", "ASSEMBLING", "FAILED"]


async def test_the_poll_finds_appends_it_was_not_told_of(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=0.1))
    changes = watches.changes(JOB, 0)
    pending = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0.05)
    _append(database, "", "ACCEPTED")  # another replica's append: no notice here
    facts, _sequence = await asyncio.wait_for(pending, 2)
    assert facts.state == "ACCEPTED"
    await changes.aclose()
    assert watches.open == 0


async def test_watches_are_bounded_and_end_when_the_service_drains(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(max_watches=1, poll_seconds=60))
    held = watches.changes(JOB, 0)
    pending = asyncio.ensure_future(anext(held))
    await asyncio.sleep(0.05)
    with pytest.raises(Overloaded) as refused:
        await anext(watches.changes(JOB, 0))
    assert refused.value.reason == ReasonCode.WATCHES_EXCEEDED
    watches.close()
    with pytest.raises(TransientError) as ended:
        await asyncio.wait_for(pending, 1)
    assert ended.value.reason == ReasonCode.SERVICE_DRAINING
    assert watches.open == 0
    with pytest.raises(TransientError):
        await anext(watches.changes(JOB, 0))


def _append_for(database: Database, job: str, from_state: str, to_state: str) -> None:
    task = queue_pb2.JobTask(job=job, tenant="t1", manifest_digest="m" * 64, ruleset="r@1")
    event = FACTORY.transition(task, from_state, to_state, attempt=1, lease_token=1)
    database.transaction(lambda s: ledger.append(s, event))


async def test_watches_woken_together_read_together_and_each_sees_only_its_job(
    tmp_path: Path,
) -> None:
    reads: list[str] = []
    counted = Database(
        f"sqlite:///{tmp_path / 'audit.db'}",
        tables.metadata,
        transactions=lambda kind: lambda: reads.append(kind),
    )
    counted.create_schema()
    try:
        jobs = [f"jobs/bb{n:02d}" for n in range(3)]
        watches = JobWatches(counted, WatchSettings(poll_seconds=60))
        for job in jobs:
            _append_for(counted, job, "", "ACCEPTED")
        streams = [watches.changes(job, 0) for job in jobs]
        firsts = await asyncio.gather(*(anext(stream) for stream in streams))
        assert [facts.state for facts, _ in firsts] == ["ACCEPTED"] * 3
        pending = [asyncio.ensure_future(anext(stream)) for stream in streams]
        await asyncio.sleep(0.05)
        reads.clear()
        for job in jobs:  # one commit's appends, for three jobs
            _append_for(counted, job, "ACCEPTED", "VALIDATING")
        reads.clear()
        for job in jobs:
            watches.notify(job)
        seconds = await asyncio.wait_for(asyncio.gather(*pending), 2)
        assert [facts.job for facts, _ in seconds] == jobs
        assert [facts.state for facts, _ in seconds] == ["VALIDATING"] * 3
        assert reads == ["read"], "three woken watches, one query"
        for stream in streams:
            await stream.aclose()
    finally:
        counted.close()


def _finished_at(stack: Stack, job: str) -> object:
    path = Path(stack.data_dir) / "admission" / "admission.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT finished_at FROM jobs WHERE job = ?", (job,)).fetchone()
    return None if row is None else row[0]


@pytest.mark.stack
async def test_an_end_a_watch_relayed_is_marked_with_the_next_flush(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    """Admission marks relayed ends together, twice a second: the tenant's
    outstanding count drops without a status read or a call to audit."""
    name = await _one_page_job(client, tmp_path, "ended")
    changes = [change async for change in client.watch_changes(name, timeout=60)]
    assert state_name(changes[-1].job.state) == "COMPLETED"
    deadline = time.monotonic() + 5
    while _finished_at(stack, name) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert _finished_at(stack, name) is not None


def _record(database: Database, job: str, steps: list[tuple[str, str]]) -> list[ledger.Outcome]:
    task = queue_pb2.JobTask(job=job, tenant="t1", manifest_digest="m" * 64, ruleset="r@1")
    arrivals = [
        ledger.Arrival(
            FACTORY.transition(task, before, after, attempt=1, lease_token=1),
            producer="audit",
            judged=False,
        )
        for before, after in steps
    ]
    return database.transaction(lambda s: ledger.record_many(s, arrivals))


def test_each_appended_entry_names_the_jobs_entry_before_it(database: Database) -> None:
    first = _record(database, JOB, [("", "ACCEPTED"), ("ACCEPTED", "VALIDATING")])
    _record(database, "jobs/bb02", [("", "ACCEPTED")])  # another job's entry between
    second = _record(database, JOB, [("VALIDATING", "ASSEMBLING")])
    entries = [o.entry for o in first + second]
    assert all(e is not None for e in entries)
    sequences = [e[0] for e in entries]  # type: ignore[index]
    # A job's first entry: no view row yet, so its predecessor is not known.
    assert [o.previous for o in first + second] == [None, sequences[0], sequences[1]]
    assert sequences[2] > sequences[1] + 1, "the other job's entry lies between"
    ledger_rows = database.transaction(
        lambda s: [
            (row.sequence, row.event)
            for row in s.execute(
                tables.ledger.select()
                .where(tables.ledger.c.job == JOB)
                .order_by(tables.ledger.c.sequence)
            )
        ]
    )
    assert ledger_rows == entries


async def test_an_offered_entry_is_taken_without_reading_and_any_other_is_read(
    database: Database,
) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    reads: list[int] = []
    after = watches._reads.after  # noqa: SLF001 - counting the watch's ledger reads

    async def counted(job: str, position: int):  # type: ignore[no-untyped-def]
        reads.append(position)
        return await after(job, position)

    watches._reads.after = counted  # type: ignore[method-assign]  # noqa: SLF001
    _record(database, JOB, [("", "ACCEPTED")])
    changes = watches.changes(JOB, 0)
    facts, first = await asyncio.wait_for(anext(changes), 5)
    assert facts.state == "ACCEPTED" and len(reads) == 1
    pending = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0.05)
    (validating,) = _record(database, JOB, [("ACCEPTED", "VALIDATING")])
    watches.offer(JOB, [(validating.previous, validating.entry)])  # type: ignore[list-item]
    facts, second = await asyncio.wait_for(pending, 2)
    assert facts.state == "VALIDATING" and validating.entry[0] == second  # type: ignore[index]
    assert len(reads) == 1, "taken as offered: no read"
    # An offered entry, then one appended without an offer (the completion
    # desk's way), both before the watch wakes: the plain notice makes it read,
    # and it sees both.
    (assembling,) = _record(database, JOB, [("VALIDATING", "ASSEMBLING")])
    _append(database, "ASSEMBLING", "SIGNING")
    watches.offer(JOB, [(assembling.previous, assembling.entry)])  # type: ignore[list-item]
    watches.notify(JOB)
    facts, _third = await asyncio.wait_for(anext(changes), 2)
    assert facts.state == "ASSEMBLING"
    facts, _fourth = await asyncio.wait_for(anext(changes), 2)
    assert facts.state == "SIGNING", "the entry not offered is not left for the poll"
    assert len(reads) == 2
    await changes.aclose()
    assert watches.open == 0
