"""The validator's stage work with sources named by reference: fetched and
pinned before any validation, then evaluated in the sandbox like uploads
(the pinned blob read and re-verified by its digest); a rejection after
pinning carries the pins; a deferral and a failure raise for the runner; a
job of uploads only takes no step of it. Real source server, SQLite,
sealed blob store and sandbox pool."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from google.protobuf import duration_pb2

from quire.blobstore import source_key
from quire.database import Database
from quire.errors import SystemFailure
from quire.jobs import job_name, new_job_id
from quire.leases import Lease
from quire.localblobs import LocalBlobStore
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.schema import upgrade_schema
from quire.settings import SandboxSettings
from quire.stage import Verdict
from quire.testing.loopbackegress import LOOPBACK_EGRESS
from quire.testing.pdfs import write_text_pdf
from quire.testing.sealedstore import sealed_store
from quire.testing.sourceserver import SourceServer
from quire.type import job_pb2, queue_pb2
from quire.validator import tables
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rulesets import DEFAULT_DIRECTORY, RulesetBook, load_directory
from quire.validator.sources.breakers import SourceBreakers
from quire.validator.sources.errors import SourceDeferred
from quire.validator.sources.fetcher import SourceFetcher, source_client
from quire.validator.sources.pinning import SourcePinner
from quire.validator.sources.pins import PinStore, fetched_key
from quire.validator.sources.settings import SourceSettings
from quire.validator.work import ValidatorWork

TENANT = "acme"
SETTINGS = SourceSettings(breaker_failures=2, breaker_open_seconds=5.0)
EVENTS = {
    "shipment": {
        "carrier": "Northbound Freight",
        "events": [
            {"at": "2026-11-01T08:15:00Z", "code": "PICKED_UP"},
            {"at": "2026-11-02T09:15:00Z", "code": "DELIVERED"},
        ],
    }
}


class NoPinReads(PinStore):
    """Fails any read: a job of uploads only must not make one."""

    async def pinned(self, job: str) -> dict:  # type: ignore[type-arg]
        raise AssertionError("an upload-only job reads no pins")


@dataclass
class Stage:
    server: SourceServer
    database: Database
    blobs: LocalBlobStore
    work: ValidatorWork
    evaluator: Evaluator
    book: RulesetBook
    client: httpx.AsyncClient

    def pinner(self, pins: PinStore) -> SourcePinner:
        return SourcePinner(
            fetcher=SourceFetcher(self.client, self.blobs),
            pins=pins,
            blobs=self.blobs,
            breakers=SourceBreakers(failures=2, open_seconds=5.0),
            settings=SETTINGS,
            max_deliver=5,
            rng=random.Random(7),
        )


@pytest.fixture
def server() -> Iterator[SourceServer]:
    with SourceServer() as running:
        yield running


@pytest.fixture
async def stage(tmp_path: Path, server: SourceServer) -> AsyncIterator[Stage]:
    database = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    await asyncio.to_thread(upgrade_schema, database, tables.metadata, tables.MIGRATIONS)
    book = RulesetBook(database)
    book.install(load_directory(DEFAULT_DIRECTORY))
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    pool = SandboxPool(SandboxSettings(workers=1, cpu_seconds=20, wall_seconds=30), name="fetch")
    await pool.warm()
    client = source_client(SETTINGS, LOOPBACK_EGRESS)
    evaluator = Evaluator(blobs=blobs, sandbox=pool, limits=PdfLimits())
    rig = Stage(server, database, blobs, None, evaluator, book, client)  # type: ignore[arg-type]
    rig.work = ValidatorWork(evaluator=evaluator, book=book, sources=rig.pinner(PinStore(database)))
    try:
        yield rig
    finally:
        await client.aclose()
        pool.close()
        database.close()


def _reference(
    server: SourceServer, position: int, system: str, key: str, content_type: str, schema: str = ""
) -> job_pb2.SourceRef:
    return job_pb2.SourceRef(
        position=position,
        document_id=f"doc-{position}",
        content_type=content_type,
        fetch=job_pb2.SourceFetch(
            system=system,
            key=key,
            content_type=content_type,
            base_url=server.base_url(system),
            timeout=duration_pb2.Duration(seconds=2),
            schema=schema,
        ),
    )


def _task(*sources: job_pb2.SourceRef) -> queue_pb2.JobTask:
    return queue_pb2.JobTask(
        job=job_name(new_job_id()), tenant=TENANT, ruleset="default@1", sources=sources
    )


async def test_fetched_sources_are_pinned_then_validated_like_uploads(
    stage: Stage, tmp_path: Path
) -> None:
    pdf = write_text_pdf(tmp_path / "bol.pdf", ["Bill of lading"]).read_bytes()
    stage.server.put("carrier", "shp/1", json.dumps(EVENTS, indent=1).encode())
    stage.server.put("dms", "bol/1", pdf, content_type="application/pdf")
    task = _task(
        _reference(stage.server, 0, "carrier", "shp/1", "application/json", "carrier-events@1"),
        _reference(stage.server, 1, "dms", "bol/1", "application/pdf"),
    )

    result = await stage.work.process(task, Lease(task.job, 1, None), 1)

    assert result.verdict is Verdict.HAND_ON, result
    events, bol = result.task.sources
    assert events.pin.schema_version == "carrier-events@1"
    assert bol.sha256 == hashlib.sha256(pdf).hexdigest()
    for source in (events, bol):
        assert source.blob_key == fetched_key(TENANT, source.sha256)
        assert source.pin.sha256 == source.sha256
    assert result.task.ruleset_digest
    assert not task.sources[0].HasField("pin"), "the given task is unchanged"


async def test_a_schema_mismatch_rejects_the_job_with_its_pins(stage: Stage) -> None:
    bad = json.loads(json.dumps(EVENTS))
    bad["shipment"]["events"][0]["code"] = "picked up"
    stage.server.put_json("carrier", "shp/2", bad)
    task = _task(
        _reference(stage.server, 0, "carrier", "shp/2", "application/json", "carrier-events@1")
    )

    result = await stage.work.process(task, Lease(task.job, 1, None), 1)

    assert result.verdict is Verdict.REJECT
    assert result.rejection is not None
    assert result.rejection.reason is ReasonCode.SOURCE_SCHEMA_INVALID
    assert result.task.sources[0].HasField("pin") and result.task.ruleset_digest


async def test_an_unavailable_system_defers_and_a_refusal_fails(stage: Stage) -> None:
    stage.server.behave("down", status=503)
    task = _task(_reference(stage.server, 0, "down", "x", "application/json"))
    with pytest.raises(SourceDeferred):
        await stage.work.process(task, Lease(task.job, 1, None), 1)
    stage.server.behave("locked", status=403)
    locked = _task(_reference(stage.server, 0, "locked", "x", "application/json"))
    failed = await stage.work.process(locked, Lease(locked.job, 1, None), 1)
    assert failed.verdict is Verdict.FAIL
    assert isinstance(failed.rejection, SystemFailure)
    assert failed.rejection.reason is ReasonCode.SOURCE_REFUSED


async def test_a_failure_after_some_pins_ends_the_job_with_them(stage: Stage) -> None:
    stage.server.put_json("carrier", "shp/3", EVENTS)
    stage.server.behave("gated", status=401, delay=0.5)  # after the carrier answered
    task = _task(
        _reference(stage.server, 0, "carrier", "shp/3", "application/json", "carrier-events@1"),
        _reference(stage.server, 1, "gated", "x", "application/json"),
    )

    failed = await stage.work.process(task, Lease(task.job, 1, None), 1)

    assert failed.verdict is Verdict.FAIL
    assert failed.rejection is not None and failed.rejection.reason is ReasonCode.SOURCE_REFUSED
    pinned, refused = failed.task.sources
    assert pinned.HasField("pin") and pinned.sha256 == pinned.pin.sha256, (
        "the ledger says what came"
    )
    assert not refused.HasField("pin") and not refused.sha256


async def test_a_job_of_uploads_only_takes_no_step_of_fetching(
    stage: Stage, tmp_path: Path
) -> None:
    pdf = write_text_pdf(tmp_path / "upload.pdf", ["Uploaded"])
    digest = hashlib.sha256(pdf.read_bytes()).hexdigest()
    stage.blobs.promote_file(pdf, source_key(TENANT, digest))
    task = _task(
        job_pb2.SourceRef(
            position=0,
            document_id="doc-0",
            sha256=digest,
            content_type="application/pdf",
            blob_key=source_key(TENANT, digest),
        )
    )
    work = ValidatorWork(
        evaluator=stage.evaluator, book=stage.book, sources=stage.pinner(NoPinReads(stage.database))
    )

    result = await work.process(task, Lease(task.job, 1, None), 1)

    assert result.verdict is Verdict.HAND_ON
    assert result.task.sources[0].blob_key == source_key(TENANT, digest)
    assert stage.server.calls() == []
