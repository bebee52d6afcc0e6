"""How a handler ends its part in one delivery: the one place messages are settled.

Every consumer of Quire's queues (the stage runner, audit's completion desk,
event recorder and dead-letter book) decides a ``Settlement`` and hands it
here:

    ACK      done; the message is removed
    TERM     never deliver again (forged, undecodable, or the job has ended)
    retry    deliver again after a delay (nak): the error's own ``retry_after``
             if it carries one, else capped exponential backoff with jitter
    defer    deliver again after the error's ``retry_after``, off the consumer:
             a scheduled copy is stored and the message acknowledged
             (``quire.workqueue.deferral``), so the wait holds none of the
             stage's ``max_ack_pending`` slots
    LEAVE    touch nothing: a newer delivery of the same task owns the message

One retry policy (``Backoff``, from the queue settings) serves them all. A
nak'ed message keeps its slot until it is delivered again, which is what a
sick dependency (a database, storage) should cost: the stage slows down. A
wait that is one job's own (a tenant's source system whose breaker is open)
must not hold a slot every other tenant needs; its error says so
(``waits_off_queue``) and the message is deferred instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

from nats.aio.msg import Msg

from quire.settings import QueueSettings
from quire.workqueue.deferral import Deferrals

__all__ = ["Action", "Settlement", "ACK", "TERM", "LEAVE", "Backoff", "settle"]


class Action(Enum):
    ACK = "ack"
    TERM = "term"
    RETRY = "retry"
    DEFER = "defer"
    LEAVE = "leave"


@dataclass(frozen=True)
class Settlement:
    action: Action
    delay_seconds: float = 0.0
    """How long before the message is delivered again (``RETRY``, ``DEFER``)."""


ACK = Settlement(Action.ACK)
TERM = Settlement(Action.TERM)
LEAVE = Settlement(Action.LEAVE)


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with jitter, honouring a delay the error asks for."""

    base_seconds: float
    cap_seconds: float

    @classmethod
    def of(cls, queue: QueueSettings) -> Backoff:
        return cls(base_seconds=queue.backoff_base_seconds, cap_seconds=queue.backoff_cap_seconds)

    def delay(self, attempt: int) -> float:
        """Seconds before delivery ``attempt + 1``: half to all of the capped ceiling."""
        exponent = min(max(attempt, 1) - 1, 30)
        ceiling = min(self.cap_seconds, self.base_seconds * 2**exponent)
        return ceiling * random.uniform(0.5, 1.0)

    def retry(self, attempt: int, error: BaseException | None = None) -> Settlement:
        """Deliver again later; after ``error``'s ``retry_after`` if it names
        one, off the consumer if the error ``waits_off_queue``."""
        asked = getattr(error, "retry_after", None)
        if isinstance(asked, int | float) and asked >= 0:
            off = getattr(error, "waits_off_queue", False) is True
            return Settlement(Action.DEFER if off else Action.RETRY, float(asked))
        return Settlement(Action.RETRY, self.delay(attempt))


async def settle(msg: Msg, settlement: Settlement, deferrals: Deferrals | None = None) -> None:
    """Apply ``settlement`` to ``msg``. ``DEFER`` needs ``deferrals`` (the
    consumer's stream allowing scheduled messages); without them, or when
    the scheduled copy cannot be stored, it is a nak with the same delay:
    the message keeps its slot but is never lost."""
    if settlement.action is Action.DEFER:
        if deferrals is not None and await deferrals.defer(msg, settlement.delay_seconds):
            await msg.ack()
        else:
            await msg.nak(delay=settlement.delay_seconds)
    elif settlement.action is Action.ACK:
        await msg.ack()
    elif settlement.action is Action.TERM:
        await msg.term()
    elif settlement.action is Action.RETRY:
        await msg.nak(delay=settlement.delay_seconds)
