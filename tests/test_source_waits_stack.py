"""A job deferred for an unavailable source system shows what it waits for
(issue 19: a breaker's state "is visible in ... the job's status"), on a
private stack of the five services and the HTTP gateway with short breaker
settings and a real local source server: while the tenant's tax system
answers 503 the job stays VALIDATING and GetJob, WatchJob, the HTTP status
document and ``quire status`` name the system, its open breaker and when
the job is tried again; once the system recovers the job COMPLETES and
waits for nothing, and the validator holds no row for it.

A deferred job waits off the queue: while it waits it holds none of the
validate stage's JetStream slots (the consumer's ``max_ack_pending`` is the
stage's limit, kept low here), so another job of the tenant completes
meanwhile, and its deliveries before the wait still count in its attempts."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.jobs import job_id, state_name
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.testing.sourcerecords import TAX_RECORD
from quire.testing.sourceserver import SourceServer
from quire.tls import aio_channel
from quire.type import job_pb2
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc
from quire.workqueue import WORK_STREAM, consumer_name

pytestmark = pytest.mark.stack

OPEN_SECONDS = 3.0
STAGE_LIMIT = 3
INTERACTIVE_SLOTS = 2


@dataclass
class Rig:
    stack: Stack
    info: StackInfo
    server: SourceServer
    client: AdmissionClient
    secret: str
    tax: str
    """The tax system's name on the source server."""


@pytest.fixture(scope="module")
def waits_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, StackInfo]]:
    stack = Stack(
        tmp_path_factory.mktemp("waits") / "stack",
        gateway=True,
        env={
            "QUIRE_DRAIN_SECONDS": "3",
            "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
            "QUIRE_SOURCE_BREAKER_FAILURES": "2",
            "QUIRE_SOURCE_BREAKER_OPEN_SECONDS": str(OPEN_SECONDS),
            "QUIRE_JOB_BUDGET_RESERVE_SECONDS": "2",
            # A deferral is a delivery: room for several while the system is down.
            "QUIRE_MAX_DELIVER": "10",
            # Two interactive slots for the whole validate stage (and one batch).
            "QUIRE_VALIDATOR_STAGE_LIMIT": str(STAGE_LIMIT),
        },
    )
    info = stack.start()
    try:
        yield stack, info
    finally:
        stack.stop()


@pytest.fixture
async def rig(waits_stack: tuple[Stack, StackInfo]) -> AsyncIterator[Rig]:
    stack, info = waits_stack
    tag = uuid.uuid4().hex[:6]
    tax = f"tax-{tag}"
    with SourceServer() as server:
        server.put_json(tax, "records/NL-1", TAX_RECORD)
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            made = await admin.create_tenant(f"waits-{tag}")
            await admin.put_source_system(
                made.tenant.name,
                "tax",
                base_url=server.base_url(tax),
                timeout=2.0,
                schema="tax-record@1",
            )
        async with AdmissionClient(info.endpoints["admission"], made.secret) as client:
            yield Rig(stack, info, server, client, made.secret, tax)


async def _waiting(rig: Rig, name: str, timeout: float = 20.0) -> job_pb2.Job:
    """GetJob once it shows a wait whose next try is still to come."""
    deadline = time.monotonic() + timeout
    while True:
        job = await rig.client.get_job(name)
        if any(w.retry_time.ToDatetime().timestamp() > time.time() for w in job.source_waits):
            return job
        assert time.monotonic() < deadline, f"no source wait shown: {job}"
        assert state_name(job.state) in ("ACCEPTED", "VALIDATING"), job
        await asyncio.sleep(0.1)


async def _validator_waits(info: StackInfo, name: str) -> list[job_pb2.SourceWait]:
    """The validator's rows for the job, asked as an operator."""
    async with aio_channel(info.endpoints["validator"], None) as channel:
        reply = await vgrpc.ValidatorServiceStub(channel).ListSourceWaits(
            vpb.ListSourceWaitsRequest(job=name),
            metadata=bearer_metadata(info.operator_token()),
            timeout=5,
        )
    return list(reply.waits)


async def test_a_job_waiting_for_its_tax_system_shows_the_wait_until_the_system_recovers(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.server.behave(rig.tax, status=503)
    cover = write_text_pdf(tmp_path / "cover.pdf", ["Cover letter"])
    digest = (await rig.client.upload(cover)).sha256
    submitted = await rig.client.submit(
        [PacketItem("cover", digest), PacketItem.reference("tax", "tax", "records/NL-1")],
        budget=60,
    )
    name = submitted.name

    # -- while the system is down: GetJob ---------------------------------------
    job = await _waiting(rig, name)
    assert state_name(job.state) == "VALIDATING"
    (wait,) = job.source_waits
    assert wait.system == "tax"
    assert wait.breaker in ("open", "half-open")
    assert wait.reason_code == "SOURCE_UNAVAILABLE"
    since = wait.since.ToDatetime().timestamp()
    assert since <= time.time() < wait.retry_time.ToDatetime().timestamp()
    assert wait.retry_time.ToDatetime().timestamp() - time.time() <= OPEN_SECONDS * 1.5 + 1
    assert job.HasField("deadline") and not job.pins

    # ... WatchJob: the changes relayed now carry it (a wait is no change of its own)
    async for change in rig.client.watch(name, timeout=10):
        if state_name(change.state) == "VALIDATING":
            assert [w.system for w in change.source_waits] == ["tax"]
            break

    # ... the HTTP status document
    async with httpx.AsyncClient(base_url=rig.info.gateway_url, timeout=10) as http:
        reply = await http.get(
            f"/v1/pdf/job/get/{job_id(name)}", headers={"Authorization": f"Bearer {rig.secret}"}
        )
    assert reply.status_code == 200, reply.text
    document = reply.json()
    assert document["state"] == "VALIDATING"
    (shown,) = document["source_waits"]
    assert shown["system"] == "tax" and shown["breaker"] in ("open", "half-open")
    assert shown["reason_code"] == "SOURCE_UNAVAILABLE"
    assert shown["retry_time"].endswith("Z") and shown["since"] == wait.since.ToJsonString()

    # ... and `quire status`
    monkeypatch.setenv("QUIRE_TOKEN", rig.secret)
    status = run_quire(rig.stack.data_dir, "status", name)
    assert status.returncode == 0, status.stderr
    assert "VALIDATING" in status.stdout
    assert "waiting for source system tax: breaker " in status.stdout, status.stdout
    assert ", next try " in status.stdout

    # -- the system recovers: the job completes and waits for nothing ------------
    rig.server.behave(rig.tax)
    done = await rig.client.wait(name, timeout=30)
    assert state_name(done.state) == "COMPLETED", done
    assert not done.source_waits
    assert [pin.system for pin in done.pins] == ["tax"]
    final = await rig.client.get_job(name)
    assert not final.source_waits
    assert await _validator_waits(rig.info, name) == [], "its rows are deleted"
    status = run_quire(rig.stack.data_dir, "status", name)
    assert "waiting for source system" not in status.stdout


async def _held_validate_slots(stack: Stack) -> int:
    """Unacknowledged messages of the validate stage's interactive consumer."""
    nc = await connect_nats(stack.nats_url, "test-slots", **stack.nats_login())
    try:
        info = await nc.jetstream().consumer_info(
            WORK_STREAM, consumer_name("validate", "interactive")
        )
    finally:
        await nc.close()
    assert info.config.max_ack_pending == INTERACTIVE_SLOTS
    return int(info.num_ack_pending)


async def test_deferred_jobs_hold_no_slot_so_other_work_goes_on_while_they_wait(
    rig: Rig, tmp_path: Path
) -> None:
    rig.server.behave(rig.tax, status=503)
    cover = write_text_pdf(tmp_path / "cover.pdf", [f"Cover letter {uuid.uuid4().hex}"])
    digest = (await rig.client.upload(cover)).sha256
    waiting = [
        (
            await rig.client.submit(
                [PacketItem("cover", digest), PacketItem.reference("tax", "tax", "records/NL-1")],
                budget=90,
            )
        ).name
        for _ in range(INTERACTIVE_SLOTS + 1)
    ]
    for name in waiting:
        await _waiting(rig, name)

    # Every one of them waits for the tax system, and the stage holds none of
    # them: a nak with a delay would keep each one's slot until it came back.
    deadline = time.monotonic() + 20
    while True:
        jobs = [await rig.client.get_job(name) for name in waiting]
        if all(job.source_waits for job in jobs) and await _held_validate_slots(rig.stack) == 0:
            break
        assert time.monotonic() < deadline, "deferred jobs still hold the stage's slots"
        await asyncio.sleep(0.05)

    # So a job that needs no source system is not stuck behind them.
    other = write_text_pdf(tmp_path / "other.pdf", [f"Other {uuid.uuid4().hex}"])
    plain = await rig.client.submit([PacketItem("other", (await rig.client.upload(other)).sha256)])
    finished = await rig.client.wait(plain.name, timeout=20)
    assert state_name(finished.state) == "COMPLETED", finished
    still = [await rig.client.get_job(name) for name in waiting]
    assert all(state_name(job.state) == "VALIDATING" for job in still), still

    # The system recovers: every deferred job completes, once, and the
    # validate deliveries before each wait count in its attempts.
    rig.server.behave(rig.tax)
    for name in waiting:
        done = await rig.client.wait(name, timeout=60)
        assert state_name(done.state) == "COMPLETED", done
        assert done.deliveries > finished.deliveries, (done, finished)
    assert await _held_validate_slots(rig.stack) == 0
