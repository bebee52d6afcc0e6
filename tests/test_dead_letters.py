"""Nothing is forgotten in a work queue: a worker that dies on every delivery
exhausts the message, JetStream's max-deliveries advisory reaches the
dead-letter office, the message moves to the dead-letter stream and the job
ends FAILED with RETRY_LIMIT_REACHED."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.type import queue_pb2
from quire.workqueue.topology import DEAD_STREAM

pytestmark = [pytest.mark.stack, pytest.mark.fault]


async def test_a_job_whose_worker_always_dies_ends_failed_via_the_dead_letter_office(
    tmp_path: Path,
) -> None:
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_FAULTS": "validator.before_commit:always",
            "QUIRE_MAX_DELIVER": "2",
            "QUIRE_ACK_WAIT_SECONDS": "1",
        },
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["doomed"]))).sha256
            job = await client.wait(
                (await client.submit([PacketItem("d", digest)])).name, timeout=90
            )
        assert (state_name(job.state), job.reason_code) == ("FAILED", "RETRY_LIMIT_REACHED")
        assert stack.restarts("validator") >= 2, "the worker really died on each delivery"
        nc = await connect_nats(stack.nats_url, "quire-test-dead", **stack.nats_login())
        try:
            js = nc.jetstream()
            dead = await js.get_last_msg(DEAD_STREAM, "quire.dead.validate")
            letter = queue_pb2.DeadLetter.FromString(dead.data)
            assert (letter.task.job, letter.stage) == (job.name, "validate")
            assert letter.reason_code == "RETRY_LIMIT_REACHED" and letter.deliveries == 2
        finally:
            await nc.close()
    finally:
        await asyncio.to_thread(stack.stop)
