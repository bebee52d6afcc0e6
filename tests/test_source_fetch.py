"""Sources named by reference, fetched and pinned by the validator
(``quire.validator.sources``), against a real HTTP source system
(``quire.testing.sourceserver``), a real SQLite database migrated as the
service migrates it, and the real sealed blob store: digests, normalisation,
schemas, refusals, retries, pins reused across processes, circuit breakers,
deferrals and the job's budget."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from quire.database import Database
from quire.egress import EgressPolicy
from quire.errors import SystemFailure
from quire.jobs import job_name, new_job_id
from quire.localblobs import LocalBlobStore
from quire.metrics import ServiceMetrics, StageMeter, delivery_timings
from quire.reasons import ReasonCode
from quire.schema import upgrade_schema
from quire.testing.loopbackegress import LOOPBACK_EGRESS
from quire.testing.pdfs import write_text_pdf
from quire.testing.sealedstore import sealed_store
from quire.testing.sourceserver import SourceServer
from quire.type import job_pb2, queue_pb2
from quire.validator import tables
from quire.validator.sources.breakers import BreakerState, SourceBreakers
from quire.validator.sources.errors import SourceDeferred
from quire.validator.sources.fetcher import SourceFetcher, source_client
from quire.validator.sources.meter import SourceMeter
from quire.validator.sources.normalise import (
    CANONICAL_JSON,
    DUPLICATE_EVENTS_DROPPED,
    canonical_json,
    normalise_json,
)
from quire.validator.sources.pinning import Pinned, SourcePinner
from quire.validator.sources.pins import PinStore, fetched_key
from quire.validator.sources.settings import SourceSettings

TENANT = "acme"
JSON = "application/json"
PDF = "application/pdf"
SETTINGS = SourceSettings(
    breaker_failures=3,
    breaker_open_seconds=1.5,
    budget_reserve_seconds=1.0,
    backoff_base_seconds=0.05,
    backoff_cap_seconds=0.1,
)
EVENTS = {
    "shipment": {
        "carrier": "Northbound Freight",
        "reference": "SHP-55120",
        "events": [
            {"at": "2026-11-01T08:15:00Z", "code": "PICKED_UP", "remark": "dock 4"},
            {"at": "2026-11-01T09:15:00Z", "code": "IN_TRANSIT"},
            {"at": "2026-11-02T09:15:00Z", "code": "DELIVERED", "remark": "signed for"},
        ],
    }
}
TAX = {
    "tax": {
        "jurisdiction": "NL",
        "registration": "NL001234567B01",
        "breakdown": [{"base": "190.00", "rate": "21", "tax": "39.90"}],
        "reverse_charge": True,
    }
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Rig:
    server: SourceServer
    database: Database
    blobs: LocalBlobStore
    client: httpx.AsyncClient
    breakers: SourceBreakers

    def pinner(
        self,
        *,
        settings: SourceSettings = SETTINGS,
        breakers: SourceBreakers | None = None,
        client: httpx.AsyncClient | None = None,
        max_deliver: int = 5,
        seed: int | None = None,
    ) -> SourcePinner:
        return SourcePinner(
            fetcher=SourceFetcher(client or self.client, self.blobs),
            pins=PinStore(self.database),
            blobs=self.blobs,
            breakers=breakers or self.breakers,
            settings=settings,
            max_deliver=max_deliver,
            rng=random.Random(seed),
        )

    def temporary_files(self) -> list[Path]:
        """What the validator holds in the blob store's temporary space."""
        return sorted(self.blobs.tmp_dir.rglob("*"))

    def plain(self, key: str, digest: str) -> bytes:
        return b"".join(self.blobs.read_verified(key, digest))

    def calls(self, system: str, settle: float = 0.0) -> int:
        """How many calls ``system`` has logged, once the count holds still
        (the server logs a call just after answering it; after ``settle``
        seconds: a slow answer is logged when the server gives up on it)."""
        if settle:
            time.sleep(settle)
        count = len(self.server.calls(system))
        while True:
            time.sleep(0.1)
            now = len(self.server.calls(system))
            if now == count:
                return count
            count = now


def _breakers(settings: SourceSettings = SETTINGS) -> SourceBreakers:
    return SourceBreakers(
        failures=settings.breaker_failures, open_seconds=settings.breaker_open_seconds
    )


@pytest.fixture
def server() -> Iterator[SourceServer]:
    with SourceServer() as running:
        yield running


@pytest.fixture
async def rig(tmp_path: Path, server: SourceServer) -> AsyncIterator[Rig]:
    database = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    await asyncio.to_thread(upgrade_schema, database, tables.metadata, tables.MIGRATIONS)
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    client = source_client(SETTINGS, LOOPBACK_EGRESS)
    try:
        yield Rig(server, database, blobs, client, _breakers())
    finally:
        await client.aclose()
        database.close()


def reference(
    server: SourceServer,
    position: int,
    system: str,
    key: str,
    content_type: str = JSON,
    *,
    schema: str = "",
    timeout: float = 2.0,
    max_bytes: int = 0,
    credential_ref: str = "",
) -> job_pb2.SourceRef:
    wait = duration_pb2.Duration()
    wait.FromMilliseconds(int(timeout * 1000))
    return job_pb2.SourceRef(
        position=position,
        document_id=f"doc-{position}",
        content_type=content_type,
        fetch=job_pb2.SourceFetch(
            system=system,
            key=key,
            content_type=content_type,
            base_url=server.base_url(system),
            credential_ref=credential_ref,
            timeout=wait,
            max_bytes=max_bytes,
            schema=schema,
        ),
    )


def job_task(*sources: job_pb2.SourceRef, deadline_in: float | None = None) -> queue_pb2.JobTask:
    task = queue_pb2.JobTask(
        job=job_name(new_job_id()), tenant=TENANT, ruleset="default@1", sources=sources
    )
    if deadline_in is not None:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(int((time.time() + deadline_in) * 1e9))
        task.deadline.CopyFrom(stamp)
    return task


def pdf_bytes(tmp_path: Path, text: str = "Bill of lading 55120") -> bytes:
    return write_text_pdf(tmp_path / f"{sha(text.encode())[:8]}.pdf", [text]).read_bytes()


async def test_json_and_pdf_sources_are_pinned_by_their_digests_and_leave_no_temporary_file(
    rig: Rig, tmp_path: Path
) -> None:
    raw_json = json.dumps(EVENTS, indent=2).encode()  # not canonical: spaces, key order
    pdf = pdf_bytes(tmp_path)
    rig.server.put("carrier", "shp/55120", raw_json)
    rig.server.put("dms", "bol/55120", pdf, content_type=PDF)
    task = job_task(
        reference(rig.server, 0, "carrier", "shp/55120", schema="carrier-events@1"),
        reference(rig.server, 1, "dms", "bol/55120", PDF),
    )
    given = task.SerializeToString(deterministic=True)

    pinned = await rig.pinner().pin_sources(task, attempt=1)

    assert pinned.rejection is None
    assert task.SerializeToString(deterministic=True) == given, "the given task is unchanged"
    events, bol = pinned.task.sources
    canonical = canonical_json(normalise_json(raw_json).document)
    assert (
        canonical
        == json.dumps(EVENTS, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert events.sha256 == sha(canonical) and events.size_bytes == len(canonical)
    assert events.blob_key == fetched_key(TENANT, sha(canonical))
    assert events.pin.sha256 == events.sha256
    assert events.pin.fetched_sha256 == sha(raw_json)
    assert list(events.pin.normalisations) == [CANONICAL_JSON]
    assert events.pin.schema_version == "carrier-events@1"
    assert (events.pin.system, events.pin.key, events.pin.position) == ("carrier", "shp/55120", 0)
    assert abs(events.pin.fetch_time.ToNanoseconds() / 1e9 - time.time()) < 30
    assert rig.plain(events.blob_key, events.sha256) == canonical

    assert bol.sha256 == sha(pdf) == bol.pin.sha256 == bol.pin.fetched_sha256
    assert bol.size_bytes == len(pdf) and list(bol.pin.normalisations) == []
    assert bol.pin.schema_version == ""
    assert bol.blob_key == fetched_key(TENANT, sha(pdf))
    assert rig.plain(bol.blob_key, bol.sha256) == pdf
    assert bol.content_type == PDF and bol.document_id == "doc-1"

    stored = await PinStore(rig.database).pinned(task.job)
    assert {p: (pin.sha256, pin.blob_key) for p, pin in stored.items()} == {
        0: (events.sha256, events.blob_key),
        1: (bol.sha256, bol.blob_key),
    }
    assert rig.temporary_files() == []
    assert rig.calls("carrier") == rig.calls("dms") == 1


async def test_the_same_events_sent_twice_pin_the_same_digest(rig: Rig) -> None:
    rig.server.put_json("carrier", "shp/1", EVENTS)
    once = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/1", schema="carrier-events@1")), 1
    )
    rig.server.behave("carrier", duplicate_events=True)
    twice = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/1", schema="carrier-events@1")), 1
    )

    first, second = once.task.sources[0], twice.task.sources[0]
    assert second.sha256 == first.sha256
    assert second.pin.fetched_sha256 != first.pin.fetched_sha256
    assert list(first.pin.normalisations) == [CANONICAL_JSON]
    assert list(second.pin.normalisations) == [CANONICAL_JSON, DUPLICATE_EVENTS_DROPPED]
    kept = json.loads(rig.plain(second.blob_key, second.sha256))
    assert kept["shipment"]["events"] == EVENTS["shipment"]["events"]


async def test_a_canonical_body_is_pinned_as_sent_with_no_normalisation(rig: Rig) -> None:
    body = canonical_json(normalise_json(json.dumps(TAX).encode()).document)
    rig.server.put("tax", "nl/1", body)
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "tax", "nl/1", schema="tax-record@1")), 1
    )
    source = pinned.task.sources[0]
    assert source.sha256 == source.pin.fetched_sha256 == sha(body)
    assert list(source.pin.normalisations) == []


async def test_a_malformed_tax_record_is_rejected_after_it_is_pinned(rig: Rig) -> None:
    bad = json.loads(json.dumps(TAX))
    bad["tax"]["jurisdiction"] = "Netherlands"
    rig.server.put_json("tax", "nl/2", bad)
    task = job_task(reference(rig.server, 0, "tax", "nl/2", schema="tax-record@1"))

    pinned = await rig.pinner().pin_sources(task, 1)

    assert pinned.rejection is not None
    assert pinned.rejection.reason is ReasonCode.SOURCE_SCHEMA_INVALID
    assert "jurisdiction" in pinned.rejection.message and "Netherlands" not in str(pinned.rejection)
    source = pinned.task.sources[0]
    assert source.HasField("pin") and source.pin.schema_version == "tax-record@1"
    assert rig.plain(source.blob_key, source.sha256)
    # A redelivery decides the same from the pin, without calling again.
    again = await rig.pinner(breakers=_breakers()).pin_sources(task, 2)
    assert again.rejection is not None
    assert again.rejection.reason is ReasonCode.SOURCE_SCHEMA_INVALID
    assert again.task.sources[0].pin == source.pin
    assert rig.calls("tax") == 1


async def test_a_body_that_is_not_json_is_pinned_as_sent_and_fails_its_schema(rig: Rig) -> None:
    rig.server.put("tax", "nl/3", b'{"tax": {"jurisdiction": "NL", ')  # cut short
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "tax", "nl/3", schema="tax-record@1")), 1
    )
    assert pinned.rejection is not None
    assert pinned.rejection.reason is ReasonCode.SOURCE_SCHEMA_INVALID
    source = pinned.task.sources[0]
    assert source.sha256 == source.pin.fetched_sha256 and not source.pin.normalisations


async def test_a_schema_the_validator_does_not_ship_fails_the_job_before_any_call(
    rig: Rig,
) -> None:
    rig.server.put_json("tax", "nl/4", TAX)
    task = job_task(reference(rig.server, 0, "tax", "nl/4", schema="tax-record@9"))
    with pytest.raises(SystemFailure) as failed:
        await rig.pinner().pin_sources(task, 1)
    assert failed.value.reason is ReasonCode.SOURCE_SCHEMA_INVALID
    assert rig.calls("tax") == 0


async def test_an_oversized_source_is_refused_and_leaves_nothing_behind(
    rig: Rig, tmp_path: Path
) -> None:
    # Streamed in chunks past the limit (no Content-Length to refuse it early).
    rig.server.put_json("carrier", "shp/big", EVENTS)
    rig.server.behave("carrier", oversize=3 * 1024 * 1024)
    streamed = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/big", max_bytes=256 * 1024)), 1
    )
    # A PDF whose declared length is over the limit: refused before its body.
    pdf = pdf_bytes(tmp_path)
    rig.server.put("dms", "bol/big", pdf, content_type=PDF)
    declared = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "dms", "bol/big", PDF, max_bytes=len(pdf) - 1)), 1
    )

    for pinned in (streamed, declared):
        assert pinned.rejection is not None
        assert pinned.rejection.reason is ReasonCode.SOURCE_TOO_LARGE
        assert not pinned.task.sources[0].HasField("pin")
        assert not await PinStore(rig.database).pinned(pinned.task.job)
    assert rig.temporary_files() == []
    assert rig.blobs.list_keys("fetched/") == []
    assert rig.breakers.state(TENANT, "carrier") is BreakerState.CLOSED


async def test_bytes_not_of_the_declared_type_are_refused_as_at_the_door(rig: Rig) -> None:
    rig.server.put("dms", "bol/json", json.dumps(EVENTS).encode(), content_type=PDF)
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "dms", "bol/json", PDF)), 1
    )
    assert pinned.rejection is not None and pinned.rejection.reason is ReasonCode.TYPE_MISMATCH
    assert rig.temporary_files() == [] and rig.blobs.list_keys("fetched/") == []


async def test_a_truncated_body_is_retried_then_pinned_once_the_system_recovers(
    rig: Rig, tmp_path: Path
) -> None:
    pdf = pdf_bytes(tmp_path) + b"%" + b"x" * 200_000  # long enough to be streamed in parts
    rig.server.put("dms", "bol/cut", pdf, content_type=PDF)
    rig.server.behave("dms", truncate=True)
    task = job_task(reference(rig.server, 0, "dms", "bol/cut", PDF))
    patient = _breakers(SETTINGS.model_copy(update={"breaker_failures": 10}))  # stays closed here

    with pytest.raises(SourceDeferred) as deferred:
        await rig.pinner(breakers=patient).pin_sources(task, 1)

    assert deferred.value.reason is ReasonCode.SOURCE_UNAVAILABLE
    assert rig.calls("dms") == SETTINGS.tries_per_delivery
    assert rig.temporary_files() == [], "each cut-short body's temporary blob is removed"
    rig.server.behave("dms")
    pinned = await rig.pinner(breakers=patient).pin_sources(task, 2)
    assert pinned.task.sources[0].sha256 == sha(pdf)
    assert rig.plain(pinned.task.sources[0].blob_key, sha(pdf)) == pdf
    assert rig.temporary_files() == []


async def test_a_failing_call_is_retried_within_the_delivery(rig: Rig) -> None:
    rig.server.put_json("carrier", "shp/2", EVENTS)
    rig.server.behave("carrier", fail_times=2)
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/2")), 1
    )
    assert pinned.task.sources[0].HasField("pin")
    assert rig.calls("carrier") == 3
    assert [c.status for c in rig.server.calls("carrier")] == [503, 503, 200]
    assert rig.breakers.state(TENANT, "carrier") is BreakerState.CLOSED


async def test_a_missing_record_rejects_the_job(rig: Rig) -> None:
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/none")), 1
    )
    assert pinned.rejection is not None
    assert pinned.rejection.reason is ReasonCode.SOURCE_NOT_FOUND
    rig.server.behave("carrier", status=410)
    gone = await rig.pinner().pin_sources(job_task(reference(rig.server, 0, "carrier", "x")), 1)
    assert gone.rejection is not None and gone.rejection.reason is ReasonCode.SOURCE_NOT_FOUND
    assert rig.calls("carrier") == 2, "a refusal is an answer, not retried"


async def test_a_refused_credential_fails_the_job_and_a_good_one_is_sent_as_a_bearer(
    rig: Rig, tmp_path: Path
) -> None:
    rig.server.put_json("erp", "ord/1", EVENTS)
    rig.server.require_token("erp", "s3cret-token")

    with pytest.raises(SystemFailure) as refused:
        await rig.pinner().pin_sources(job_task(reference(rig.server, 0, "erp", "ord/1")), 1)
    assert refused.value.reason is ReasonCode.SOURCE_REFUSED
    # The variables the validator started with (read once, at its start).
    wrong_env = SETTINGS.model_copy(
        update={"credential_variables": {"QUIRE_SOURCE_CREDENTIAL_ERP": "wrong-token"}}
    )
    with pytest.raises(SystemFailure) as wrong:
        await rig.pinner(settings=wrong_env).pin_sources(
            job_task(
                reference(
                    rig.server, 0, "erp", "ord/1", credential_ref="env:QUIRE_SOURCE_CREDENTIAL_ERP"
                )
            ),
            1,
        )
    assert wrong.value.reason is ReasonCode.SOURCE_REFUSED
    assert "wrong-token" not in str(wrong.value)
    with pytest.raises(SystemFailure) as unset:
        await rig.pinner(settings=wrong_env).pin_sources(
            job_task(
                reference(
                    rig.server, 0, "erp", "ord/1", credential_ref="env:QUIRE_SOURCE_CREDENTIAL_NONE"
                )
            ),
            1,
        )
    assert unset.value.reason is ReasonCode.SOURCE_REFUSED
    assert rig.calls("erp") == 2, "no call without the credential"

    good_env = SETTINGS.model_copy(
        update={"credential_variables": {"QUIRE_SOURCE_CREDENTIAL_ERP": "s3cret-token"}}
    )
    by_env = await rig.pinner(settings=good_env).pin_sources(
        job_task(
            reference(
                rig.server, 0, "erp", "ord/1", credential_ref="env:QUIRE_SOURCE_CREDENTIAL_ERP"
            )
        ),
        1,
    )
    secret = tmp_path / "erp.token"  # in the validator's source-credentials directory
    secret.write_text("s3cret-token\n")
    confined = SETTINGS.model_copy(update={"credentials_dir": tmp_path})
    by_file = await rig.pinner(settings=confined).pin_sources(
        job_task(reference(rig.server, 0, "erp", "ord/1", credential_ref=f"file:{secret}")), 1
    )
    assert by_env.task.sources[0].HasField("pin") and by_file.task.sources[0].HasField("pin")
    assert rig.calls("erp") == 4
    assert [c.authorized for c in rig.server.calls("erp")] == [False, False, True, True]
    assert rig.breakers.state(TENANT, "erp") is BreakerState.CLOSED


async def test_another_process_reuses_the_pin_and_never_fetches_again(rig: Rig) -> None:
    rig.server.put_json("carrier", "shp/3", EVENTS)
    task = job_task(reference(rig.server, 0, "carrier", "shp/3"))
    first = await rig.pinner().pin_sources(task, 1)

    changed = json.loads(json.dumps(EVENTS))
    changed["shipment"]["carrier"] = "Someone Else"
    rig.server.put_json("carrier", "shp/3", changed)
    client = source_client(SETTINGS, LOOPBACK_EGRESS)  # a new process: its own client and breakers
    try:
        again = await rig.pinner(breakers=_breakers(), client=client).pin_sources(task, 2)
    finally:
        await client.aclose()

    assert again.task.sources[0] == first.task.sources[0]
    assert rig.calls("carrier") == 1


async def test_a_task_that_carries_its_pins_needs_neither_the_database_nor_a_call(
    rig: Rig,
) -> None:
    rig.server.put_json("carrier", "shp/4", EVENTS)
    first = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/4")), 1
    )
    rig.database.close()  # any read now fails
    again = await rig.pinner().pin_sources(first.task, 2)
    assert again == Pinned(first.task)


async def test_racing_pins_of_one_position_converge_on_the_first(rig: Rig) -> None:
    rig.server.put_json("carrier", "shp/5", EVENTS)
    pinned = await rig.pinner().pin_sources(
        job_task(reference(rig.server, 0, "carrier", "shp/5")), 1
    )
    store = PinStore(rig.database)
    [first] = (await store.pinned(pinned.task.job)).values()
    late = replace(first, sha256="0" * 64, fetched_sha256="1" * 64, normalisations=())
    assert await store.pin(pinned.task.job, late) == first
    assert (await store.pinned(pinned.task.job))[0] == first


async def test_the_breaker_opens_after_failures_calls_nothing_while_open_and_closes_after_a_trial(
    rig: Rig,
) -> None:
    rig.server.put_json("slow", "rec/1", EVENTS)
    rig.server.behave("slow", delay=1.0)
    source = reference(rig.server, 0, "slow", "rec/1", timeout=0.2)

    with pytest.raises(SourceDeferred) as first:
        await rig.pinner().pin_sources(job_task(source), 1)
    # Three timeouts in this delivery opened it (QUIRE_SOURCE_BREAKER_FAILURES=3).
    assert rig.breakers.state(TENANT, "slow") is BreakerState.OPEN
    retry_after = first.value.retry_after or 0.0
    open_seconds = SETTINGS.breaker_open_seconds
    assert open_seconds - 0.5 < retry_after <= open_seconds * 1.5

    for _ in range(5):  # other jobs: deferred with no call made (the count below)
        with pytest.raises(SourceDeferred) as deferred:
            await rig.pinner().pin_sources(job_task(source), 1)
        assert 0 < (deferred.value.retry_after or 0) <= open_seconds * 1.5
    assert rig.calls("slow", settle=1.2) == 3

    rig.server.behave("slow")  # it recovers; the breaker half-opens after its period
    await asyncio.sleep(max(0.0, rig.breakers.wait_seconds(TENANT, "slow")) + 0.05)
    assert rig.breakers.state(TENANT, "slow") is BreakerState.HALF_OPEN
    pinned = await rig.pinner().pin_sources(job_task(source), 2)
    assert pinned.task.sources[0].HasField("pin")
    assert rig.breakers.state(TENANT, "slow") is BreakerState.CLOSED
    assert rig.calls("slow") == 4


async def test_a_half_open_breaker_lets_one_trial_through_and_defers_the_rest(rig: Rig) -> None:
    settings = SETTINGS.model_copy(update={"breaker_failures": 1, "breaker_open_seconds": 0.5})
    breakers = _breakers(settings)
    rig.server.put_json("slow", "rec/2", EVENTS)
    rig.server.behave("slow", status=503)
    source = reference(rig.server, 0, "slow", "rec/2")
    with pytest.raises(SourceDeferred):
        await rig.pinner(settings=settings, breakers=breakers).pin_sources(job_task(source), 1)
    assert rig.calls("slow") == 1, "one failure opened it: no second try in that delivery"

    rig.server.behave("slow", delay=0.5)  # answering again, slowly
    await asyncio.sleep(breakers.wait_seconds(TENANT, "slow") + 0.05)
    outcomes = await asyncio.gather(
        *(
            rig.pinner(settings=settings, breakers=breakers).pin_sources(job_task(source), 2)
            for _ in range(6)
        ),
        return_exceptions=True,
    )

    pinned = [o for o in outcomes if isinstance(o, Pinned)]
    deferred = [o for o in outcomes if isinstance(o, SourceDeferred)]
    assert len(pinned) == 1 and len(deferred) == 5, outcomes
    half = settings.breaker_open_seconds / 2
    # Sent back for at least half the open period: not at once, to use up a
    # delivery while the trial is still under way.
    assert all(half <= (d.retry_after or 0) <= 2 * half for d in deferred), deferred
    assert rig.calls("slow") == 2, "one trial call"
    assert breakers.state(TENANT, "slow") is BreakerState.CLOSED


async def test_deferrals_are_jittered_and_stay_within_the_budget(rig: Rig) -> None:
    settings = SETTINGS.model_copy(update={"breaker_failures": 1, "breaker_open_seconds": 4.0})
    breakers = _breakers(settings)
    rig.server.behave("down", status=502)
    source = reference(rig.server, 0, "down", "rec/3")
    with pytest.raises(SourceDeferred):
        await rig.pinner(settings=settings, breakers=breakers).pin_sources(job_task(source), 1)

    delays = []
    for _ in range(20):
        task = job_task(source, deadline_in=30)
        with pytest.raises(SourceDeferred) as deferred:
            await rig.pinner(settings=settings, breakers=breakers).pin_sources(task, 1)
        delays.append(deferred.value.retry_after or 0.0)
    assert len(set(delays)) > 10, "not in lockstep"
    assert all(3.0 < d <= 4.0 + 2.0 for d in delays), delays

    # A budget that leaves just enough: the delay is cut to leave one call's time.
    reserve, minimal = settings.budget_reserve_seconds, settings.min_call_seconds
    wait = breakers.wait_seconds(TENANT, "down")
    tight = job_task(source, deadline_in=wait + reserve + minimal + 0.8)
    with pytest.raises(SourceDeferred) as cut:
        await rig.pinner(settings=settings, breakers=breakers).pin_sources(tight, 1)
    fetch_deadline = tight.deadline.ToNanoseconds() / 1e9 - reserve
    assert time.time() + (cut.value.retry_after or 0) <= fetch_deadline - minimal + 0.01
    # One that cannot wait for the breaker and still call: the job ends now.
    short = job_task(source, deadline_in=wait + reserve)
    with pytest.raises(SystemFailure) as ended:
        await rig.pinner(settings=settings, breakers=breakers).pin_sources(short, 1)
    assert ended.value.reason is ReasonCode.SOURCE_UNAVAILABLE
    assert rig.calls("down") == 1


async def test_a_system_that_hangs_ends_the_job_unavailable_inside_its_deadline(
    rig: Rig,
) -> None:
    rig.server.put_json("hang", "rec/4", EVENTS)
    rig.server.behave("hang", delay=30)
    task = job_task(reference(rig.server, 0, "hang", "rec/4", timeout=20), deadline_in=3.0)
    deadline = task.deadline.ToNanoseconds() / 1e9

    with pytest.raises(SystemFailure) as ended:
        await rig.pinner().pin_sources(task, 1)

    now = time.time()
    assert ended.value.reason is ReasonCode.SOURCE_UNAVAILABLE
    assert now < deadline - SETTINGS.budget_reserve_seconds + 0.3, "ended by the fetch deadline"
    assert now > deadline - SETTINGS.budget_reserve_seconds - 0.6, "after using its budget"


async def test_a_system_on_an_address_quire_does_not_call_is_never_called(rig: Rig) -> None:
    """A registration that points inside (loopback here, with no allow-list)
    fails the job SOURCE_REFUSED at the connection, before any request."""
    rig.server.put_json("inside", "rec/1", EVENTS)
    guarded = source_client(SETTINGS, EgressPolicy())
    try:
        with pytest.raises(SystemFailure) as ended:
            await rig.pinner(client=guarded).pin_sources(
                job_task(reference(rig.server, 0, "inside", "rec/1")), 1
            )
    finally:
        await guarded.aclose()
    assert ended.value.reason is ReasonCode.SOURCE_REFUSED
    assert "127.0.0.1" not in str(ended.value), "no address in the error"
    assert rig.calls("inside") == 0
    assert rig.temporary_files() == []


async def test_a_job_whose_deadline_passed_in_the_queue_ends_deadline_exceeded(
    rig: Rig,
) -> None:
    rig.server.put_json("carrier", "shp/6", EVENTS)
    for deadline_in in (-1.0, SETTINGS.budget_reserve_seconds + 0.2):
        task = job_task(reference(rig.server, 0, "carrier", "shp/6"), deadline_in=deadline_in)
        with pytest.raises(SystemFailure) as ended:
            await rig.pinner().pin_sources(task, 1)
        assert ended.value.reason is ReasonCode.DEADLINE_EXCEEDED
        assert time.time() < task.deadline.ToNanoseconds() / 1e9 or deadline_in < 0
    assert rig.calls("carrier") == 0


async def test_the_last_delivery_ends_the_job_unavailable_not_retry_limit(rig: Rig) -> None:
    rig.server.behave("down", status=503)
    source = reference(rig.server, 0, "down", "rec/5")
    with pytest.raises(SourceDeferred):
        await rig.pinner(max_deliver=3).pin_sources(job_task(source), 2)
    with pytest.raises(SystemFailure) as ended:
        await rig.pinner(max_deliver=3).pin_sources(job_task(source), 3)
    assert ended.value.reason is ReasonCode.SOURCE_UNAVAILABLE


async def test_a_permanent_outcome_stops_the_jobs_other_fetches_and_keeps_its_pins(
    rig: Rig,
) -> None:
    rig.server.put_json("carrier", "shp/7", EVENTS)
    rig.server.put_json("slow", "rec/6", EVENTS)
    rig.server.behave("slow", delay=5)
    rig.server.behave("tax", delay=0.3)  # position 0 is pinned by the time it answers
    task = job_task(
        reference(rig.server, 0, "carrier", "shp/7"),
        reference(rig.server, 1, "tax", "nl/none"),
        reference(rig.server, 2, "slow", "rec/6", timeout=10),
    )
    started = time.monotonic()
    pinned = await rig.pinner().pin_sources(task, 1)

    assert time.monotonic() - started < 2, "the slow system's call was abandoned"
    assert pinned.rejection is not None
    assert pinned.rejection.reason is ReasonCode.SOURCE_NOT_FOUND
    assert pinned.task.sources[0].HasField("pin"), "what was pinned is carried"
    assert not pinned.task.sources[2].HasField("pin")
    assert rig.breakers.state(TENANT, "slow") is BreakerState.CLOSED, (
        "a cancelled call is no failure"
    )


async def test_calls_show_in_metrics_and_in_the_deliverys_fetch_timings(
    rig: Rig, tmp_path: Path
) -> None:
    metrics = ServiceMetrics("validator")
    meter = SourceMeter(metrics)
    breakers = SourceBreakers(failures=1, open_seconds=30, on_state=meter.breaker)
    stage_meter = StageMeter(metrics, "validate", 4)
    pinner = SourcePinner(
        fetcher=SourceFetcher(rig.client, rig.blobs),
        pins=PinStore(rig.database),
        blobs=rig.blobs,
        breakers=breakers,
        settings=SETTINGS,
        max_deliver=5,
        meter=meter,
    )
    rig.server.put_json("carrier", "shp/9", EVENTS)
    rig.server.behave("down", status=500)

    with stage_meter.delivery("interactive", 0.0):
        await pinner.pin_sources(job_task(reference(rig.server, 0, "carrier", "shp/9")), 1)
        timings = delivery_timings()
    with pytest.raises(SourceDeferred):
        await pinner.pin_sources(job_task(reference(rig.server, 0, "down", "x")), 1)
    with pytest.raises(SourceDeferred):
        await pinner.pin_sources(job_task(reference(rig.server, 0, "down", "x")), 1)

    assert set(timings) == {"queue_wait", "fetch", "fetch:carrier"}
    assert 0 < timings["fetch:carrier"] <= timings["fetch"]

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("quire_source_fetches_total", system="carrier", outcome="ok") == 1
    assert sample("quire_source_fetches_total", system="down", outcome="error") == 1
    # The first job's retry found the breaker its failure had opened; the second, at once.
    assert sample("quire_source_fetches_total", system="down", outcome="breaker_open") == 2
    assert sample("quire_source_fetch_seconds_count", system="carrier") == 1
    assert sample("quire_source_deferrals_total", system="down") == 2
    assert sample("quire_source_breaker_state", system="down") == 2
    assert sample("quire_source_breaker_state", system="carrier") == 0
    scraped = {m.name for m in metrics.registry.collect()}
    assert {"quire_source_fetches", "quire_source_breaker_state"} <= scraped


async def test_a_deferral_comes_back_with_room_for_a_call_and_a_redelivery_reason(
    rig: Rig,
) -> None:
    settings = SETTINGS.model_copy(
        update={"breaker_failures": 1, "breaker_open_seconds": 4.0, "budget_reserve_seconds": 5.0}
    )
    breakers = _breakers(settings)
    rig.server.put_json("late", "rec/9", EVENTS)
    rig.server.behave("late", status=503)
    source = reference(rig.server, 0, "late", "rec/9")
    # The fetch deadline (deadline less the 5 s reserve) is 6 s away.
    task = job_task(source, deadline_in=11.0)
    with pytest.raises(SourceDeferred) as deferred:
        await rig.pinner(settings=settings, breakers=breakers).pin_sources(task, 1)
    room = 6.0 - 2 * settings.min_call_seconds
    assert (deferred.value.retry_after or 0) <= room + 0.1, "back with room for one call"

    rig.server.behave("late")  # healthy again (a fresh breaker), but the budget is gone
    spent = job_task(source, deadline_in=5.3)  # 0.3 s of fetch budget left
    fresh = _breakers(settings)
    with pytest.raises(SystemFailure) as ended:
        await rig.pinner(settings=settings, breakers=fresh).pin_sources(spent, 2)
    assert ended.value.reason is ReasonCode.SOURCE_UNAVAILABLE, "it was deferred: not DEADLINE"
    with pytest.raises(SystemFailure) as late:
        await rig.pinner(settings=settings, breakers=fresh).pin_sources(spent, 1)
    assert late.value.reason is ReasonCode.DEADLINE_EXCEEDED, "a first delivery come too late"
