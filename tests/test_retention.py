"""Retention as policy, on the real stack: old and new jobs of two tenants
with their own periods. Ages are judged at a later time (``--as-of``), so no
test sleeps for a period to pass.

- ``quire retention plan`` lists what is due and why, and changes nothing;
- ``quire retention apply`` deletes exactly the planned bytes, after audit
  recorded each deletion in the ledger, which still verifies; a rerun does
  nothing; a run interrupted after recording is finished by the next;
- a retired job's state is unchanged, its evidence still verifies (also by
  the independent verifier written from the spec) and says what was
  retired; its artifact's download fails with ARTIFACT_RETIRED;
- an upload no job used expires after its window; the storage quota refuses
  an upload past it with RESOURCE_EXHAUSTED / STORAGE_QUOTA_EXCEEDED;
- a repaired source's clean rewrite (``normalized/``) retires with the
  sources: recorded in the ledger, then deleted;
- so do the bytes a source named by reference was pinned to (``fetched/``,
  from a real local source server), once every job that pinned them ended:
  a running job pinned to the same bytes keeps them, and audit refuses a
  retirement of fetched bytes no job pinned;
- ``quire check`` accepts retired bytes and still reports lost ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from test_faults_common import Running, running_stack

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.blobstore import fetched_key, normalized_key, signed_key
from quire.cli.retention import open_blobs
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.evidenceverify import public_key_fingerprint, retirements, verify_evidence
from quire.grpcstatus import reason_of
from quire.invariants import check
from quire.jobs import job_id, state_name
from quire.retention import PlannedRetirement, plan
from quire.retention_records import read_records
from quire.settings import RetentionSettings
from quire.testing.damaged import EVERYDAY
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.testing.sourceserver import SourceServer

pytestmark = [pytest.mark.stack, pytest.mark.asyncio(loop_scope="module")]

DAY = 86400
KINDS = ("sources", "normalized", "fetched", "assembled", "signed")


@dataclass
class Tenant:
    name: str
    client: AdmissionClient
    jobs: list[str] = field(default_factory=list)
    unused: str = ""

    @property
    def id(self) -> str:
        return self.name.removeprefix("tenants/")


@dataclass
class Scene:
    running: Running
    admin: TenantAdminClient
    old: Tenant
    new: Tenant
    folder: Path

    @property
    def data_dir(self) -> Path:
        return self.running.data_dir


def _pdf(folder: Path, label: str) -> Path:
    return write_text_pdf(
        folder / f"{label}-{uuid.uuid4().hex[:6]}.pdf", [f"{label} {uuid.uuid4()}"]
    )


async def _tenant(
    admin: TenantAdminClient,
    address: str,
    label: str,
    retention: admin_pb.TenantRetention,
    **limits: int,
) -> Tenant:
    reply = await admin.create_tenant(
        f"{label}-{uuid.uuid4().hex[:8]}", retention=retention, **limits
    )
    return Tenant(reply.tenant.name, AdmissionClient(address, reply.secret))


async def _run_jobs(tenant: Tenant, folder: Path, manifests: list[list[str]]) -> None:
    digests: dict[str, str] = {}
    for manifest in manifests:
        for label in manifest:
            if label not in digests:
                digests[label] = (await tenant.client.upload(_pdf(folder, label))).sha256
    for manifest in manifests:
        items = [PacketItem(f"d{i}", digests[label]) for i, label in enumerate(manifest)]
        tenant.jobs.append((await tenant.client.submit(items)).name)
    for name in tenant.jobs:
        assert state_name((await tenant.client.wait(name, timeout=120)).state) == "COMPLETED"
    tenant.unused = (await tenant.client.upload(_pdf(folder, "unused"))).sha256


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Scene]:
    directory = tmp_path_factory.mktemp("retention")
    folder = directory / "pdfs"
    folder.mkdir()
    async with running_stack(directory / "stack") as running:
        address = running.info.endpoints["admission"]
        admin = TenantAdminClient(address, running.info.operator_token())
        # "old": its packets and sources go a day after the job, its
        # artifacts after five; "new" keeps the defaults (weeks), and its
        # unused uploads for ten days.
        old = await _tenant(
            admin,
            address,
            "old",
            admin_pb.TenantRetention(
                sources_seconds=DAY,
                packets_seconds=DAY,
                artifacts_seconds=5 * DAY,
                unused_uploads_seconds=DAY,
            ),
        )
        new = await _tenant(
            admin, address, "new", admin_pb.TenantRetention(unused_uploads_seconds=10 * DAY)
        )
        await _run_jobs(old, folder, [["s1", "s2"], ["s2", "s3"]])  # s2 is shared
        await _run_jobs(new, folder, [["n1"]])
        try:
            yield Scene(running, admin, old, new, folder)
        finally:
            for tenant in (old, new):
                await tenant.client.close()
            await admin.close()


def _later(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


def _blob_files(data_dir: Path) -> set[str]:
    root = data_dir / "blobs"
    return {
        path.relative_to(root).as_posix()
        for kind in KINDS
        for path in (root / kind).rglob("*")
        if path.is_file()
    }


def _retirement_ids(data_dir: Path) -> list[str]:
    with sqlite3.connect(data_dir / "audit" / "audit.db") as db:
        rows = db.execute(
            "SELECT event_id FROM ledger WHERE reason_code = 'BYTES_RETIRED' ORDER BY sequence"
        ).fetchall()
    return [row[0] for row in rows]


def _plan(scene: Scene, as_of: str) -> list[PlannedRetirement]:
    return plan(
        read_records(scene.data_dir, os.environ),
        RetentionSettings.from_env(),
        now=datetime.fromisoformat(as_of),
        blobs=open_blobs(scene.data_dir, os.environ),
    )


def _quire(scene: Scene, *args: str) -> str:
    result = run_quire(scene.data_dir, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def _ledger_verifies(scene: Scene) -> None:
    """Audit verifies its whole ledger: the RPC behind ``quire audit verify``
    (whose output tests/test_cli.py checks), without a process per call."""
    metadata = (("authorization", f"Bearer {scene.running.info.operator_token()}"),)
    async with grpc.aio.insecure_channel(scene.running.info.endpoints["audit"]) as channel:
        report = await audit_service_pb2_grpc.AuditServiceStub(channel).VerifyLedger(
            audit_service_pb2.VerifyLedgerRequest(), metadata=metadata, timeout=120
        )
    assert report.ok and report.entries > 0, report


async def test_the_plan_lists_what_is_due_and_why_and_changes_nothing(scene: Scene) -> None:
    before = _blob_files(scene.data_dir)
    as_of = _later(3)
    planned = _plan(scene, as_of)
    old = scene.old
    assert {p.tenant for p in planned} == {old.id}, "nothing of the new tenant is due"
    kinds = sorted((p.kind, p.job) for p in planned)
    assert [k for k, _ in kinds].count("packet") == 2
    assert [k for k, _ in kinds].count("source") == 4, "s1 (job 1), s2 (jobs 1 and 2), s3 (job 2)"
    assert [k for k, _ in kinds].count("upload") == 1
    assert "artifact" not in {k for k, _ in kinds}, "old artifacts are kept five days"
    assert all(p.age_seconds >= p.period_seconds for p in planned)
    output = _quire(scene, "retention", "plan", "--as-of", as_of)
    for item in planned:
        line = next(
            line for line in output.splitlines() if item.blob_key in line and item.kind in line
        )
        assert f"sha256={item.sha256}" in line and f"rule={item.rule}" in line and "age=" in line
    assert ".pdf  source" not in output and "unused-" not in output and "s1-" not in output
    assert "7 retirements, 6 blobs" in output
    assert _blob_files(scene.data_dir) == before and _retirement_ids(scene.data_dir) == []


async def test_apply_deletes_exactly_the_planned_bytes_and_records_each_deletion(
    scene: Scene,
) -> None:
    before = _blob_files(scene.data_dir)
    views = {name: await scene.old.client.get_job(name) for name in scene.old.jobs}
    as_of = _later(3)
    planned = _plan(scene, as_of)
    _quire(scene, "retention", "apply", "--as-of", as_of)
    assert _blob_files(scene.data_dir) == before - {p.blob_key for p in planned}
    assert sorted(_retirement_ids(scene.data_dir)) == sorted(p.event_id() for p in planned)
    assert f"sources/{scene.old.id}/{scene.old.unused}" not in _blob_files(scene.data_dir)
    assert f"sources/{scene.new.id}/{scene.new.unused}" in _blob_files(scene.data_dir)
    for name, view in views.items():
        assert await scene.old.client.get_job(name) == view, "a retirement changes no job"
    await _ledger_verifies(scene)
    report = check(scene.data_dir)
    assert report.ok, report.findings


async def test_apply_again_retires_nothing_more(scene: Scene) -> None:
    files, ledger = _blob_files(scene.data_dir), _retirement_ids(scene.data_dir)
    output = _quire(scene, "retention", "apply", "--as-of", _later(3))
    assert "nothing to retire" in output
    assert _blob_files(scene.data_dir) == files and _retirement_ids(scene.data_dir) == ledger


async def test_an_apply_stopped_after_recording_is_finished_by_the_next(scene: Scene) -> None:
    as_of = _later(6)
    planned = _plan(scene, as_of)
    assert sorted(p.job for p in planned) == sorted(scene.old.jobs)
    assert {p.kind for p in planned} == {"artifact"}
    # What a crash between the record and the deletion leaves behind.
    metadata = (("authorization", f"Bearer {scene.running.info.operator_token()}"),)
    async with grpc.aio.insecure_channel(scene.running.info.endpoints["audit"]) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        for item in planned:
            request = audit_service_pb2.RecordRetirementRequest(
                tenant=f"tenants/{item.tenant}", job=item.job, retirement=item.message()
            )
            assert (await audit.RecordRetirement(request, metadata=metadata)).appended
            assert not (await audit.RecordRetirement(request, metadata=metadata)).appended
    assert check(scene.data_dir).ok, "recorded, bytes still there: nothing wrong"
    assert all(p.recorded for p in _plan(scene, as_of))
    assert "recorded, finishing" in _quire(scene, "retention", "plan", "--as-of", as_of)
    before = _blob_files(scene.data_dir)
    _quire(scene, "retention", "apply", "--as-of", as_of)
    assert _blob_files(scene.data_dir) == before - {p.blob_key for p in planned}
    assert _retirement_ids(scene.data_dir).count(planned[0].event_id()) == 1
    report = check(scene.data_dir)
    assert report.ok, report.findings


async def test_a_retired_artifact_cannot_be_downloaded(scene: Scene) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await scene.old.client.download(scene.old.jobs[0], scene.folder / "old.pdf")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(refused.value) == "ARTIFACT_RETIRED"
    await scene.new.client.download(scene.new.jobs[0], scene.folder / "new.pdf")


async def test_evidence_of_an_old_job_verifies_and_says_its_bytes_were_retired(
    scene: Scene,
) -> None:
    from cryptography.hazmat.primitives import serialization
    from test_evidence_format import verify_evidence as verify_independently

    job = scene.old.jobs[1]
    path = scene.folder / "old.evidence.json"
    _quire(scene, "evidence", job, "-o", str(path))
    document = json.loads(path.read_text())
    assert verify_evidence(document, public_key_fingerprint(document["public_key"])) == []
    retired = retirements(document)
    assert sorted(r["kind"] for r in retired) == ["artifact", "packet", "source", "source"]
    assert {r["rule"] for r in retired} == {"artifacts", "packets", "sources"}
    witness = _quire(scene, "witness", "key").strip()
    output = _quire(
        scene,
        "evidence",
        "verify",
        str(path),
        "--key-sha256",
        public_key_fingerprint(document["public_key"]),
        "--witness-key",
        witness,
    )
    assert "OK" in output
    assert output.count("bytes retired under the retention policy") == 4
    public = serialization.load_pem_public_key(document["public_key"].encode()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    proven = verify_independently(path.read_text(), f"quire/{scene.old.id}", public)
    assert [index for index, _ in proven] == [e["index"] for e in document["entries"]]


async def test_the_storage_quota_refuses_an_upload_with_a_typed_error(scene: Scene) -> None:
    first, second = _pdf(scene.folder, "quota-a"), _pdf(scene.folder, "quota-b")
    quota = first.stat().st_size + second.stat().st_size // 2
    tenant = await _tenant(
        scene.admin,
        scene.running.info.endpoints["admission"],
        "quota",
        admin_pb.TenantRetention(unused_uploads_seconds=DAY),
        storage_quota_bytes=quota,
    )
    try:
        await tenant.client.upload(first)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await tenant.client.upload(second)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert reason_of(refused.value) == "STORAGE_QUOTA_EXCEEDED"
        await tenant.client.upload(first)  # bytes it already has cost nothing
        # The unused upload expires, is forgotten, and the quota has room again.
        _quire(scene, "retention", "apply", "--as-of", _later(2))
        await tenant.client.upload(second)
    finally:
        await tenant.client.close()


async def test_a_repaired_sources_clean_rewrite_retires_with_the_sources(scene: Scene) -> None:
    tenant = await _tenant(
        scene.admin,
        scene.running.info.endpoints["admission"],
        "repaired",
        admin_pb.TenantRetention(
            sources_seconds=DAY,
            packets_seconds=DAY,
            artifacts_seconds=5 * DAY,
            unused_uploads_seconds=DAY,
        ),
    )
    try:
        damaged = EVERYDAY["xref-missing"][0](scene.folder / f"damaged-{uuid.uuid4().hex[:6]}.pdf")
        uploaded = (await tenant.client.upload(damaged)).sha256
        job = (await tenant.client.submit([PacketItem("d0", uploaded)])).name
        assert state_name((await tenant.client.wait(job, timeout=120)).state) == "COMPLETED"
    finally:
        await tenant.client.close()
    assert not [p for p in _plan(scene, _later(0.5)) if p.kind == "normalized"], "not yet due"
    as_of = _later(2)
    (rewrite,) = [p for p in _plan(scene, as_of) if p.kind == "normalized"]
    assert (rewrite.tenant, rewrite.job, rewrite.rule) == (tenant.id, job, "sources")
    assert rewrite.sha256 != uploaded
    assert rewrite.blob_key == normalized_key(tenant.id, rewrite.sha256)
    assert rewrite.blob_key in _blob_files(scene.data_dir)
    output = _quire(scene, "retention", "apply", "--as-of", as_of)
    assert f"deleted: {rewrite.blob_key}" in output
    files = _blob_files(scene.data_dir)
    assert rewrite.blob_key not in files and f"sources/{tenant.id}/{uploaded}" not in files
    assert _retirement_ids(scene.data_dir).count(rewrite.event_id()) == 1
    await _ledger_verifies(scene)
    report = check(scene.data_dir)
    assert report.ok, report.findings


def _pinned_jobs(data_dir: Path) -> set[str]:
    """Jobs the validator pinned a fetched source for (its own record)."""
    with sqlite3.connect(data_dir / "validator" / "validator.db") as db:
        return {row[0] for row in db.execute("SELECT job FROM source_pins")}


async def test_fetched_bytes_retire_with_the_sources_once_every_job_pinning_them_ended(
    scene: Scene,
) -> None:
    address = scene.running.info.endpoints["admission"]
    tenant = await _tenant(
        scene.admin,
        address,
        "fetched",
        admin_pb.TenantRetention(
            sources_seconds=DAY,
            packets_seconds=DAY,
            artifacts_seconds=5 * DAY,
            unused_uploads_seconds=DAY,
        ),
    )
    events = {"shipment": {"carrier": "Northbound", "events": [{"code": "DELIVERED"}]}}
    with SourceServer() as server:
        tag = uuid.uuid4().hex[:6]
        for system, timeout in (("carrier", 5.0), ("slow", 30.0)):
            await scene.admin.put_source_system(
                tenant.name,
                system,
                base_url=server.base_url(f"{system}-{tag}"),
                timeout=timeout,
            )
        # Two keys, the same record: one set of bytes under fetched/.
        server.put_json(f"carrier-{tag}", "shipments/F-1", events)
        server.put_json(f"carrier-{tag}", "shipments/F-2", events)
        server.put_json(f"slow-{tag}", "orders/F-2", {"order": "F-2", "lines": []})

        async def packet(*refs: PacketItem) -> str:
            cover = (await tenant.client.upload(_pdf(scene.folder, "cover"))).sha256
            items = [PacketItem("cover", cover), *refs]
            return (await tenant.client.submit(items, budget=120)).name

        try:
            first = await packet(PacketItem.reference("events", "carrier", "shipments/F-1"))
            ended = await tenant.client.wait(first, timeout=120)
            assert state_name(ended.state) == "COMPLETED", ended.reason_code
            (pin,) = [p for p in ended.pins if p.position == 1]
            key = fetched_key(tenant.id, pin.sha256)
            assert key in _blob_files(scene.data_dir)
            assert not [p for p in _plan(scene, _later(0.5)) if p.kind == "fetched"], "not yet due"
            as_of = _later(2)
            (due,) = [p for p in _plan(scene, as_of) if p.kind == "fetched"]
            assert (due.tenant, due.job, due.rule, due.blob_key) == (
                tenant.id,
                first,
                "sources",
                key,
            )
            assert (due.sha256, due.size_bytes) == (pin.sha256, pin.size_bytes)

            # A second job pins the same bytes (fetched under another key)
            # and waits for a slow system: while it runs, nothing of it goes.
            server.behave(f"slow-{tag}", delay=8)
            second = await packet(
                PacketItem.reference("events", "carrier", "shipments/F-2"),
                PacketItem.reference("order", "slow", "orders/F-2"),
            )
            deadline = time.monotonic() + 30
            while second not in _pinned_jobs(scene.data_dir):
                assert time.monotonic() < deadline, "the second job pinned nothing"
                await asyncio.sleep(0.1)
            assert state_name((await tenant.client.get_job(second)).state) not in (
                "COMPLETED",
                "REJECTED",
                "FAILED",
                "CANCELLED",
            )
            assert not [p for p in _plan(scene, as_of) if p.blob_key == key], (
                "a running job uses it"
            )
            ended = await tenant.client.wait(second, timeout=120)
            assert state_name(ended.state) == "COMPLETED", ended.reason_code
            assert {p.sha256 for p in ended.pins if p.position == 1} == {pin.sha256}
        finally:
            await tenant.client.close()

    planned = [p for p in _plan(scene, as_of) if p.kind == "fetched"]
    assert {p.job for p in planned if p.blob_key == key} == {first, second}
    assert {p.tenant for p in planned} == {tenant.id}
    assert len({p.blob_key for p in planned}) == 2, "the shared bytes and the slow system's"
    output = _quire(scene, "retention", "apply", "--as-of", as_of)
    assert f"deleted: {key}" in output
    files = _blob_files(scene.data_dir)
    assert not {p.blob_key for p in planned} & files
    retired = _retirement_ids(scene.data_dir)
    assert all(retired.count(p.event_id()) == 1 for p in planned)
    await _ledger_verifies(scene)
    report = check(scene.data_dir)
    assert report.ok, report.findings

    # Audit refuses a retirement of fetched bytes no job of the tenant pinned.
    metadata = (("authorization", f"Bearer {scene.running.info.operator_token()}"),)
    unpinned = "e" * 64
    async with grpc.aio.insecure_channel(scene.running.info.endpoints["audit"]) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        request = audit_service_pb2.RecordRetirementRequest(
            tenant=tenant.name,
            job=first,
            retirement=PlannedRetirement(
                **{**due.__dict__, "sha256": unpinned, "blob_key": fetched_key(tenant.id, unpinned)}
            ).message(),
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await audit.RecordRetirement(request, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(_retirement_ids(scene.data_dir)) == len(retired)


async def test_check_accepts_retired_bytes_but_reports_lost_ones(scene: Scene) -> None:
    assert check(scene.data_dir).ok
    lost = scene.new.jobs[0]
    (scene.data_dir / "blobs" / signed_key(scene.new.id, lost)).unlink()
    findings = check(scene.data_dir).findings
    assert {(f.kind, f.job) for f in findings} == {("artifact_missing", lost)}
    assert job_id(lost) not in " ".join(_retirement_ids(scene.data_dir))
