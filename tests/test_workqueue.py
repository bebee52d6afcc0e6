"""The work-queue worker: bounded concurrency, heartbeats, drain, idempotent topology."""

from __future__ import annotations

import asyncio
import json

from nats.js import JetStreamContext

from quire.settings import QueueSettings
from quire.workqueue import (
    WORK_STREAM,
    WorkQueueWorker,
    consumer_name,
    ensure_topology,
    work_subject,
)


class _Tracked:
    """A handler that takes 50 ms a message, noting the most run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.done: list[bytes] = []

    async def handle(self, msg) -> None:  # type: ignore[no-untyped-def]
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        self.done.append(msg.data)
        await msg.ack()


async def test_a_worker_never_runs_more_than_its_capacity(jetstream: JetStreamContext) -> None:
    tracked = _Tracked()
    done = tracked.done
    handler = tracked.handle
    for index in range(12):
        await jetstream.publish(work_subject("validate", "interactive"), str(index).encode())
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("validate", "interactive"): 3},
        handler=handler,
        ack_wait_seconds=5,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    for _ in range(100):
        if len(done) == 12:
            break
        await asyncio.sleep(0.05)
    await worker.drain()
    assert sorted(done, key=int) == [str(i).encode() for i in range(12)]
    assert tracked.peak == 3


async def test_heartbeats_keep_a_long_job_leased(jetstream: JetStreamContext) -> None:
    deliveries = []

    async def slow(msg) -> None:  # type: ignore[no-untyped-def]
        deliveries.append(msg.metadata.num_delivered)
        await asyncio.sleep(2.5)  # longer than the 1 s ack wait
        await msg.ack()

    await jetstream.publish(work_subject("sign", "interactive"), b"job")
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("sign", "interactive"): 2},
        handler=slow,
        ack_wait_seconds=1.0,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    await asyncio.sleep(3.2)
    await worker.drain()
    assert deliveries == [1], "no redelivery while the worker heartbeats"


async def test_drain_waits_for_in_flight_work(jetstream: JetStreamContext) -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    async def handler(msg) -> None:  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.3)
        await msg.ack()
        finished.set()

    await jetstream.publish(work_subject("assemble", "batch"), b"job")
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("assemble", "batch"): 1},
        handler=handler,
        ack_wait_seconds=5,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    await asyncio.wait_for(started.wait(), timeout=30)  # the work is in flight
    await worker.drain()
    assert finished.is_set()


async def test_halt_stops_pulling_and_leaves_stuck_work_to_be_redelivered(
    jetstream: JetStreamContext,
) -> None:
    """What closes a stage whose drain ran out of time: no more pulls, the
    stuck handler cancelled, its message unacknowledged, so it comes again."""
    started = asyncio.Event()
    cancelled = asyncio.Event()
    seen: list[int] = []

    async def stuck(msg) -> None:  # type: ignore[no-untyped-def]
        seen.append(msg.metadata.num_delivered)
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await jetstream.publish(work_subject("sign", "batch"), b"stuck")
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("sign", "batch"): 2},
        handler=stuck,
        ack_wait_seconds=1.0,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(worker.halt(), 5)
    assert cancelled.is_set()
    await jetstream.publish(work_subject("sign", "batch"), b"later")
    await asyncio.sleep(1.5)
    assert seen == [1], "a halted worker pulls nothing more"
    again = await jetstream.pull_subscribe_bind(
        durable=consumer_name("sign", "batch"), stream=WORK_STREAM
    )
    messages = await again.fetch(batch=2, timeout=5)
    assert sorted(m.data for m in messages) == [b"later", b"stuck"], "nothing was lost"
    for message in messages:
        await message.ack()


async def test_topology_can_be_ensured_again(
    jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    await ensure_topology(jetstream, fast_queue)
    info = await jetstream.consumer_info(WORK_STREAM, consumer_name("validate", "batch"))
    assert info.config.filter_subject == work_subject("validate", "batch")


async def test_a_handler_that_steps_aside_lets_ordinary_work_through(
    jetstream: JetStreamContext,
) -> None:
    """One slot; the first message is slow and steps aside (as a quarantined
    job does): the others are pulled and finish while it still runs."""
    from quire.workqueue.worker import step_aside

    finished: list[bytes] = []
    slow_done = asyncio.Event()

    async def handler(msg) -> None:  # type: ignore[no-untyped-def]
        if msg.data == b"slow":
            assert step_aside() is True
            assert step_aside() is True, "a second call gives nothing back twice"
            await asyncio.sleep(1.5)
            slow_done.set()
        finished.append(msg.data)
        await msg.ack()

    await jetstream.publish(work_subject("validate", "interactive"), b"slow")
    for index in range(3):
        await jetstream.publish(work_subject("validate", "interactive"), b"%d" % index)
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("validate", "interactive"): 1},
        handler=handler,
        ack_wait_seconds=1.0,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    await asyncio.wait_for(slow_done.wait(), timeout=10)
    await worker.drain()
    assert finished[:3] == [b"0", b"1", b"2"], "ordinary work ran while the slow one waited"
    assert finished[3:] == [b"slow"]
    assert step_aside() is False, "outside a handler there is no slot to give back"


async def test_waiting_messages_are_pulled_as_groups_each_handled_once_within_capacity(
    jetstream: JetStreamContext,
) -> None:
    """Messages known to wait are taken several per pull request, never more
    than the free slots; each is still its own delivery, handled once."""
    nc = jetstream._nc  # noqa: SLF001 - the test's own connection, to count pull requests
    consumer = consumer_name("assemble", "interactive")
    pulls: list[int] = []

    async def count(msg) -> None:  # type: ignore[no-untyped-def]
        pulls.append(int(json.loads(msg.data or b"{}").get("batch", 1)))

    await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{WORK_STREAM}.{consumer}", cb=count)
    tracked = _Tracked()
    done = tracked.done
    handler = tracked.handle
    for index in range(40):
        await jetstream.publish(work_subject("assemble", "interactive"), str(index).encode())
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer: 8},
        handler=handler,
        ack_wait_seconds=5,
        fetch_timeout_seconds=0.5,
    )
    worker.start()
    for _ in range(200):
        if len(done) == 40:
            break
        await asyncio.sleep(0.05)
    await worker.drain()
    assert sorted(done, key=int) == [str(i).encode() for i in range(40)], "each once"
    assert tracked.peak <= 8
    assert max(pulls) > 1, "some pull asked for a group"
    assert len(pulls) < 40, f"{len(pulls)} pull requests for 40 messages"
    # An ack is sent without waiting for the server: the last one may still
    # be on its way when the handler has returned.
    for _ in range(100):
        info = await jetstream.consumer_info(WORK_STREAM, consumer)
        if info.num_ack_pending == 0:
            break
        await asyncio.sleep(0.02)
    assert info.num_pending == 0 and info.num_ack_pending == 0
