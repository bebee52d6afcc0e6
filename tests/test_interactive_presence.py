"""Admission's batch dispatcher shrinks its window while interactive work is
in the pipeline; whether it is comes from the stages' interactive consumers
on a real JetStream."""

from __future__ import annotations

from quire.workqueue import WORK_STREAM, consumer_name, work_subject
from quire.workqueue.interactive import InteractivePresence


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_interactive_work_waiting_or_running_counts_and_is_held_after_it_ends(
    jetstream,  # type: ignore[no-untyped-def]
) -> None:
    clock = Clock()
    presence = InteractivePresence(
        jetstream,
        ("validate", "assemble", "sign"),
        hold_seconds=3.0,
        cache_seconds=0.0,
        clock=clock,
    )
    assert not await presence.present(), "empty queues: no interactive work"

    # Batch work does not count.
    await jetstream.publish(work_subject("assemble", "batch"), b"batch task")
    assert not await presence.present()

    # A waiting interactive message counts.
    await jetstream.publish(work_subject("assemble", "interactive"), b"interactive task")
    assert await presence.present()

    # Delivered and not yet acked (running) still counts.
    pull = await jetstream.pull_subscribe_bind(
        durable=consumer_name("assemble", "interactive"), stream=WORK_STREAM
    )
    (message,) = await pull.fetch(1, timeout=2)
    clock.now += 10
    assert await presence.present(), "in progress at the stage"

    # Once done, it is held for the hold time, then gone.
    await message.ack_sync()
    clock.now += 1
    assert await presence.present(), "held: a trickle counts between arrivals"
    clock.now += 2.5
    assert not await presence.present()


async def test_a_delivery_between_two_readings_counts_though_it_was_never_seen_waiting(
    jetstream,  # type: ignore[no-untyped-def]
) -> None:
    clock = Clock()
    presence = InteractivePresence(
        jetstream, ("validate",), hold_seconds=3.0, cache_seconds=0.0, clock=clock
    )
    assert not await presence.present()
    # A packet arrives, is taken and finished between two readings, as most
    # of a one-a-second trickle is at a stage that takes tens of milliseconds.
    await jetstream.publish(work_subject("validate", "interactive"), b"quick")
    pull = await jetstream.pull_subscribe_bind(
        durable=consumer_name("validate", "interactive"), stream=WORK_STREAM
    )
    (message,) = await pull.fetch(1, timeout=2)
    await message.ack_sync()
    clock.now += 0.5
    assert await presence.present(), "delivered since the last reading"
    clock.now += 3.5
    assert not await presence.present(), "nothing delivered since: gone after the hold"
