"""Admission relays every client's watch over one FollowJobs stream to audit
(``quire.admission.watches.feed``, ``quire.audit.follow``), on a real gRPC server
over a SQLite ledger: each relay gets its own job's changes and nothing
else, many relays cost one call, a client going away frees audit's watch,
audit's bound refuses a follow as it refuses a watch, audit going away ends
every relay UNAVAILABLE, and an audit without the stream (an older
release) is watched job by job."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from quire.admission.watches.relay import WatchRelay
from quire.audit import ledger, tables
from quire.audit.servicer import AuditServicer
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.audit.watch import JobWatches
from quire.database import Database
from quire.errors import Overloaded, TransientError
from quire.jobs import state_name
from quire.reasons import ReasonCode
from quire.settings import WatchSettings
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("test", "instance", "0")


class _Calls(grpc.aio.ServerInterceptor):
    """Counts the calls audit's server takes, by method."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        self.seen[details.method.rpartition("/")[2]] += 1
        return await continuation(details)


class _Outstanding:
    """What the relay tells of each end it relays (admission's outstanding jobs)."""

    def __init__(self) -> None:
        self.ends: list[str] = []

    def ended(self, job: str) -> None:
        self.ends.append(job)


class _OlderAudit(AuditServicer):
    """An audit from before FollowJobs."""

    async def FollowJobs(self, requests: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        yield  # pragma: no cover - an async generator, as gRPC calls it


class _Audit:
    def __init__(
        self,
        database: Database,
        watches: JobWatches,
        older: bool = False,
        kind: type[AuditServicer] | None = None,
    ) -> None:
        self.calls = _Calls()
        self.server = grpc.aio.server(interceptors=[self.calls])
        kind = kind or (_OlderAudit if older else AuditServicer)
        servicer = kind(database, watches=watches)
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = audit_service_pb2_grpc.AuditServiceStub(self.channel)

    async def __aenter__(self) -> _Audit:
        await self.server.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.channel.close()
        await self.server.stop(grace=None)


def _relay(audit: _Audit) -> tuple[WatchRelay, _Outstanding]:
    outstanding = _Outstanding()
    relay = WatchRelay(audit.stub, outstanding)  # type: ignore[arg-type]
    return relay, outstanding


def _append(database: Database, watches: JobWatches, job: str, before: str, after: str) -> None:
    task = queue_pb2.JobTask(job=job, tenant="t1", manifest_digest="m" * 64, ruleset="r@1")
    event = FACTORY.transition(task, before, after, attempt=1, lease_token=1)
    database.transaction(lambda s: ledger.append(s, event))
    watches.notify(job)


async def _states(changes: AsyncIterator[audit_service_pb2.WatchJobResponse]) -> list[str]:
    return [state_name(change.job.state) async for change in changes]


@pytest.fixture
def database(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    opened.create_schema()
    yield opened
    opened.close()


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never")


async def test_relayed_watches_share_one_stream_and_each_gets_its_own_job(
    database: Database,
) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    jobs = [f"jobs/bb0{n}" for n in range(5)]
    async with _Audit(database, watches) as audit:
        relay, outstanding = _relay(audit)
        watching = [asyncio.create_task(_states(relay.relay("t1", job, 0, None))) for job in jobs]
        await _until(lambda: watches.open == len(jobs))
        for job in jobs:
            _append(database, watches, job, "", "ACCEPTED")
        for n, job in enumerate(jobs):
            _append(database, watches, job, "ACCEPTED", "CANCELLED" if n % 2 else "VALIDATING")
        for job in jobs[::2]:
            _append(database, watches, job, "VALIDATING", "FAILED")
        seen = await asyncio.wait_for(asyncio.gather(*watching), 10)
        assert seen == [
            ["ACCEPTED", "VALIDATING", "FAILED"] if n % 2 == 0 else ["ACCEPTED", "CANCELLED"]
            for n in range(len(jobs))
        ]
        assert audit.calls.seen["FollowJobs"] == 1 and audit.calls.seen["WatchJob"] == 0
        assert sorted(outstanding.ends) == jobs, "every relayed end is noted"
        await _until(lambda: watches.open == 0)


async def test_a_client_going_away_frees_audits_watch(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    async with _Audit(database, watches) as audit:
        relay, _ = _relay(audit)
        changes = relay.relay("t1", "jobs/cc01", 0, None)
        _append(database, watches, "jobs/cc01", "", "ACCEPTED")
        first = await asyncio.wait_for(anext(changes), 5)
        assert state_name(first.job.state) == "ACCEPTED"
        assert watches.open == 1
        await changes.aclose()  # the client went away
        await _until(lambda: watches.open == 0)
        assert relay.feed.following == 0


async def test_a_follow_past_audits_bound_is_refused_like_a_watch(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(max_watches=1, poll_seconds=60))
    async with _Audit(database, watches) as audit:
        relay, _ = _relay(audit)
        held = relay.relay("t1", "jobs/dd01", 0, None)
        pending = asyncio.ensure_future(anext(held))
        await _until(lambda: watches.open == 1)
        with pytest.raises(Overloaded) as refused:
            await asyncio.wait_for(anext(relay.relay("t1", "jobs/dd02", 0, None)), 5)
        assert refused.value.reason == ReasonCode.WATCHES_EXCEEDED
        _append(database, watches, "jobs/dd01", "", "ACCEPTED")
        assert state_name((await asyncio.wait_for(pending, 5)).job.state) == "ACCEPTED"
        await held.aclose()


async def test_audit_going_away_ends_every_relay_unavailable(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    audit = _Audit(database, watches)
    await audit.server.start()
    try:
        relay, _ = _relay(audit)
        relays = [relay.relay("t1", f"jobs/ee0{n}", 0, None) for n in range(3)]
        pending = [asyncio.ensure_future(anext(r)) for r in relays]
        await _until(lambda: watches.open == 3)
        await audit.server.stop(grace=None)
        for waiting in pending:
            with pytest.raises(TransientError) as ended:
                await asyncio.wait_for(waiting, 5)
            assert ended.value.reason == ReasonCode.DEPENDENCY_UNAVAILABLE
        assert relay.feed.following == 0
    finally:
        await audit.channel.close()
        await audit.server.stop(grace=None)


async def test_an_audit_without_the_stream_is_watched_job_by_job(database: Database) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    async with _Audit(database, watches, older=True) as audit:
        relay, _ = _relay(audit)
        _append(database, watches, "jobs/ff01", "", "ACCEPTED")
        _append(database, watches, "jobs/ff01", "ACCEPTED", "CANCELLED")
        states = await asyncio.wait_for(_states(relay.relay("t1", "jobs/ff01", 0, None)), 10)
        assert states == ["ACCEPTED", "CANCELLED"]
        assert relay.feed.unsupported
        assert audit.calls.seen["WatchJob"] == 1


class _IgnoringAudit(_OlderAudit):
    """An older audit that knows no settled-only watch: it sends every change."""

    async def WatchJob(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        request.settled_only = False
        async for change in super().WatchJob(request, context):
            yield change


_PARKED_THEN_DONE = [
    ("", "ACCEPTED"),
    ("ACCEPTED", "VALIDATING"),
    ("VALIDATING", "NEEDS_REVIEW"),
    ("NEEDS_REVIEW", "ASSEMBLING"),
    ("ASSEMBLING", "FAILED"),
]


@pytest.mark.parametrize("older", [False, True], ids=["followed", "older-audit"])
async def test_a_settled_only_relay_passes_only_the_states_a_job_rests_in(
    database: Database, older: bool
) -> None:
    watches = JobWatches(database, WatchSettings(poll_seconds=60))
    job = "jobs/ab01"
    async with _Audit(database, watches, kind=_IgnoringAudit if older else None) as audit:
        relay, outstanding = _relay(audit)
        settled = asyncio.create_task(_states(relay.relay("t1", job, 0, None, settled_only=True)))
        every = asyncio.create_task(_states(relay.relay("t1", job, 0, None)))
        await _until(lambda: watches.open == 2)
        for before, after in _PARKED_THEN_DONE:
            _append(database, watches, job, before, after)
        assert await asyncio.wait_for(settled, 10) == ["NEEDS_REVIEW", "FAILED"]
        assert await asyncio.wait_for(every, 10) == [after for _b, after in _PARKED_THEN_DONE]
        assert outstanding.ends == [job, job], "a settled-only relay notes the end too"
        assert audit.calls.seen["WatchJob" if older else "FollowJobs"] >= 1
