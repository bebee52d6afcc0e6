"""Batches on the real stack: SubmitBatch persists a batch at once and the
dispatcher makes one job per packet; GetBatch and ListBatchJobs show it;
CancelBatch in the middle stops what was not dispatched, lets the rest
finish, and the reported counts, the packets and audit's ledger agree."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import batch_pb2
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient
from quire.grpcstatus import details_of
from quire.jobs import TERMINAL_STATES, state_name
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel
from quire.type import job_pb2
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

pytestmark = pytest.mark.stack


async def upload_pdf(client: AdmissionClient, folder: Path) -> str:
    """One small PDF, uploaded once; every packet of a test's batch reuses it."""
    path = write_text_pdf(folder / f"{uuid.uuid4().hex}.pdf", [f"packet {uuid.uuid4()}"])
    return (await client.upload(path)).sha256


def packets(sha256: str, count: int, *, prefix: str = "") -> list[batch_pb2.BatchPacket]:
    manifest = job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=0, document_id="doc", sha256=sha256)]
    )
    return [
        batch_pb2.BatchPacket(bundle_id=f"{prefix}{index}" if prefix else "", manifest=manifest)
        for index in range(count)
    ]


async def children(client: AdmissionClient, name: str) -> list[batch_pb2.BatchJob]:
    return [job async for job in client.batch_jobs(name, page_size=200)]


async def wait_batch(
    client: AdmissionClient, name: str, timeout: float, *, until: str = "ended"
) -> batch_pb2.Batch:
    """The batch once it has ended (finish_time set), polling GetBatch."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            batch = await client.get_batch(name)
            if batch.HasField("finish_time"):
                return batch
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {name} not ended within {timeout:.0f}s")
        await asyncio.sleep(0.5)


async def accepted_in_ledger(info: StackInfo, jobs: list[str]) -> set[str]:
    """The jobs among ``jobs`` whose ledger history holds their ACCEPTED entry."""
    operator = bearer_metadata(info.operator_token())
    found: set[str] = set()
    async with aio_channel(info.endpoints["audit"], None) as channel:
        audit = agrpc.AuditServiceStub(channel)
        for job in jobs:
            reply = await audit.ListJobEvents(
                apb.ListJobEventsRequest(job=job, page_size=1000), metadata=operator
            )
            states = {state_name(entry.event.to_state) for entry in reply.entries}
            if "ACCEPTED" in states:
                found.add(job)
    return found


async def _created(stack) -> float:  # type: ignore[no-untyped-def]
    """Admission's count of batch children made, from its metrics endpoint."""
    address = StackInfo.read(stack.data_dir).metrics_endpoints["admission"]
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(f"http://{address}/metrics")
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.name == "quire_batch_children_created_total":
                return sample.value
    raise AssertionError("quire_batch_children_created_total is not exported")


async def test_an_inline_batch_becomes_one_job_per_packet_listed_in_index_order(
    stack, tenants, tmp_path: Path
) -> None:
    client = await tenants("batch-inline")
    sha256 = await upload_pdf(client, tmp_path)
    created_before = await _created(stack)
    started = time.monotonic()
    batch = await client.submit_batch(packets(sha256, 12, prefix="lease-"))
    assert time.monotonic() - started < 5, "persisted and answered at once"
    assert batch.name.startswith("batches/") and len(batch.name) == len("batches/") + 32
    assert batch.state == batch_pb2.BATCH_STATE_DISPATCHING
    assert batch.packet_count == 12 and batch.dispatched_count == 0
    done = await wait_batch(client, batch.name, 180)
    assert done.state == batch_pb2.BATCH_STATE_DONE
    assert (done.dispatched_count, done.terminal_count) == (12, 12)
    assert {(c.state, c.count) for c in done.job_counts} == {(job_pb2.JOB_STATE_COMPLETED, 12)}
    first = await client.list_batch_jobs(batch.name, page_size=5)
    assert len(first.jobs) == 5 and first.next_page_token
    every = await children(client, batch.name)
    assert [job.index for job in every] == list(range(12))
    assert [job.bundle_id for job in every] == [f"lease-{i}" for i in range(12)]
    assert len({job.job for job in every}) == 12, "one distinct job per packet"
    assert all(job.state == job_pb2.JOB_STATE_COMPLETED for job in every)
    child = await client.get_job(every[3].job)
    assert (child.bundle_id, child.batch) == ("lease-3", batch.name)
    assert child.state == job_pb2.JOB_STATE_COMPLETED
    assert await _created(stack) - created_before >= 12, "the dispatcher counts what it made"


async def test_the_same_request_id_returns_the_same_batch_and_another_request_is_refused(
    tenants, tmp_path: Path
) -> None:
    client = await tenants("batch-retry")
    sha256 = await upload_pdf(client, tmp_path)
    request_id = uuid.uuid4().hex
    first = await client.submit_batch(packets(sha256, 3), request_id=request_id)
    again = await client.submit_batch(packets(sha256, 3), request_id=request_id)
    assert again.name == first.name
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit_batch(packets(sha256, 4), request_id=request_id)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert details_of(refused.value).reason == "IDEMPOTENCY_KEY_REUSED"
    other = await tenants("batch-other")
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await other.get_batch(first.name)
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND, "another tenant's batch"
    await wait_batch(client, first.name, 120)


async def test_a_batch_from_an_uploaded_manifest_keeps_its_bundle_ids(
    tenants, tmp_path: Path
) -> None:
    client = await tenants("batch-manifest")
    sha256 = await upload_pdf(client, tmp_path)
    document = {
        "packets": [
            {
                "bundle_id": f"unit-{n}",
                "items": [{"position": 0, "document_id": "lease", "sha256": sha256}],
            }
            for n in range(4)
        ]
    }
    data = json.dumps(document).encode()
    source = await client.upload_bytes(data, "application/json")
    assert source.sha256 == hashlib.sha256(data).hexdigest()
    batch = await client.submit_batch(manifest_sha256=source.sha256)
    assert batch.packet_count == 4
    done = await wait_batch(client, batch.name, 120)
    assert done.state == batch_pb2.BATCH_STATE_DONE
    every = await children(client, batch.name)
    assert [job.bundle_id for job in every] == [f"unit-{n}" for n in range(4)]


async def test_invalid_packets_are_refused_with_each_violation_named_by_its_packet(
    tenants, tmp_path: Path
) -> None:
    client = await tenants("batch-invalid")
    sha256 = await upload_pdf(client, tmp_path)
    bad = packets(sha256, 4, prefix="p")
    bad[1].manifest.items[0].sha256 = "cd" * 32  # never uploaded
    bad[2].bundle_id = "p0"  # the first packet's
    bad[3].bundle_id = "has space"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit_batch(bad)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {(field, reason) for field, _, reason in details_of(refused.value).violations}
    assert fields == {
        ("packets[1].manifest.items[0].sha256", "UNKNOWN_SOURCE"),
        ("packets[2].bundle_id", "DUPLICATE_BUNDLE_ID"),
        ("packets[3].bundle_id", "BAD_BUNDLE_ID"),
    }
    many = packets("cd" * 32, 60)
    with pytest.raises(grpc.aio.AioRpcError) as capped:
        await client.submit_batch(many)
    violations = details_of(capped.value).violations
    assert len(violations) == 41 and violations[-1][2] == "MORE", "40 shown, then a count"


async def test_submit_job_keeps_a_valid_bundle_id_and_refuses_a_bad_one(
    tenants, tmp_path: Path
) -> None:
    client = await tenants("bundle-job")
    sha256 = await upload_pdf(client, tmp_path)
    manifest = job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=0, document_id="doc", sha256=sha256)]
    )
    request = pb.SubmitJobRequest(
        request_id=uuid.uuid4().hex, manifest=manifest, bundle_id="contract:42.v1"
    )
    job = await client.submit_request(request)
    assert job.bundle_id == "contract:42.v1"
    assert (await client.get_job(job.name)).bundle_id == "contract:42.v1"
    listed = (await client.list_jobs(page_size=1000)).jobs
    assert [j.bundle_id for j in listed if j.name == job.name] == ["contract:42.v1"]
    other = pb.SubmitJobRequest(request_id=request.request_id, manifest=manifest, bundle_id="x")
    with pytest.raises(grpc.aio.AioRpcError) as reused:
        await client.submit_request(other)
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS, "bundle_id is in the request"
    bad = pb.SubmitJobRequest(request_id=uuid.uuid4().hex, manifest=manifest, bundle_id="a/b")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit_request(bad)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v[0] for v in details_of(refused.value).violations] == ["bundle_id"]
    # A client's own key in the packets' key space would take a packet's place.
    squatter = pb.SubmitJobRequest(request_id="batch:0123abcd:0", manifest=manifest)
    with pytest.raises(grpc.aio.AioRpcError) as reserved:
        await client.submit_request(squatter)
    assert reserved.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details_of(reserved.value).reason == "REQUEST_ID_RESERVED"
    assert [v[0] for v in details_of(reserved.value).violations] == ["request_id"]


async def test_cancel_in_the_middle_stops_the_rest_and_the_counts_and_ledger_agree(
    stack, tenants, tmp_path: Path
) -> None:
    # A small quota holds the batch mid-dispatch: at most 3 of its jobs at once.
    client = await tenants("batch-cancel", max_outstanding_jobs=3)
    sha256 = await upload_pdf(client, tmp_path)
    batch = await client.submit_batch(packets(sha256, 30))
    deadline = time.monotonic() + 60
    while (await client.get_batch(batch.name)).dispatched_count < 2:
        assert time.monotonic() < deadline, "the dispatcher started the batch"
        await asyncio.sleep(0.2)
    reply = await client.cancel_batch(batch.name)
    dispatched = reply.batch.dispatched_count
    assert reply.batch.state == batch_pb2.BATCH_STATE_CANCELLED
    assert 2 <= dispatched < 30, "cancelled in the middle"
    assert reply.not_dispatched_cancelled == 30 - dispatched
    assert reply.in_flight_finishing + reply.already_terminal == dispatched
    assert reply.not_dispatched_cancelled + reply.in_flight_finishing + reply.already_terminal == 30
    ended = await wait_batch(client, batch.name, 120)
    assert ended.state == batch_pb2.BATCH_STATE_CANCELLED
    assert ended.dispatched_count == dispatched, "no child dispatched after the cancel"
    assert ended.terminal_count == dispatched, "every dispatched child ended"
    assert ended.cancelled_undispatched_count == 30 - dispatched
    every = await children(client, batch.name)
    with_job = [job for job in every if job.job]
    assert len(with_job) == dispatched
    assert all(job.cancelled_undispatched for job in every if not job.job)
    assert all(state_name(job.state) in TERMINAL_STATES for job in with_job)
    tenant_jobs = [job.name for job in (await client.list_jobs(page_size=1000)).jobs]
    assert sorted(tenant_jobs) == sorted(job.job for job in with_job), "no other job was made"
    info = StackInfo.read(stack.data_dir)
    accepted = await accepted_in_ledger(info, tenant_jobs)
    assert accepted == set(tenant_jobs), "the ledger holds exactly the dispatched children"
    again = await client.cancel_batch(batch.name)
    assert (again.not_dispatched_cancelled, again.in_flight_finishing) == (30 - dispatched, 0)
    assert again.already_terminal == dispatched


async def _admission_samples(stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:  # type: ignore[no-untyped-def]
    """Every sample admission's /metrics serves: (name, labels) -> value."""
    address = StackInfo.read(stack.data_dir).metrics_endpoints["admission"]
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(f"http://{address}/metrics")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


IN_FLIGHT = ("quire_batch_in_flight", ())
ACCEPTED_BATCH = ("quire_jobs_accepted_total", (("class", "batch"),))


async def _gauge_until(stack, check, timeout: float = 60) -> float:  # type: ignore[no-untyped-def]
    """The in-flight gauge once ``check(value)`` holds (the dispatcher sets it each tick)."""
    deadline = time.monotonic() + timeout
    while True:
        value = (await _admission_samples(stack))[IN_FLIGHT]
        if check(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.3)


def _counts(batch: batch_pb2.Batch) -> dict[str, int]:
    return {state_name(count.state): count.count for count in batch.job_counts}


async def test_parked_children_are_counted_shown_as_parked_on_cancel_and_leave_the_gauge(
    stack, tenants
) -> None:  # type: ignore[no-untyped-def]
    """A batch whose children park for review (a large invoice): they are
    counted as accepted batch-class jobs; CancelBatch shows them in the
    state GetBatch shows (NEEDS_REVIEW, not ACCEPTED); once the reviews end
    them, ``quire_batch_in_flight`` falls by them, though no batch is left
    to dispatch."""
    client = await tenants("batch-parked", max_outstanding_jobs=3)
    invoice = {
        "invoice_number": f"INV-{uuid.uuid4().hex[:8]}",
        "currency": "EUR",
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": [{"description": "freight", "quantity": "3", "unit_price": "20000.00"}],
        "tax_rate": "0",
        "total": "60000.00",
    }
    source = await client.upload_bytes(json.dumps(invoice).encode(), "application/json")
    manifest = job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=0, document_id="inv", sha256=source.sha256)],
        ruleset="logistics-invoice",
    )
    before = await _admission_samples(stack)
    assert ACCEPTED_BATCH in before, "the batch class has its series from the start"
    batch = await client.submit_batch([batch_pb2.BatchPacket(manifest=manifest)] * 6)
    deadline = time.monotonic() + 120
    while _counts(await client.get_batch(batch.name)).get("NEEDS_REVIEW", 0) < 3:
        assert time.monotonic() < deadline, "three children parked (the quota holds the rest)"
        await asyncio.sleep(0.3)
    peak = await _gauge_until(stack, lambda value: value >= 3)
    assert peak >= 3, "the parked children are in flight"

    reply = await client.cancel_batch(batch.name)
    shown = await client.get_batch(batch.name)
    assert _counts(reply.batch) == _counts(shown) == {"NEEDS_REVIEW": 3}
    assert (reply.in_flight_finishing, reply.not_dispatched_cancelled) == (3, 3)
    after = await _admission_samples(stack)
    assert after[ACCEPTED_BATCH] - before[ACCEPTED_BATCH] == 3, "each child counted once"

    info = StackInfo.read(stack.data_dir)
    parked = [job.job for job in await children(client, batch.name) if job.job]
    async with aio_channel(info.endpoints["validator"], None) as channel:
        validator = vgrpc.ValidatorServiceStub(channel)
        for job in parked:
            await validator.ResolveReview(
                vpb.ResolveReviewRequest(
                    job=job,
                    approve=False,
                    note="test",
                    operator="ops",
                    request_id=str(uuid.uuid4()),
                ),
                metadata=bearer_metadata(info.operator_token()),
            )
    ended = await wait_batch(client, batch.name, 120)
    assert ended.state == batch_pb2.BATCH_STATE_CANCELLED and ended.terminal_count == 3
    left = await _gauge_until(stack, lambda value: value <= peak - 3)
    assert left <= peak - 3, f"quire_batch_in_flight stayed at {left} after its children ended"


def test_deficit_round_robin_makes_busy_tenants_children_in_their_weights_ratio() -> None:
    from quire.admission.batches.fairshare import DeficitRoundRobin

    fair = DeficitRoundRobin(page_size=16)
    weights = {"heavy": 3, "light": 1}
    made: Counter[str] = Counter()
    for _ in range(60):  # rounds with both tenants always busy
        for tenant in fair.order(weights):
            granted = fair.grant(tenant, weights)
            made[tenant] += granted
            fair.spend(tenant, granted, exhausted=False)
    assert abs(made["heavy"] / made["light"] - 3.0) < 0.05
    fair.spend("light", 0, exhausted=True)  # idle: no banked credit
    assert fair.grant("light", weights) == 5, "one quantum (16/3), not what it might have saved"


def test_deficit_round_robin_keeps_the_ratio_when_a_full_window_frees_a_few_slots_a_tick() -> None:
    """The dispatcher's steady state under load: each tick only the slots of
    the children that ended are free. A turn the window cuts short goes on
    next tick, so the slots are shared by weight, not by turns."""
    from quire.admission.batches.fairshare import DeficitRoundRobin

    fair = DeficitRoundRobin(page_size=16)
    weights = {"heavy": 3, "light": 1}
    made: Counter[str] = Counter()
    for _ in range(400):  # 3 slots free per tick
        free = 3
        for tenant in fair.order(weights):
            if free <= 0:
                break
            granted = fair.grant(tenant, weights)
            allowed = min(granted, free)
            made[tenant] += allowed
            free -= allowed
            fair.spend(tenant, allowed, exhausted=False, cut_short=allowed < granted)
            if allowed < granted:
                break
    assert abs(made["heavy"] / made["light"] - 3.0) < 0.1, made
