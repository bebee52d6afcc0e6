"""Audit on the real stack: completion only with the evidence in, whatever
else is published; late events keep a job COMMITTING until they arrive."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import StackInfo
from quire.testing.consumers import resume_promptly
from quire.testing.pdfs import write_text_pdf
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


async def test_completion_waits_for_late_events(
    stack, client: AdmissionClient, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The signer signs once audit records the job at signing (it asks first);
    its own COMMITTING event then lags, and the job stays short of COMPLETED
    until the event is in the ledger."""
    info = StackInfo.read(stack.data_dir)
    nc = await connect_nats(stack.nats_url, "quire-test-events", **stack.nats_login())
    js = nc.jetstream()
    until = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sign = consumer_name("sign", "interactive")
    try:
        await js.pause_consumer(WORK_STREAM, sign, until)
        digest = (await client.upload(write_text_pdf(tmp_path / "late.pdf", ["late"]))).sha256
        job = await client.submit([PacketItem("d", digest)])
        for _ in range(300):  # audit records the hand-over to signing
            if state_name((await client.get_job(job.name)).state) == "SIGNING":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the job never reached SIGNING")
        await js.pause_consumer(EVENTS_STREAM, EVENTS_CONSUMER, until)
        await resume_promptly(js, WORK_STREAM, sign)
        async with grpc.aio.insecure_channel(info.endpoints["signer"]) as channel:
            signer = sgrpc.SignerServiceStub(channel)
            for _ in range(100):  # the signer finishes while audit hears nothing
                try:
                    signature = await signer.GetSignature(
                        spb.GetSignatureRequest(job=job.name),
                        metadata=bearer_metadata(info.operator_token()),
                    )
                    break
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the signer never signed")
        await asyncio.sleep(1.5)
        assert state_name((await client.get_job(job.name)).state) != "COMPLETED"
    finally:
        await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
        await resume_promptly(js, WORK_STREAM, sign)
        await nc.close()
    final = await client.wait(job.name, timeout=60)
    assert state_name(final.state) == "COMPLETED"
    assert final.output_digest == signature.artifact.sha256
