"""Intake on its own database: idempotency keys live for their window, a
tenant over quota gets a typed refusal with nothing written, and a packet's
inline sources are recorded in the job's own transaction, staying recorded
when the job is refused there."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from quire.admission import tables
from quire.admission.jobs import intake as intake_module
from quire.admission.jobs.intake import Intake
from quire.admission.rulesets.currents import CurrentRulesets
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.tenants.storagepolicy import stored_bytes
from quire.admission.uploads.gate import StoredSource
from quire.admission.uploads.inlinesources import KeptSources
from quire.admission.v1 import admission_service_pb2 as pb
from quire.database import Database
from quire.errors import Conflict, InvalidInput, Overloaded
from quire.transitions import EventFactory
from quire.type import job_pb2

DIGESTS = ["a" * 64, "b" * 64]
TENANT = Tenant(id="t1", name="tenant")


@pytest.fixture
def database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    database.create_schema()
    now = datetime.now(UTC)

    database.transaction(
        lambda s: s.execute(tables.tenants.insert().values(id="t1", name="tenant", created_at=now))
    )
    for digest in DIGESTS:
        _upload(database, digest)
    return database


def _request(request_id: str, digest: str) -> pb.SubmitJobRequest:
    return pb.SubmitJobRequest(
        request_id=request_id,
        manifest=job_pb2.Manifest(
            items=[job_pb2.ManifestItem(position=0, document_id="doc", sha256=digest)]
        ),
    )


def _count(database: Database, table) -> int:  # type: ignore[no-untyped-def]
    return database.transaction(
        lambda s: s.execute(select(func.count()).select_from(table)).scalar_one()
    )


class _StoppedClock(datetime):
    """Intake's clock, moved by the test: the window is measured in its time,
    not in how long the machine took to commit each submit."""

    moment = datetime.now(UTC)

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:
        return cls.moment.astimezone(tz)


async def test_a_key_returns_its_job_within_the_window_and_is_free_after(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_module, "datetime", _StoppedClock)
    monkeypatch.setattr(_StoppedClock, "moment", datetime.now(UTC))
    intake = Intake(
        database,
        EventFactory("admission", "t", "0"),
        AdmissionSettings(idempotency_window_seconds=0.5),
    )
    first = await intake.submit(TENANT, _request("k", DIGESTS[0]))
    _StoppedClock.moment += timedelta(seconds=0.4)
    assert (await intake.submit(TENANT, _request("k", DIGESTS[0]))).name == first.name
    with pytest.raises(Conflict):
        await intake.submit(TENANT, _request("k", DIGESTS[1]))
    _StoppedClock.moment += timedelta(seconds=0.2)
    later = await intake.submit(TENANT, _request("k", DIGESTS[1]))
    assert later.name != first.name
    assert _count(database, tables.jobs) == 2


async def test_over_quota_writes_nothing(database: Database) -> None:
    intake = Intake(
        database, EventFactory("admission", "t", "0"), AdmissionSettings(max_outstanding_jobs=1)
    )
    await intake.submit(TENANT, _request("one", DIGESTS[0]))
    with pytest.raises(Overloaded) as refused:
        await intake.submit(TENANT, _request("two", DIGESTS[1]))
    assert refused.value.reason == "TENANT_QUOTA_EXCEEDED"
    assert refused.value.retry_after and refused.value.quota
    assert _count(database, tables.jobs) == 1
    assert _count(database, tables.idempotency_keys) == 1


def _inline(database: Database, digest: str, size: int = 7) -> KeptSources:
    stored = StoredSource(digest, size, "application/pdf")
    return KeptSources("t1", [(stored, f"sources/t1/{digest}")], database)


async def test_inline_sources_are_recorded_in_the_jobs_transaction(database: Database) -> None:
    intake = Intake(database, EventFactory("admission", "t", "0"), AdmissionSettings())
    kept = _inline(database, "c" * 64)
    accepted = await intake.submit(TENANT, _request("inline", "c" * 64), kept)
    assert kept.recorded
    assert accepted.item_count == 1
    assert _count(database, tables.sources) == len(DIGESTS) + 1
    assert database.transaction(lambda s: stored_bytes(s, "t1")) == 7


async def test_a_job_refused_in_its_transaction_leaves_its_inline_sources_recorded(
    database: Database,
) -> None:
    intake = Intake(
        database, EventFactory("admission", "t", "0"), AdmissionSettings(max_outstanding_jobs=1)
    )
    await intake.submit(TENANT, _request("one", DIGESTS[0]))
    kept = _inline(database, "c" * 64)
    with pytest.raises(Overloaded) as refused:
        await intake.submit(TENANT, _request("two", "c" * 64), kept)
    assert refused.value.reason == "TENANT_QUOTA_EXCEEDED"
    assert kept.recorded, "the sources committed with the refusal"
    assert _count(database, tables.jobs) == 1
    assert _count(database, tables.idempotency_keys) == 1
    assert _count(database, tables.sources) == len(DIGESTS) + 1
    assert database.transaction(lambda s: stored_bytes(s, "t1")) == 7


def _counting(tmp_path: Path, database: Database) -> tuple[Database, dict[str, int]]:
    """The fixture's database file again, counting its transactions by kind."""
    counts = {"read": 0, "write": 0}

    def counter(kind: str):  # type: ignore[no-untyped-def]
        return lambda: counts.__setitem__(kind, counts[kind] + 1)

    url = str(database.engine.url)
    return Database(url, tables.metadata, transactions=counter), counts


def _sent_inline(request_id: str, *digests: str) -> pb.SubmitJobRequest:
    """A request whose manifest names ``digests``, the first sent inline."""
    request = pb.SubmitJobRequest(
        request_id=request_id,
        manifest=job_pb2.Manifest(
            items=[
                job_pb2.ManifestItem(position=n, document_id=f"doc{n}", sha256=digest)
                for n, digest in enumerate(digests)
            ]
        ),
    )
    request.inline_sources.add().header.sha256 = digests[0]
    return request


async def test_a_screened_submit_reads_nothing_again(database: Database, tmp_path: Path) -> None:
    """The inline sources' look-up reads the job's checks too (``screening``):
    the submit then goes straight to its writing transaction."""
    counted, counts = _counting(tmp_path, database)
    intake = Intake(
        counted,
        EventFactory("admission", "t", "0"),
        AdmissionSettings(),
        # The current rulesets read once and kept, however slow the machine.
        currents=CurrentRulesets(counted, refresh_seconds=3600),
    )
    # Unscreened, a submit reads for itself (and the current rulesets are
    # read once, then kept, as in a running admission).
    await intake.submit(TENANT, _request("unscreened", DIGESTS[0]))
    assert counts["read"] > 0
    request = _sent_inline("screened", "c" * 64)
    screening = intake.screening(TENANT, request)
    assert screening is not None
    screened = await counted.read(screening.read)
    reads = counts["read"]
    kept = _inline(counted, "c" * 64)
    accepted = await intake.submit(TENANT, request, kept, key_checked=True, screened=screened)
    assert counts["read"] == reads, "the submit read again what its screening read"
    assert kept.recorded and accepted.item_count == 1
    assert _count(database, tables.jobs) == 2
    counted.close()


async def test_what_a_screening_found_is_what_submit_answers(
    database: Database, tmp_path: Path
) -> None:
    """The submit answers what its screening read found, not what a read of
    its own would find now: a refusal found stands (and writes no job), and
    so does a live key's job."""
    intake = Intake(database, EventFactory("admission", "t", "0"), AdmissionSettings())
    missing = _sent_inline("missing", "c" * 64, "d" * 64)  # "d" was never uploaded
    screening = intake.screening(TENANT, missing)
    assert screening is not None
    screened = await database.read(screening.read)
    _upload(database, "d" * 64)  # a read now would find the manifest whole
    with pytest.raises(InvalidInput) as refused:
        await intake.submit(TENANT, missing, _inline(database, "c" * 64), screened=screened)
    assert refused.value.reason == "INVALID_MANIFEST"
    assert _count(database, tables.jobs) == 0

    request = _sent_inline("again", "c" * 64)
    first = await intake.submit(TENANT, request, _inline(database, "c" * 64))
    screening = intake.screening(TENANT, request)
    assert screening is not None
    screened = await database.read(screening.read)
    database.transaction(lambda s: s.execute(delete(tables.idempotency_keys)))
    # A read now would find no key and make a second job.
    again = await intake.submit(TENANT, request, screened=screened)
    assert again.name == first.name
    assert _count(database, tables.jobs) == 1


def _upload(database: Database, digest: str) -> None:
    """A source of tenant t1, recorded as an upload records it (10 bytes)."""
    database.transaction(
        lambda s: s.execute(
            tables.sources.insert().values(
                tenant="t1",
                sha256=digest,
                size_bytes=10,
                content_type="application/pdf",
                blob_key=f"sources/t1/{digest}",
                created_at=datetime.now(UTC),
            )
        )
    )


async def test_twin_submissions_at_once_make_one_job_even_at_the_quota(
    database: Database,
) -> None:
    """Both read no key; the writing transaction that loses the key returns
    the winner's job — also when that job has just filled the quota."""
    intake = Intake(
        database, EventFactory("admission", "t", "0"), AdmissionSettings(max_outstanding_jobs=1)
    )
    first, second = await asyncio.gather(
        intake.submit(TENANT, _request("twin", DIGESTS[0])),
        intake.submit(TENANT, _request("twin", DIGESTS[0])),
    )
    assert first.name == second.name
    assert _count(database, tables.jobs) == 1
    with pytest.raises(Conflict):
        await intake.submit(TENANT, _request("twin", DIGESTS[1]))
