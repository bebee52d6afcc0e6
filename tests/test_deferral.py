"""Deferred deliveries (``quire.workqueue.deferral``) on a real nats-server
with Quire's topology: a deferred task holds no ``max_ack_pending`` slot,
comes back on its own subject with the headers it came with (its producer's
signature, its trace context) no earlier than its delay, and carries its
delivery count, on one server and on a three-node cluster's replicated
stream; when the copy cannot be stored the delivery is nak'ed and nothing is
lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.runtime import connect_nats
from quire.settings import QueueSettings
from quire.stack.natscluster import NatsCluster
from quire.stack.natsserver import NatsServer
from quire.wire import SIGNATURE_HEADER
from quire.workqueue import WORK_STREAM, consumer_name, ensure_topology, work_subject
from quire.workqueue.deferral import (
    PRIOR_DELIVERIES_HEADER,
    Deferrals,
    deferred_subject,
    prior_deliveries,
)
from quire.workqueue.settle import Action, Settlement, retry, settle

CONSUMER = consumer_name("validate", "interactive")
SUBJECT = work_subject("validate", "interactive")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _publish_task(js: JetStreamContext, payload: bytes) -> None:
    await js.publish(
        SUBJECT,
        payload,
        headers={
            "Nats-Msg-Id": f"task-{payload.decode()}",
            SIGNATURE_HEADER: "admission:signature-bytes",
            "traceparent": TRACEPARENT,
        },
    )


async def _held(js: JetStreamContext, expected: int) -> int:
    """The consumer's unacknowledged messages, once they reach ``expected`` (an
    ack is not awaited by the server's reply) or after two seconds."""
    deadline = time.monotonic() + 2
    while True:
        held = int((await js.consumer_info(WORK_STREAM, CONSUMER)).num_ack_pending)
        if held == expected or time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.02)


async def test_a_deferred_task_holds_no_slot_and_comes_back_on_its_subject_with_its_headers(
    jetstream: JetStreamContext,
) -> None:
    js = jetstream
    await _publish_task(js, b"job-1")
    pull = await js.pull_subscribe_bind(CONSUMER, stream=WORK_STREAM)
    (first,) = await pull.fetch(1, timeout=5)
    assert await _held(js, 1) == 1

    deferred_at = time.monotonic()
    await settle(first, Settlement(Action.DEFER, 1.2), Deferrals(js))
    assert await _held(js, 0) == 0, "the wait holds no slot"

    (back,) = await pull.fetch(1, timeout=10)
    waited = time.monotonic() - deferred_at
    assert waited >= 1.0, f"came back after {waited:.2f}s, before its delay"
    assert back.subject == SUBJECT and back.data == b"job-1"
    assert back.headers is not None
    assert back.headers[SIGNATURE_HEADER] == "admission:signature-bytes"
    assert back.headers["traceparent"] == TRACEPARENT
    assert back.metadata.num_delivered == 1
    assert prior_deliveries(back.headers) == 1, "the delivery before the wait counts"

    # Deferred again: both deliveries so far are carried.
    await settle(back, Settlement(Action.DEFER, 0.5), Deferrals(js))
    (again,) = await pull.fetch(1, timeout=10)
    assert again.headers is not None and again.headers[PRIOR_DELIVERIES_HEADER] == "2"
    await again.ack()

    # Each copy fired once and its schedule is gone: nothing is left behind
    # (the ack and the schedule's removal land shortly after).
    deadline = time.monotonic() + 3
    while (state := (await js.stream_info(WORK_STREAM)).state).messages:
        assert time.monotonic() < deadline, state
        await asyncio.sleep(0.05)


async def test_a_copy_that_cannot_be_stored_is_a_nak_and_the_task_is_kept(
    jetstream: JetStreamContext, nats_server: NatsServer
) -> None:
    js = jetstream
    await _publish_task(js, b"job-2")
    pull = await js.pull_subscribe_bind(CONSUMER, stream=WORK_STREAM)
    (first,) = await pull.fetch(1, timeout=5)

    closed = await connect_nats(nats_server.url, "closed")
    await closed.close()
    await settle(first, Settlement(Action.DEFER, 0.5), Deferrals(closed.jetstream(timeout=1)))
    assert await _held(js, 1) == 1, "nak'ed: the slot is held, the task kept"
    (back,) = await pull.fetch(1, timeout=10)
    assert back.data == b"job-2" and back.metadata.num_delivered == 2
    assert prior_deliveries(back.headers) == 0
    await back.ack()


def test_only_a_wait_that_is_the_jobs_own_is_deferred() -> None:
    backoff = QueueSettings().backoff

    class Waits(TransientError):
        waits_off_queue = True

    own = Waits(ReasonCode.SOURCE_UNAVAILABLE, "waiting", retry_after=7.5)
    assert retry(backoff, 1, own) == Settlement(Action.DEFER, 7.5)
    shared = TransientError(ReasonCode.STORAGE_UNAVAILABLE, "storage", retry_after=2.0)
    assert retry(backoff, 1, shared) == Settlement(Action.RETRY, 2.0)
    # Without a delay of its own it is an ordinary retry with backoff.
    no_delay = Waits(ReasonCode.SOURCE_UNAVAILABLE, "waiting")
    assert retry(backoff, 1, no_delay).action is Action.RETRY


@pytest.mark.parametrize(
    ("headers", "expected"),
    [(None, 0), ({}, 0), ({PRIOR_DELIVERIES_HEADER: "3"}, 3)]
    + [({PRIOR_DELIVERIES_HEADER: bad}, 0) for bad in ("-4", "x", "")],
)
def test_prior_deliveries_are_read_defensively(
    headers: dict[str, str] | None, expected: int
) -> None:
    assert prior_deliveries(headers) == expected


def test_every_copy_of_one_task_is_one_schedule_under_its_stage_and_class() -> None:
    one = deferred_subject(SUBJECT, b"task")
    assert one == deferred_subject(SUBJECT, b"task")
    assert one.startswith("quire.work.deferred.validate.interactive.")
    assert one != deferred_subject(SUBJECT, b"another task")
    candidate = deferred_subject(f"{SUBJECT}.candidate", b"task")
    assert candidate.startswith("quire.work.deferred.validate.interactive.") and candidate != one


async def test_a_deferred_task_comes_back_on_a_three_node_cluster(tmp_path: Path) -> None:
    """Scheduled messages on replicated streams, as a cluster deploys them:
    an acknowledged delivery whose copy never fired would be a lost job."""
    cluster = NatsCluster(tmp_path / "cluster")
    cluster.start()
    try:
        nc = await connect_nats(cluster.url, "quire-test")
        try:
            # Replicated streams and consumers are agreed by the three nodes: on
            # a loaded two-core machine the first ones can take longer than 10 s.
            js = nc.jetstream(timeout=30)
            await ensure_topology(js, QueueSettings(replicas=3))
            await _publish_task(js, b"job-3")
            pull = await js.pull_subscribe_bind(CONSUMER, stream=WORK_STREAM)
            (first,) = await pull.fetch(1, timeout=10)
            await settle(first, Settlement(Action.DEFER, 1.0), Deferrals(js))
            assert await _held(js, 0) == 0
            (back,) = await pull.fetch(1, timeout=15)
            assert back.data == b"job-3" and prior_deliveries(back.headers) == 1
            await back.ack()
        finally:
            await nc.close()
    finally:
        cluster.stop()
