"""Sources named by reference (issue 19), at admission's door, on the real
stack: operators register a tenant's source systems; a manifest item names a
record in one of them instead of an uploaded digest, checked as digests are;
an accepted job's task carries a copy of the system's registration, which a
later change to the registry never alters, and the deadline its budget sets.

The validator does not fetch here: nothing waits for a referenced job to end.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.duration_pb2 import Duration

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import batch_pb2
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import details_of, reason_of
from quire.jobs import manifest_digest
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.type import job_pb2, queue_pb2

pytestmark = pytest.mark.stack

JSON = "application/json"
PDF = "application/pdf"
MIB = 1024 * 1024
UNREACHABLE = "http://127.0.0.1:1/api"
"""A base URL no fetch ever reaches, and that refuses at once: nothing listens
on port 1 of the loopback. (A name that never resolves, such as ``.invalid``,
can instead hold a validator slot for a resolver's timeout on a machine
without a network, and the session stack's other tests would see the
pipeline shed their work.)"""


async def _refused(call, code: grpc.StatusCode) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == code, refused.value.details()
    return refused.value


def _violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    return [(field, reason) for field, _description, reason in details_of(error).violations]


def _stored(stack, job: str) -> tuple[queue_pb2.JobTask, str | None]:  # type: ignore[no-untyped-def]
    """The task admission stored for ``job`` (what it publishes), and the row's deadline."""
    path = Path(stack.data_dir) / "admission" / "admission.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        task, deadline = db.execute(
            "SELECT task, deadline FROM jobs WHERE job = ?", (job,)
        ).fetchone()
    return queue_pb2.JobTask.FromString(task), deadline


def _seconds(duration: Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


@pytest.fixture
async def let_go():  # type: ignore[no-untyped-def]
    """Jobs named by reference to cancel after the test: no fetch can reach
    their systems, and nothing here waits for them to end."""
    jobs: list[tuple[AdmissionClient, str]] = []
    yield lambda client, *names: jobs.extend((client, name) for name in names)
    for client, name in jobs:
        try:
            await client.cancel(name)
        except grpc.aio.AioRpcError:
            pass  # ended already


@pytest.fixture
async def admin(stack):  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as client:
        yield client


async def _tenant(tenants, admin: TenantAdminClient, **system: object) -> AdmissionClient:  # type: ignore[no-untyped-def]
    """A fresh tenant with source system "orders" registered (``system`` overrides)."""
    client = await tenants("sources")
    wanted = {
        "base_url": UNREACHABLE,
        "credential_ref": "env:QUIRE_SOURCE_CREDENTIAL_ORDERS",
        **system,
    }
    await admin.put_source_system(client.tenant, "orders", **wanted)  # type: ignore[arg-type]
    return client


# -- the registry --------------------------------------------------------------


async def test_a_system_is_registered_listed_replaced_and_deleted(tenants, admin) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("registry")
    tenant = client.tenant
    first = await admin.put_source_system(tenant, "orders", base_url="https://erp.example/v1")
    assert first.name == f"{tenant}/sourceSystems/orders"
    assert (first.base_url, first.credential_ref, first.schema) == (
        "https://erp.example/v1",
        "",
        "",
    )
    assert _seconds(first.timeout) == 5.0 and first.max_bytes == 16 * MIB, "the defaults"
    assert first.HasField("update_time")

    await asyncio.sleep(0.01)
    replaced = await admin.put_source_system(
        tenant,
        "orders",
        base_url="http://erp.internal:8080/records",
        credential_ref="file:/run/secrets/erp",
        timeout=12.5,
        max_bytes=2 * MIB,
        schema="order-lines@3",
    )
    assert replaced.update_time.ToDatetime() > first.update_time.ToDatetime()
    carrier = await admin.put_source_system(
        tenant, "carrier-events", base_url="https://carrier.example", schema="carrier-events@1"
    )
    listed = await admin.list_source_systems(tenant)
    assert [s.name for s in listed] == [carrier.name, replaced.name], "sorted by name, one each"
    assert listed[1] == replaced
    assert (listed[1].credential_ref, _seconds(listed[1].timeout)) == (
        "file:/run/secrets/erp",
        12.5,
    )
    assert listed[1].max_bytes == 2 * MIB and listed[1].schema == "order-lines@3"

    assert await admin.delete_source_system(tenant, "orders") is True
    assert await admin.delete_source_system(tenant, "orders") is False
    assert [s.name for s in await admin.list_source_systems(tenant)] == [carrier.name]
    other = await tenants("registry-other")
    assert await admin.list_source_systems(other.tenant) == [], "each tenant its own"


REFUSED_REGISTRATIONS = [
    ({"system": "Orders"}, "source_system.name", "BAD_SOURCE_SYSTEM_ID"),
    ({"system": "9orders"}, "source_system.name", "BAD_SOURCE_SYSTEM_ID"),
    ({"system": "o" * 64}, "source_system.name", "BAD_SOURCE_SYSTEM_ID"),
    ({"system": "or_ders"}, "source_system.name", "BAD_SOURCE_SYSTEM_ID"),
    ({"system": "orders\n"}, "source_system.name", "BAD_SOURCE_SYSTEM_ID"),
    ({"base_url": ""}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "ftp://erp.example/x"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "https://erp.example/x?a=1"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "https://erp.example/x#top"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "https://me:pw@erp.example/x"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "https:///no-host"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"base_url": "erp.example/x"}, "source_system.base_url", "BAD_BASE_URL"),
    ({"credential_ref": "s3cr3t-bearer"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"credential_ref": "env:lower_case"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"credential_ref": "env:ORDERS_TOKEN"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    (
        {"credential_ref": "env:QUIRE_SIGNER_PKCS11_PIN"},
        "source_system.credential_ref",
        "BAD_CREDENTIAL_REF",
    ),
    ({"credential_ref": "env:"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"credential_ref": "file:relative/x"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"credential_ref": "file:/"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"credential_ref": "env:TOKEN\n"}, "source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ({"timeout": 60.001}, "source_system.timeout", "TIMEOUT_TOO_LONG"),
    ({"timeout": -1.0}, "source_system.timeout", "BAD_TIMEOUT"),
    ({"max_bytes": 256 * MIB + 1}, "source_system.max_bytes", "MAX_BYTES_TOO_LARGE"),
    ({"max_bytes": -1}, "source_system.max_bytes", "BAD_MAX_BYTES"),
    ({"schema": "tax-record"}, "source_system.schema", "BAD_SCHEMA"),
    ({"schema": "Tax@1"}, "source_system.schema", "BAD_SCHEMA"),
    ({"schema": "tax@v1"}, "source_system.schema", "BAD_SCHEMA"),
    ({"schema": "tax@1\n"}, "source_system.schema", "BAD_SCHEMA"),
    # Addresses Quire does not call (the embedded stack allows only loopback).
    *(
        ({"base_url": url}, "source_system.base_url", "BASE_URL_NOT_ALLOWED")
        for url in (
            "http://169.254.169.254/latest/meta-data",
            "https://10.1.2.3/records",
            "https://192.168.0.10:8443/records",
            "https://[fd00::10]/records",
            "https://[fe80::1]/records",
            "https://[::ffff:10.1.2.3]/records",
        )
    ),
]


async def test_each_registration_rule_is_refused_with_its_reason(tenants, admin) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("rules")
    for change, field, reason in REFUSED_REGISTRATIONS:
        wanted: dict[str, object] = {"system": "orders", "base_url": "https://erp.example/x"}
        wanted.update(change)
        system = str(wanted.pop("system"))
        error = await _refused(
            admin.put_source_system(client.tenant, system, **wanted),  # type: ignore[arg-type]
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert reason_of(error) == "INVALID_TENANT", change
        assert _violations(error) == [(field, reason)], change
        assert "s3cr3t" not in str(details_of(error)) and "s3cr3t" not in (error.details() or "")
    several = await _refused(
        admin.put_source_system(
            client.tenant, "orders", base_url="ftp://x", timeout=61, schema="nope"
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert sorted(reason for _field, reason in _violations(several)) == [
        "BAD_BASE_URL",
        "BAD_SCHEMA",
        "TIMEOUT_TOO_LONG",
    ], "every violation at once"
    # At the limits: accepted.
    edge = await admin.put_source_system(
        client.tenant,
        "o" * 63,
        base_url="HTTPS://ERP.example:8443",
        timeout=60,
        max_bytes=256 * MIB,
        credential_ref="env:QUIRE_SOURCE_CREDENTIAL__ERP_2",
    )
    assert _seconds(edge.timeout) == 60 and edge.max_bytes == 256 * MIB
    assert await admin.list_source_systems(client.tenant) == [edge], "nothing refused was stored"


async def test_registry_calls_need_the_operator_and_an_existing_tenant(stack, admin) -> None:  # type: ignore[no-untyped-def]
    missing = "tenants/no-such-tenant"
    for call in (
        admin.put_source_system(missing, "orders", base_url="https://erp.example"),
        admin.list_source_systems(missing),
        admin.delete_source_system(missing, "orders"),
    ):
        assert reason_of(await _refused(call, grpc.StatusCode.NOT_FOUND)) == "NOT_FOUND"
    made = await admin.create_tenant(f"authz-{uuid.uuid4().hex[:8]}")
    tenant = made.tenant.name
    info = StackInfo.read(stack.data_dir)
    # A tenant's own token is no operator's.
    async with TenantAdminClient(info.endpoints["admission"], made.secret) as as_tenant:
        for call in (
            as_tenant.put_source_system(tenant, "orders", base_url="https://erp.example"),
            as_tenant.list_source_systems(tenant),
            as_tenant.delete_source_system(tenant, "orders"),
        ):
            await _refused(call, grpc.StatusCode.UNAUTHENTICATED)
    assert await admin.list_source_systems(tenant) == []


# -- at the door -----------------------------------------------------------------


def _reference(system: str, key: str, content_type: str = JSON) -> dict[str, str]:
    return {"system": system, "key": key, "content_type": content_type}


async def test_a_reference_to_an_unregistered_system_is_refused_with_its_field(
    tenants, admin
) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)
    error = await _refused(
        client.submit([PacketItem.reference("tax", "carriers", "2026/Q4/tax.json")]),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert reason_of(error) == "INVALID_MANIFEST"
    assert _violations(error) == [("manifest.items[0].source.system", "UNKNOWN_SOURCE_SYSTEM")]
    assert (await client.list_jobs()).jobs == [], "no job was made"


async def test_every_reference_rule_is_checked_and_listed(tenants, admin, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin, schema="order-lines@2")
    await admin.put_source_system(client.tenant, "scans", base_url=UNREACHABLE)
    known = (await client.upload(write_text_pdf(tmp_path / "k.pdf", [uuid.uuid4().hex]))).sha256
    long_key = "k" * 257
    items = [
        {"document_id": "a", "source": _reference("scans", "/absolute", PDF)},
        {"document_id": "b", "source": _reference("scans", "a/../b", PDF)},
        {"document_id": "c", "source": _reference("scans", "..", PDF)},
        {"document_id": "d", "source": _reference("scans", "spaces are bad", PDF)},
        {"document_id": "e", "source": _reference("scans", long_key, PDF)},
        {"document_id": "f", "source": _reference("scans", "", PDF)},
        {"document_id": "f2", "source": _reference("scans", "scan-7.pdf\n", PDF)},
        {"document_id": "g", "source": _reference("scans", "x.txt", "text/plain")},
        {"document_id": "h", "source": _reference("orders", "order/7.pdf", PDF)},
        {"document_id": "i", "sha256": known, "source": _reference("orders", "o/1")},
        {"document_id": "j"},
        # Well-formed: no violation of their own.
        {"document_id": "k", "source": _reference("scans", "2026/scan-7.v2:a_b-c.pdf", PDF)},
        {"document_id": "l", "source": _reference("orders", "a..b/order-7.json")},
        {"document_id": "m", "sha256": known},
    ]
    request = pb.SubmitJobRequest(
        request_id=uuid.uuid4().hex,
        manifest={"items": [{"position": i, **item} for i, item in enumerate(items)]},
    )
    error = await _refused(client.submit_request(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert reason_of(error) == "INVALID_MANIFEST"
    assert sorted(_violations(error)) == sorted(
        [
            ("manifest.items[0].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[1].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[2].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[3].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[4].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[5].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[6].source.key", "BAD_SOURCE_KEY"),
            ("manifest.items[7].source.content_type", "CONTENT_TYPE_NOT_ALLOWED"),
            ("manifest.items[8].source.content_type", "SCHEMA_NEEDS_JSON"),
            ("manifest.items[9].source", "SOURCE_AND_DIGEST"),
            ("manifest.items[10].sha256", "BAD_DIGEST"),
        ]
    )
    assert (await client.list_jobs()).jobs == []


async def test_an_accepted_reference_carries_its_systems_registration_and_a_deadline(
    stack, tenants, admin, let_go, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin, timeout=7.5, max_bytes=3 * MIB, schema="order-lines@2")
    upload = await client.upload(write_text_pdf(tmp_path / "cover.pdf", [uuid.uuid4().hex]))
    job = await client.submit(
        [
            PacketItem("cover", upload.sha256),
            PacketItem.reference("lines", "orders", "2026/order-77.json"),
        ],
        budget=90,
    )
    let_go(client, job.name)
    assert job.HasField("deadline")
    budget = job.deadline.ToDatetime() - job.create_time.ToDatetime()
    assert abs(budget - timedelta(seconds=90)) <= timedelta(seconds=1)

    task, stored_deadline = _stored(stack, job.name)
    assert task.deadline == job.deadline, "every stage sees the deadline"
    assert stored_deadline is not None, "the job row keeps it too"
    cover, lines = task.sources
    assert cover.sha256 == upload.sha256 and cover.blob_key and cover.size_bytes
    assert not cover.HasField("fetch")
    assert (lines.position, lines.document_id, lines.content_type) == (1, "lines", JSON)
    assert (lines.sha256, lines.size_bytes, lines.blob_key) == ("", 0, ""), "pinned later"
    assert lines.fetch == job_pb2.SourceFetch(
        system="orders",
        key="2026/order-77.json",
        content_type=JSON,
        base_url=UNREACHABLE,
        credential_ref="env:QUIRE_SOURCE_CREDENTIAL_ORDERS",
        timeout=Duration(seconds=7, nanos=500_000_000),
        max_bytes=3 * MIB,
        schema="order-lines@2",
    )
    assert task.manifest_digest == job.manifest_digest

    # A later change to the registry changes no accepted job.
    await admin.put_source_system(client.tenant, "orders", base_url="http://127.0.0.1:2/v2")
    assert _stored(stack, job.name)[0] == task
    assert await admin.delete_source_system(client.tenant, "orders")
    assert _stored(stack, job.name)[0] == task
    replay = await client.get_job(job.name)
    assert replay.deadline == job.deadline


async def test_a_reference_without_a_budget_gets_the_default_budget(
    stack, tenants, admin, let_go
) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)
    job = await client.submit([PacketItem.reference("lines", "orders", "o/1")])
    let_go(client, job.name)
    budget = job.deadline.ToDatetime() - job.create_time.ToDatetime()
    assert abs(budget - timedelta(seconds=60)) <= timedelta(seconds=1)
    assert _stored(stack, job.name)[0].deadline == job.deadline


async def test_an_upload_only_job_without_a_budget_has_no_deadline(
    stack, tenants, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("uploads-only")
    digest = (await client.upload(write_text_pdf(tmp_path / "a.pdf", [uuid.uuid4().hex]))).sha256
    job = await client.submit([PacketItem("doc", digest)])
    assert not job.HasField("deadline")
    task, stored_deadline = _stored(stack, job.name)
    assert not task.HasField("deadline") and stored_deadline is None
    assert job.manifest_digest == manifest_digest(
        job_pb2.Manifest(items=[job_pb2.ManifestItem(position=0, document_id="doc", sha256=digest)])
    ), "an upload-only manifest's digest is what it always was"
    timed = await client.submit([PacketItem("doc", digest)], budget=30)
    assert abs(_seconds_between(timed) - 30) <= 1
    assert _stored(stack, timed.name)[0].deadline == timed.deadline


def _seconds_between(job: job_pb2.Job) -> float:
    return (job.deadline.ToDatetime() - job.create_time.ToDatetime()).total_seconds()


async def test_a_budget_too_short_or_too_long_is_refused(tenants, admin, let_go) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)
    reference = [PacketItem.reference("lines", "orders", "o/1")]
    for seconds in (6, 1, 0, -5):  # the reserve is 5 s, and a source call needs 1 s more
        error = await _refused(
            client.submit(reference, budget=seconds), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert reason_of(error) == "BUDGET_TOO_SHORT", seconds
        assert _violations(error) == [("budget", "BUDGET_TOO_SHORT")]
    too_long = await _refused(
        client.submit(reference, budget=3600.5), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert _violations(too_long) == [("budget", "BUDGET_TOO_LONG")]
    assert (await client.list_jobs()).jobs == []
    shortest = await client.submit(reference, budget=6.5)
    let_go(client, shortest.name)
    assert abs(_seconds_between(shortest) - 6.5) <= 1


async def test_the_budget_is_part_of_the_request(tenants, admin, let_go) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)
    reference = [PacketItem.reference("lines", "orders", "o/1")]
    first = await client.submit(reference, request_id="budgeted", budget=120)
    let_go(client, first.name)
    again = await client.submit(reference, request_id="budgeted", budget=120)
    assert (again.name, again.deadline) == (first.name, first.deadline)
    for other in (121, None):
        error = await _refused(
            client.submit(reference, request_id="budgeted", budget=other),
            grpc.StatusCode.ALREADY_EXISTS,
        )
        assert reason_of(error) == "IDEMPOTENCY_KEY_REUSED"
    assert [job.name for job in (await client.list_jobs()).jobs] == [first.name]


async def test_the_manifest_digest_covers_every_field_of_a_reference(
    tenants, admin, let_go
) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)
    await admin.put_source_system(client.tenant, "ledger", base_url=UNREACHABLE)
    variants = [
        ("orders", "o/1", JSON),
        ("orders", "o/2", JSON),
        ("ledger", "o/1", JSON),
        ("orders", "o/1", PDF),
    ]
    jobs = [
        await client.submit([PacketItem.reference("doc", *variant)], request_id="same-" + str(i))
        for i, variant in enumerate(variants)
    ]
    let_go(client, *(job.name for job in jobs))
    assert len({job.manifest_digest for job in jobs}) == len(variants)
    # The same request id with a manifest that differs only in its key is another request.
    error = await _refused(
        client.submit([PacketItem.reference("doc", "orders", "o/3")], request_id="same-0"),
        grpc.StatusCode.ALREADY_EXISTS,
    )
    assert reason_of(error) == "IDEMPOTENCY_KEY_REUSED"
    manifest = job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=0, document_id="doc", source=_reference(*variants[0]))]
    )
    assert manifest_digest(manifest) == jobs[0].manifest_digest, "the manifest as sent"


async def test_a_batch_packet_may_name_a_registered_system(stack, tenants, admin, let_go) -> None:  # type: ignore[no-untyped-def]
    client = await _tenant(tenants, admin)

    def packet(bundle: str, system: str) -> batch_pb2.BatchPacket:
        return batch_pb2.BatchPacket(
            bundle_id=bundle,
            manifest=job_pb2.Manifest(
                items=[
                    job_pb2.ManifestItem(
                        position=0, document_id="lines", source=_reference(system, f"{bundle}.json")
                    )
                ]
            ),
        )

    error = await _refused(
        client.submit_batch([packet("one", "orders"), packet("two", "nowhere")]),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _violations(error) == [
        ("packets[1].manifest.items[0].source.system", "UNKNOWN_SOURCE_SYSTEM")
    ]
    batch = await client.submit_batch([packet("one", "orders")])
    for _ in range(200):  # the dispatcher makes the packet's job shortly
        jobs = [job async for job in client.batch_jobs(batch.name)]
        if jobs and jobs[0].job:
            break
        await asyncio.sleep(0.1)
    let_go(client, jobs[0].job)
    task, _deadline = _stored(stack, jobs[0].job)
    (source,) = task.sources
    assert (source.fetch.system, source.fetch.key, source.fetch.base_url) == (
        "orders",
        "one.json",
        UNREACHABLE,
    )
    assert task.HasField("deadline"), "a packet naming a source by reference has a budget"


async def test_the_http_door_takes_references_and_a_budget(stack, admin) -> None:  # type: ignore[no-untyped-def]
    made = await admin.create_tenant(f"http-{uuid.uuid4().hex[:8]}")
    await admin.put_source_system(made.tenant.name, "orders", base_url=UNREACHABLE)
    info = StackInfo.read(stack.data_dir)
    headers = {"Authorization": f"Bearer {made.secret}"}
    async with httpx.AsyncClient(base_url=info.gateway_url, headers=headers, timeout=30) as http:
        item = {"position": 0, "document_id": "lines", "source": _reference("orders", "o/9")}
        accepted = await http.post(
            "/v1/pdf/merge",
            json={"items": [item], "budget_seconds": 45, "idempotency_key": "http-1"},
        )
        assert accepted.status_code == 202, accepted.text
        status = accepted.json()
        task, _deadline = _stored(stack, status["name"])
        assert task.sources[0].fetch.system == "orders" and task.sources[0].fetch.key == "o/9"
        job = job_pb2.Job()
        job.deadline.CopyFrom(task.deadline)
        job.create_time.FromJsonString(status["create_time"])
        assert abs(_seconds_between(job) - 45) <= 1
        assert status["deadline"] is not None

        unknown = dict(item, source=_reference("nowhere", "o/9"))
        refused = await http.post(
            "/v1/pdf/merge", json={"items": [unknown], "idempotency_key": "http-2"}
        )
        assert refused.status_code == 400, refused.text
        assert [(v["field"], v["reason"]) for v in refused.json()["violations"]] == [
            ("manifest.items[0].source.system", "UNKNOWN_SOURCE_SYSTEM")
        ]
        short = await http.post(
            "/v1/pdf/merge",
            json={"items": [item], "budget_seconds": 2, "idempotency_key": "http-3"},
        )
        assert short.status_code == 400 and short.json()["reason"] == "BUDGET_TOO_SHORT"
    async with AdmissionClient(info.endpoints["admission"], made.secret) as as_tenant:
        await as_tenant.cancel(status["name"])  # no fetch reaches its system


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"QUIRE_SOURCE_JOB_BUDGET_SECONDS": "6"}, "QUIRE_SOURCE_JOB_BUDGET_SECONDS"),
        ({"QUIRE_SOURCE_JOB_BUDGET_SECONDS": "4000"}, "QUIRE_SOURCE_JOB_BUDGET_SECONDS"),
        ({"QUIRE_JOB_BUDGET_RESERVE_SECONDS": "-1"}, "QUIRE_JOB_BUDGET_RESERVE_SECONDS"),
        ({"QUIRE_JOB_BUDGET_RESERVE_SECONDS": "70"}, "QUIRE_SOURCE_JOB_BUDGET_SECONDS"),
        ({"QUIRE_MAX_JOB_BUDGET_SECONDS": "5.5"}, "QUIRE_MAX_JOB_BUDGET_SECONDS"),
        ({"QUIRE_MAX_JOB_BUDGET_SECONDS": "soon"}, "QUIRE_MAX_JOB_BUDGET_SECONDS"),
    ],
)
def test_budget_settings_that_leave_no_room_stop_admission_at_start(
    env: dict[str, str], variable: str
) -> None:
    from quire.admission.jobs.budgets import JobBudgets
    from quire.errors import InvalidSetting

    with pytest.raises(InvalidSetting) as refused:
        JobBudgets.from_env(env)
    assert refused.value.variable == variable
    defaults = JobBudgets.from_env({})
    assert (defaults.source_job_budget_seconds, defaults.reserve_seconds) == (60, 5)
    assert defaults.max_seconds == 3600
    assert JobBudgets.from_env({"QUIRE_SOURCE_JOB_BUDGET_SECONDS": "6.5"}).budget(
        None, references=True
    ) == timedelta(seconds=6.5)
