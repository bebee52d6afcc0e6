"""What a job waits for while the validator defers it for a source system
(issue 19: a breaker's state "is visible in ... the job's status"), below
the stack: the validator's source_waits rows (written at a deferral, kept
since the first, replaced by the next, cleared once pinned or ended, swept
by age), the pinner writing them with a real source server and breakers on
SQLite, admission asking only for jobs that may wait and never failing a
status read for them, the status document, the HTTP schema and the CLI's
line. End to end on a real stack: ``test_source_waits_stack.py``."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2

from quire.admission.jobs.views import WAITS_TIMEOUT_SECONDS, JobViews
from quire.cli.jobcommands import wait_lines
from quire.database import Database
from quire.errors import SystemFailure
from quire.gateway.schemas import JobStatus
from quire.jobs import job_name, new_job_id
from quire.jobstatus import job_status_document
from quire.localblobs import LocalBlobStore
from quire.schema import upgrade_schema
from quire.testing.loopbackegress import LOOPBACK_EGRESS
from quire.testing.sealedstore import sealed_store
from quire.testing.sourceserver import SourceServer
from quire.type import job_pb2, queue_pb2
from quire.validator import tables
from quire.validator.sources.breakers import BreakerState, SourceBreakers
from quire.validator.sources.errors import SourceDeferred
from quire.validator.sources.fetcher import SourceFetcher, source_client
from quire.validator.sources.pinning import SourcePinner
from quire.validator.sources.pins import PinStore
from quire.validator.sources.settings import SourceSettings
from quire.validator.sources.waits import SourceWaits
from quire.validator.v1 import validator_service_pb2 as vpb

TENANT = "acme"
SETTINGS = SourceSettings(
    breaker_failures=2,
    breaker_open_seconds=1.0,
    budget_reserve_seconds=1.0,
    backoff_base_seconds=0.02,
    backoff_cap_seconds=0.05,
)
TAX = {"tax": {"jurisdiction": "NL", "registration": "NL001234567B01"}}


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    await asyncio.to_thread(upgrade_schema, db, tables.metadata, tables.MIGRATIONS)
    try:
        yield db
    finally:
        db.close()


# -- the table ------------------------------------------------------------------


async def test_a_deferral_records_each_system_keeps_since_and_drops_systems_no_longer_waited_for(
    database: Database,
) -> None:
    clock = Clock(1_900_000_000.0)
    waits = SourceWaits(database, clock=clock)
    job = job_name(new_job_id())
    other = job_name(new_job_id())
    assert await waits.of(job) == []

    await waits.deferred(job, {"tax": BreakerState.OPEN, "orders": BreakerState.CLOSED}, 3.5)
    await waits.deferred(other, {"tax": BreakerState.OPEN}, 1.0)
    first = await waits.of(job)
    assert [(w.system, w.breaker) for w in first] == [("orders", "closed"), ("tax", "open")]
    assert first[1].since == datetime.fromtimestamp(1_900_000_000.0, UTC)
    assert first[1].retry_at == datetime.fromtimestamp(1_900_000_003.5, UTC)

    clock.now += 5
    await waits.deferred(job, {"tax": BreakerState.HALF_OPEN}, 2.0)
    again = await waits.of(job)
    assert [(w.system, w.breaker) for w in again] == [("tax", "half-open")], "orders pinned"
    assert again[0].since == first[1].since, "waiting since the first deferral"
    assert again[0].retry_at == datetime.fromtimestamp(1_900_000_007.0, UTC)

    message = again[0].message()
    assert message.reason_code == "SOURCE_UNAVAILABLE"
    assert message.retry_time.seconds == 1_900_000_007
    assert message.since.seconds == 1_900_000_000

    await waits.cleared(job)
    assert await waits.of(job) == []
    assert [w.system for w in await waits.of(other)] == ["tax"], "only the job's rows"


async def test_rows_not_updated_for_a_day_are_swept_by_a_later_deferral_at_most_hourly(
    database: Database,
) -> None:
    clock = Clock(1_900_000_000.0)
    waits = SourceWaits(database, clock=clock)
    cancelled = job_name(new_job_id())  # ended elsewhere: never cleared here
    await waits.deferred(cancelled, {"tax": BreakerState.OPEN}, 1.0)

    clock.now += 23 * 3600
    await waits.deferred(job_name(new_job_id()), {"tax": BreakerState.OPEN}, 1.0)
    assert await waits.of(cancelled) != [], "younger than a day"

    clock.now += 2 * 3600
    await waits.deferred(job_name(new_job_id()), {"tax": BreakerState.OPEN}, 1.0)
    assert await waits.of(cancelled) == [], "swept"


# -- the pinner writes them -----------------------------------------------------


class NoWaits(SourceWaits):
    """Fails any use: a job of uploads only must not touch the table."""

    async def deferred(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an upload-only job writes no waits")

    async def cleared(self, job: str) -> None:
        raise AssertionError("an upload-only job clears no waits")


class BrokenWaits(SourceWaits):
    async def deferred(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("database down")

    async def cleared(self, job: str) -> None:
        raise RuntimeError("database down")


@dataclass
class Rig:
    server: SourceServer
    database: Database
    blobs: LocalBlobStore
    client: httpx.AsyncClient
    breakers: SourceBreakers
    waits: SourceWaits

    def pinner(self, waits: SourceWaits | None = None, max_deliver: int = 5) -> SourcePinner:
        return SourcePinner(
            fetcher=SourceFetcher(self.client, self.blobs),
            pins=PinStore(self.database),
            blobs=self.blobs,
            breakers=self.breakers,
            settings=SETTINGS,
            max_deliver=max_deliver,
            waits=waits or self.waits,
            rng=random.Random(3),
        )


@pytest.fixture
def server() -> Iterator[SourceServer]:
    with SourceServer() as running:
        yield running


@pytest.fixture
async def rig(tmp_path: Path, server: SourceServer, database: Database) -> AsyncIterator[Rig]:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    client = source_client(SETTINGS, LOOPBACK_EGRESS)
    breakers = SourceBreakers(
        failures=SETTINGS.breaker_failures, open_seconds=SETTINGS.breaker_open_seconds
    )
    try:
        yield Rig(server, database, blobs, client, breakers, SourceWaits(database))
    finally:
        await client.aclose()


def _reference(server: SourceServer, position: int, system: str, key: str) -> job_pb2.SourceRef:
    return job_pb2.SourceRef(
        position=position,
        document_id=f"doc-{position}",
        content_type="application/json",
        fetch=job_pb2.SourceFetch(
            system=system,
            key=key,
            content_type="application/json",
            base_url=server.base_url(system),
            timeout=duration_pb2.Duration(seconds=2),
        ),
    )


def _task(*sources: job_pb2.SourceRef) -> queue_pb2.JobTask:
    task = queue_pb2.JobTask(
        job=job_name(new_job_id()), tenant=TENANT, ruleset="default@1", sources=sources
    )
    task.deadline.FromNanoseconds(int((time.time() + 60) * 1e9))
    return task


async def test_a_deferred_job_waits_for_its_system_until_it_is_pinned(rig: Rig) -> None:
    rig.server.put_json("tax", "rec/1", TAX)
    rig.server.put_json("orders", "o/1", {"order": 1})
    rig.server.behave("tax", status=503)
    task = _task(
        _reference(rig.server, 0, "orders", "o/1"), _reference(rig.server, 1, "tax", "rec/1")
    )

    before = datetime.now(UTC)
    with pytest.raises(SourceDeferred) as deferred:
        await rig.pinner().pin_sources(task, 1)
    waits = await rig.waits.of(task.job)
    assert [(w.system, w.breaker) for w in waits] == [("tax", "open")], "orders was pinned"
    retry_after = deferred.value.retry_after or 0.0
    expected = before.timestamp() + retry_after
    assert abs(waits[0].retry_at.timestamp() - expected) < 1.0
    assert waits[0].retry_at > datetime.now(UTC) > waits[0].since >= before.replace(microsecond=0)

    rig.server.behave("tax")
    await asyncio.sleep(rig.breakers.wait_seconds(TENANT, "tax") + 0.05)
    pinned = await rig.pinner().pin_sources(task, 2)
    assert all(s.HasField("pin") for s in pinned.task.sources)
    assert await rig.waits.of(task.job) == []


async def test_a_job_that_ends_at_this_stage_waits_for_nothing(rig: Rig) -> None:
    rig.server.behave("tax", status=503)
    failed = _task(_reference(rig.server, 0, "tax", "rec/1"))
    with pytest.raises(SourceDeferred):
        await rig.pinner().pin_sources(failed, 1)
    assert len(await rig.waits.of(failed.job)) == 1
    with pytest.raises(SystemFailure):  # the last delivery, the system still down
        await rig.pinner(max_deliver=2).pin_sources(failed, 2)
    assert await rig.waits.of(failed.job) == []

    rejected = _task(_reference(rig.server, 0, "orders", "missing"))
    await rig.waits.deferred(rejected.job, {"orders": BreakerState.OPEN}, 1.0)  # an earlier try
    pinned = await rig.pinner().pin_sources(rejected, 2)
    assert pinned.rejection is not None and pinned.rejection.reason == "SOURCE_NOT_FOUND"
    assert await rig.waits.of(rejected.job) == []


async def test_uploads_only_never_touch_the_table_and_its_trouble_never_decides_a_job(
    rig: Rig,
) -> None:
    uploads = _task(job_pb2.SourceRef(position=0, sha256="a" * 64))
    assert (await rig.pinner(NoWaits(rig.database)).pin_sources(uploads, 1)).task == uploads

    rig.server.behave("tax", status=503)
    task = _task(_reference(rig.server, 0, "tax", "rec/1"))
    with pytest.raises(SourceDeferred):  # deferred as it would be, waits unrecorded
        await rig.pinner(BrokenWaits(rig.database)).pin_sources(task, 1)
    rig.server.put_json("tax", "rec/1", TAX)
    rig.server.behave("tax")
    await asyncio.sleep(rig.breakers.wait_seconds(TENANT, "tax") + 0.05)
    pinned = await rig.pinner(BrokenWaits(rig.database)).pin_sources(task, 2)
    assert pinned.task.sources[0].HasField("pin")


# -- admission asks only when a job may wait ----------------------------------


class FakeValidator:
    """Stands in for the validator's stub (the stack test uses the real one)."""

    def __init__(self, *, error: BaseException | None = None, delay: float = 0.0) -> None:
        self.asked: list[str] = []
        self.error = error
        self.delay = delay

    async def ListSourceWaits(  # noqa: N802 - gRPC method name
        self, request: vpb.ListSourceWaitsRequest, *, timeout: float, wait_for_ready: bool
    ) -> vpb.ListSourceWaitsResponse:
        self.asked.append(request.job)
        assert timeout == WAITS_TIMEOUT_SECONDS
        assert wait_for_ready  # a channel backing off from the validator's start waits
        if self.delay:
            await asyncio.wait_for(asyncio.sleep(self.delay), timeout)
        if self.error is not None:
            raise self.error
        wait = job_pb2.SourceWait(system="tax", breaker="open", reason_code="SOURCE_UNAVAILABLE")
        wait.retry_time.FromSeconds(1_900_000_003)
        wait.since.FromSeconds(1_900_000_000)
        return vpb.ListSourceWaitsResponse(waits=[wait])


def _views(validator: FakeValidator) -> JobViews:
    return JobViews(None, None, None, pages=None, validator=validator)  # type: ignore[arg-type]


def _job(state: int, *, deadline: bool = True) -> job_pb2.Job:
    job = job_pb2.Job(name=job_name(new_job_id()), state=state)  # type: ignore[arg-type]
    if deadline:
        job.deadline.FromSeconds(1_900_000_060)
    return job


async def test_admission_asks_only_for_jobs_that_may_wait_and_never_fails_for_them() -> None:
    validator = FakeValidator()
    views = _views(validator)
    for state in (job_pb2.JOB_STATE_ACCEPTED, job_pb2.JOB_STATE_VALIDATING):
        job = await views.with_source_waits(_job(state))
        assert [w.system for w in job.source_waits] == ["tax"]
    for job in (
        _job(job_pb2.JOB_STATE_VALIDATING, deadline=False),  # uploads only: no deadline
        _job(job_pb2.JOB_STATE_ASSEMBLING),
        _job(job_pb2.JOB_STATE_COMPLETED),
        _job(job_pb2.JOB_STATE_FAILED),
    ):
        assert not (await views.with_source_waits(job)).source_waits
    assert len(validator.asked) == 2, "no call for the others"

    unavailable = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata()
    )
    for failing in (FakeValidator(error=unavailable), FakeValidator(delay=5.0)):
        started = time.monotonic()
        job = await _views(failing).with_source_waits(_job(job_pb2.JOB_STATE_VALIDATING))
        assert not job.source_waits and failing.asked
        assert time.monotonic() - started < WAITS_TIMEOUT_SECONDS + 0.5


# -- the status document, the HTTP schema and the CLI ----------------------------


def test_the_status_document_the_http_schema_and_quire_status_show_each_wait() -> None:
    job = _job(job_pb2.JOB_STATE_VALIDATING)
    job.manifest_digest = "m" * 64
    wait = job.source_waits.add(system="tax", breaker="open", reason_code="SOURCE_UNAVAILABLE")
    wait.retry_time.FromSeconds(1_900_000_003)  # 2030-03-17T17:46:43Z
    wait.since.FromSeconds(1_900_000_000)
    document = job_status_document(job)
    assert document["state"] == "VALIDATING"
    assert document["source_waits"] == [
        {
            "system": "tax",
            "breaker": "open",
            "retry_time": "2030-03-17T17:46:43Z",
            "since": "2030-03-17T17:46:40Z",
            "reason_code": "SOURCE_UNAVAILABLE",
        }
    ]
    assert JobStatus(**document).source_waits[0].breaker == "open"
    assert wait_lines(job) == ["waiting for source system tax: breaker open, next try 17:46:43Z"]

    done = _job(job_pb2.JOB_STATE_COMPLETED)
    assert job_status_document(done)["source_waits"] == []
    assert wait_lines(done) == []
    old = job_status_document(done)
    del old["source_waits"]  # a document from before the field: still valid
    assert JobStatus(**old).source_waits == []
