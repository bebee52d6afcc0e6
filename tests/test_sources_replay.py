"""Issue 19's replay set, on a real stack of five services with a real local
HTTP source server: packets built from source systems (order lines, carrier
events, tax data, a proof-of-delivery scan) that misbehave in the ways the
seed names. Each job ends in its documented state and reason, with its pins
on the ledger; retries never fetch twice into a different packet nor make a
second artifact; rejected inputs leave no temporary file; a completed packet
stays downloadable after the worker that made it is gone.

| case                          | ends                                   |
| ----------------------------- | -------------------------------------- |
| carrier events sent twice     | COMPLETED, pinned as if sent once      |
| carrier's scan is missing     | REJECTED SOURCE_NOT_FOUND              |
| tax record is malformed       | REJECTED SOURCE_SCHEMA_INVALID         |
| a blob over the system's size | REJECTED SOURCE_TOO_LARGE              |
| assembler killed mid-job      | COMPLETED, one artifact                |
| validator killed after a pin  | COMPLETED with the first bytes fetched |
| tax system hangs              | FAILED SOURCE_UNAVAILABLE by deadline  |
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.faults import arm, fired
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.faultpointstack import FaultPointStack
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.testing.sourcerecords import CARRIER_EVENTS, TAX_RECORD, changed
from quire.testing.sourceserver import SourceServer
from quire.type import job_pb2

pytestmark = pytest.mark.stack

JSON = "application/json"
PDF = "application/pdf"
TOKEN = "replay-" + uuid.uuid4().hex


@dataclass
class Replay:
    stack: Stack
    info: StackInfo
    faults: Path
    server: SourceServer
    client: AdmissionClient
    tenant: str
    tag: str
    """Suffix of this test's systems on the server: breakers are per system,
    so no test inherits another's."""
    jobs: list[str]


@pytest.fixture(scope="module")
def source_server() -> Iterator[SourceServer]:
    with SourceServer() as server:
        yield server


@pytest.fixture(scope="module")
def replay_stack(fault_point_stack: FaultPointStack) -> tuple[Stack, StackInfo, Path]:
    """The fault-point stack (``conftest.py``), quiet: fault points, short
    leases, a source breaker that opens after 3 failures for 2 s, and the
    validators' source-credentials directory beside the faults."""
    asyncio.run(fault_point_stack.settle())
    return fault_point_stack.stack, fault_point_stack.info, fault_point_stack.faults


@pytest.fixture
async def replay(
    replay_stack: tuple[Stack, StackInfo, Path], source_server: SourceServer, tmp_path: Path
) -> AsyncIterator[Replay]:
    """A fresh tenant with its systems registered on the module's stack."""
    stack, info, faults = replay_stack
    system_tag = uuid.uuid4().hex[:6]
    token_file = faults.parent / "credentials" / f"{system_tag}.token"
    token_file.write_text(TOKEN + "\n")
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        made = await admin.create_tenant(f"replay-{system_tag}")
        tenant = made.tenant.name
        for system, schema, limit in (
            ("orders", "", 0),
            ("carrier", "carrier-events@1", 0),
            ("tax", "tax-record@1", 0),
            ("scans", "", 64 * 1024),
        ):
            name = f"{system}-{system_tag}"  # breakers are per system: none shared between tests
            source_server.require_token(name, TOKEN)
            await admin.put_source_system(
                tenant,
                system,
                base_url=source_server.base_url(name),
                credential_ref=f"file:{token_file}",
                timeout=2.0,
                max_bytes=limit,
                schema=schema,
            )
    async with AdmissionClient(info.endpoints["admission"], made.secret) as client:
        yield Replay(stack, info, faults, source_server, client, tenant, system_tag, [])
    # what each test left for the next: back to normal service
    for system in ("orders", "carrier", "tax", "scans"):
        source_server.behave(f"{system}-{system_tag}")


def _serve(replay: Replay, system: str, key: str, body: object, content_type: str = JSON) -> str:
    """Put ``body`` under ``key`` of the test's ``system``; its server-side name."""
    name = f"{system}-{replay.tag}"
    if isinstance(body, bytes):
        replay.server.put(name, key, body, content_type)
    else:
        replay.server.put_json(name, key, body)
    return name


async def _packet(replay: Replay, tmp_path: Path, *refs: PacketItem, budget: float = 30.0) -> str:
    """A packet of an uploaded cover letter then ``refs``; its job's name."""
    cover = write_text_pdf(tmp_path / f"cover-{uuid.uuid4().hex}.pdf", ["Cover letter"])
    digest = (await replay.client.upload(cover)).sha256
    job = await replay.client.submit([PacketItem("cover", digest), *refs], budget=budget)
    replay.jobs.append(job.name)
    return job.name


async def _ended(replay: Replay, name: str, timeout: float = 60) -> job_pb2.Job:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await replay.client.wait(name, timeout=max(0.5, deadline - time.monotonic()))
        except grpc.aio.AioRpcError as error:  # a killed admission coming back
            if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def _temp_files(stack: Stack) -> list[Path]:
    """Temporary files Quire left anywhere under the data directory
    (promoted blobs are not temporary). NATS's own store is left out: the
    server writes its consumer state through short-lived `.tmp` files of
    its own at any moment."""
    nats = stack.data_dir / "nats"
    found = []
    for path in stack.data_dir.rglob("*"):
        if path.is_relative_to(nats):
            continue
        if path.is_file() and (".tmp" in path.name or path.name.startswith("tmp")):
            found.append(path)
    return found


def _pins(job: job_pb2.Job) -> dict[int, job_pb2.SourcePin]:
    return {pin.position: pin for pin in job.pins}


# -- the replay set -----------------------------------------------------------


async def test_carrier_events_sent_twice_pin_the_same_input_as_sent_once(
    replay: Replay, tmp_path: Path
) -> None:
    name = _serve(replay, "carrier", "shipments/S-1", CARRIER_EVENTS)
    once = await _ended(
        replay,
        await _packet(replay, tmp_path, PacketItem.reference("events", "carrier", "shipments/S-1")),
    )
    replay.server.behave(name, duplicate_events=True)
    twice = await _ended(
        replay,
        await _packet(replay, tmp_path, PacketItem.reference("events", "carrier", "shipments/S-1")),
    )
    assert state_name(once.state) == state_name(twice.state) == "COMPLETED", twice.reason_code
    first, second = _pins(once)[1], _pins(twice)[1]
    assert first.sha256 == second.sha256, "one deterministic input, however often events came"
    assert first.fetched_sha256 != second.fetched_sha256, "the bytes as sent did differ"
    assert "DUPLICATE_EVENTS_DROPPED" in second.normalisations
    assert "DUPLICATE_EVENTS_DROPPED" not in first.normalisations
    assert (first.schema_version, first.system, first.key) == (
        "carrier-events@1",
        "carrier",
        "shipments/S-1",
    )
    shown = run_quire(replay.stack.data_dir, "diff", once.name, twice.name, "--json")
    differ = set(json.loads(shown.stdout)["differ"])
    assert "sources[1]" not in differ and "sources[1].fetched_sha256" in differ
    assert "sources[1].fetch_time" not in differ, "fetch times are shown, not compared"


async def test_a_missing_carrier_scan_rejects_the_packet(replay: Replay, tmp_path: Path) -> None:
    _serve(replay, "carrier", "shipments/S-2", CARRIER_EVENTS)
    name = await _packet(
        replay,
        tmp_path,
        PacketItem.reference("events", "carrier", "shipments/S-2"),
        PacketItem.reference("pod", "scans", "pod/S-2.pdf", PDF),  # never served
    )
    job = await _ended(replay, name)
    assert (state_name(job.state), job.reason_code) == ("REJECTED", "SOURCE_NOT_FOUND")
    assert 2 not in _pins(job), "nothing was fetched for the missing scan"
    assert not job.output_digest


async def test_a_malformed_tax_record_is_a_review_verdict_with_its_pin_on_the_ledger(
    replay: Replay, tmp_path: Path
) -> None:
    malformed = changed(TAX_RECORD)
    malformed["tax"]["jurisdiction"] = 31  # a number where two letters are required
    _serve(replay, "tax", "orders/A-17", malformed)
    job = await _ended(
        replay,
        await _packet(replay, tmp_path, PacketItem.reference("tax", "tax", "orders/A-17")),
    )
    assert (state_name(job.state), job.reason_code) == ("REJECTED", "SOURCE_SCHEMA_INVALID")
    pin = _pins(job)[1]
    assert pin.schema_version == "tax-record@1" and len(pin.sha256) == 64
    assert job.HasField("deadline")


async def test_an_oversized_blob_is_refused_and_leaves_no_temporary_file(
    replay: Replay, tmp_path: Path
) -> None:
    before = set(_temp_files(replay.stack))
    scans = _serve(replay, "scans", "manifests/S-3.json", {"pages": []})
    # The server streams 4 MiB of JSON instead; the system's limit is 64 KiB.
    replay.server.behave(scans, oversize=4 * 1024 * 1024)
    job = await _ended(
        replay,
        await _packet(
            replay, tmp_path, PacketItem.reference("blob", "scans", "manifests/S-3.json")
        ),
    )
    assert (state_name(job.state), job.reason_code) == ("REJECTED", "SOURCE_TOO_LARGE")
    assert set(_temp_files(replay.stack)) - before == set()
    fetched = replay.stack.data_dir / "blobs" / "fetched"
    sizes = (
        [p.stat().st_size for p in fetched.rglob("*") if p.is_file()] if fetched.exists() else []
    )
    assert all(size <= 64 * 1024 for size in sizes), "nothing of the oversized stream was kept"


@pytest.mark.fault
async def test_an_assembler_killed_mid_job_leaves_one_artifact_that_outlives_it(
    replay: Replay, tmp_path: Path
) -> None:
    _serve(replay, "orders", "orders/A-20", {"order": "A-20", "lines": [{"sku": "x", "qty": 2}]})
    _serve(replay, "carrier", "shipments/S-20", CARRIER_EVENTS)
    _serve(replay, "tax", "orders/A-20", TAX_RECORD)
    restarts = replay.stack.restarts("assembler")
    arm(replay.faults, "assembler.before_commit")
    name = await _packet(
        replay,
        tmp_path,
        PacketItem.reference("order", "orders", "orders/A-20"),
        PacketItem.reference("events", "carrier", "shipments/S-20"),
        PacketItem.reference("tax", "tax", "orders/A-20"),
    )
    job = await _ended(replay, name, timeout=90)
    assert state_name(job.state) == "COMPLETED", job.reason_code
    assert fired(replay.faults, "assembler.before_commit"), "the renderer died mid-job"
    for _ in range(100):
        if replay.stack.restarts("assembler") > restarts:
            break
        await asyncio.sleep(0.1)
    assert replay.stack.restarts("assembler") == restarts + 1
    job_id = name.removeprefix("jobs/")
    signed = list((replay.stack.data_dir / "blobs" / "signed").rglob(f"{job_id}.pdf"))
    assert len(signed) == 1, "exactly one artifact"
    assert [p.position for p in job.pins] == [1, 2, 3]
    # The worker that assembled it is gone (killed, replaced): still downloadable.
    digest = await replay.client.download(name, tmp_path / "packet.pdf")
    assert digest == job.output_digest
    assert (tmp_path / "packet.pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.fault
async def test_a_validator_killed_after_pinning_reuses_the_pin_and_never_fetches_again(
    replay: Replay, tmp_path: Path
) -> None:
    tax = _serve(replay, "tax", "orders/A-30", TAX_RECORD)
    arm(replay.faults, "validator.before_commit")
    name = await _packet(replay, tmp_path, PacketItem.reference("tax", "tax", "orders/A-30"))
    for _ in range(300):
        if fired(replay.faults, "validator.before_commit"):
            break
        await asyncio.sleep(0.05)
    assert fired(replay.faults, "validator.before_commit")
    later = changed(TAX_RECORD)
    later["tax"]["breakdown"][0]["tax"] = "40.00"  # tax data changes while the job waits
    replay.server.put_json(tax, "orders/A-30", later)
    job = await _ended(replay, name, timeout=90)
    assert state_name(job.state) == "COMPLETED", job.reason_code
    calls = [c for c in replay.server.calls(tax) if c.key == "orders/A-30"]
    assert len(calls) == 1, "the retry used what was pinned"
    original = json.dumps(TAX_RECORD, sort_keys=True, separators=(",", ":")).encode()
    assert _pins(job)[1].sha256 == hashlib.sha256(original).hexdigest()


async def test_a_hanging_system_ends_the_job_unavailable_inside_its_deadline(
    replay: Replay, tmp_path: Path
) -> None:
    tax = _serve(replay, "tax", "orders/A-40", TAX_RECORD)
    replay.server.behave(tax, delay=5.0)  # every call outlasts its 2 s timeout
    started = datetime.now(UTC)
    name = await _packet(
        replay, tmp_path, PacketItem.reference("tax", "tax", "orders/A-40"), budget=8
    )
    job = await _ended(replay, name, timeout=40)
    assert (state_name(job.state), job.reason_code) == ("FAILED", "SOURCE_UNAVAILABLE")
    deadline = job.deadline.ToDatetime(tzinfo=UTC)
    assert abs((deadline - started).total_seconds() - 8) < 2
    assert job.update_time.ToDatetime(tzinfo=UTC) <= deadline, "ended inside its deadline"
    await asyncio.sleep(5.5)  # the server logs a call once it has answered it
    calls = replay.server.calls(tax)
    assert 1 <= len(calls) <= 6, f"calls stayed bounded: {len(calls)}"
    assert all(call.at <= deadline.timestamp() for call in calls), "no call after the deadline"
