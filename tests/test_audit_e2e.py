"""Audit on the real stack: completion only with the evidence in, whatever
else is published; late events keep a job short of COMPLETED until they
arrive, and the signer's own events ride on its commit task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from nats.aio.msg import Msg

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.consumers import pause, resume_promptly
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import EVENTS_STREAM, WORK_STREAM, Publisher, consumer_name, event_subject
from quire.workqueue.topology import EVENTS_CONSUMER

pytestmark = pytest.mark.stack


async def test_a_forged_completion_event_completes_nothing(
    stack, client: AdmissionClient, validate_queue, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    digest = (await client.upload(write_text_pdf(tmp_path / "f.pdf", ["forged"]))).sha256
    await validate_queue.pause()
    job = await client.submit([PacketItem("d", digest)])
    nc = await connect_nats(stack.nats_url, "impostor", **stack.nats_login())
    try:
        forged = EventFactory("signer", "impostor", "0").transition(
            queue_pb2.JobTask(job=job.name, tenant="whoever"),
            "COMMITTING",
            "COMPLETED",
            attempt=1,
            lease_token=0,
        )
        await Publisher(nc.jetstream()).publish(
            event_subject("signer"), forged, "forged-completion"
        )
        await asyncio.sleep(1.0)
        assert state_name((await client.get_job(job.name)).state) != "COMPLETED"
    finally:
        await nc.close()
        await validate_queue.resume()
    final = await client.wait(job.name, timeout=60)
    assert state_name(final.state) == "COMPLETED" and final.output_digest


@asynccontextmanager
async def _signing_with_audit_deaf(
    stack, client: AdmissionClient, tmp_path: Path
) -> AsyncIterator[tuple[str, list[str]]]:  # type: ignore[no-untyped-def]
    """A job at SIGNING; audit's events consumer paused while the signer
    works. Yields the job and, for the block's length, the subjects of the
    signer's event messages about it."""
    nc = await connect_nats(stack.nats_url, "quire-test-events", **stack.nats_login())
    js = nc.jetstream()
    sign = consumer_name("sign", "interactive")
    heard: list[str] = []
    try:
        await pause(js, WORK_STREAM, sign, minutes=5)
        digest = (await client.upload(write_text_pdf(tmp_path / "late.pdf", ["late"]))).sha256
        job = await client.submit([PacketItem("d", digest)])
        for _ in range(300):  # audit records the hand-over to signing
            if state_name((await client.get_job(job.name)).state) == "SIGNING":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the job never reached SIGNING")

        async def about_the_job(msg: Msg) -> None:
            carried = (
                queue_pb2.EventBatch.FromString(msg.data).events
                if msg.subject.endswith(".batch")
                else [queue_pb2.TransitionEvent.FromString(msg.data)]
            )
            if any(event.job == job.name for event in carried):
                heard.append(msg.subject)

        await nc.subscribe(event_subject("signer"), cb=about_the_job)
        await nc.subscribe(f"{event_subject('signer')}.>", cb=about_the_job)
        await pause(js, EVENTS_STREAM, EVENTS_CONSUMER, minutes=5)
        await resume_promptly(js, WORK_STREAM, sign)
        yield job.name, heard
    finally:
        await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
        await resume_promptly(js, WORK_STREAM, sign)
        await nc.close()


async def _signed(stack, job: str) -> spb.GetSignatureResponse:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(info.endpoints["signer"]) as channel:
        signer = sgrpc.SignerServiceStub(channel)
        for _ in range(100):  # the signer finishes while audit hears nothing
            try:
                return await signer.GetSignature(
                    spb.GetSignatureRequest(job=job),
                    metadata=bearer_metadata(info.operator_token()),
                )
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
    raise AssertionError("the signer never signed")


async def test_the_signers_events_ride_on_its_commit_task(
    stack, client: AdmissionClient, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Audit hears nothing on the events stream once the job is at SIGNING,
    yet it completes: the signer's COMMITTING event came with its commit task
    (one message), and is in the ledger once, before COMPLETED."""
    async with _signing_with_audit_deaf(stack, client, tmp_path) as (
        job,
        heard,
    ):
        signature = await _signed(stack, job)
        final = await client.wait(job, timeout=30)
        assert state_name(final.state) == "COMPLETED", "completed with the events consumer paused"
        assert final.output_digest == signature.artifact.sha256
        assert heard == [], "the signer sent no event message of its own"
    info = StackInfo.read(stack.data_dir)
    async with aio_channel(info.endpoints["audit"], None) as channel:
        reply = await agrpc.AuditServiceStub(channel).ListJobEvents(
            apb.ListJobEventsRequest(job=job, page_size=1000),
            metadata=bearer_metadata(info.operator_token()),
        )
    history = [state_name(entry.event.to_state) for entry in reply.entries]
    assert history.count("COMMITTING") == 1, "recorded once"
    assert history[-2:] == ["COMMITTING", "COMPLETED"]


@pytest.fixture(scope="module")
def events_on_their_stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A stack whose signer sends its events on the events stream, as a
    release before ``events_with_commit`` did (QUIRE_EVENTS_WITH_COMMIT=0)."""
    running = Stack(
        tmp_path_factory.mktemp("events-on-stream"),
        service_env={"signer": {"QUIRE_EVENTS_WITH_COMMIT": "0"}},
    )
    running.start()
    yield running
    running.stop()


async def test_completion_waits_for_late_events(events_on_their_stream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The signer signs once audit records the job at signing (it asks first);
    its own COMMITTING event, sent on the events stream, then lags, and the
    job stays short of COMPLETED until the event is in the ledger."""
    stack = events_on_their_stream
    info = StackInfo.read(stack.data_dir)
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        async with _signing_with_audit_deaf(stack, client, tmp_path) as (
            job,
            heard,
        ):
            signature = await _signed(stack, job)
            await asyncio.sleep(1.5)
            assert state_name((await client.get_job(job)).state) != "COMPLETED"
            assert heard == ["quire.events.signer"], "the event went on the events stream"
        final = await client.wait(job, timeout=60)
    assert state_name(final.state) == "COMPLETED"
    assert final.output_digest == signature.artifact.sha256
