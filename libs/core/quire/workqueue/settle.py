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

One retry policy (``retry`` with the queue settings' ``Backoff``) serves them all. A
nak'ed message keeps its slot until it is delivered again, which is what a
sick dependency (a database, storage) should cost: the stage slows down. A
wait that is one job's own (a tenant's source system whose breaker is open)
must not hold a slot every other tenant needs; its error says so
(``waits_off_queue``) and the message is deferred instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nats.aio.msg import Msg

from quire.backoff import Backoff
from quire.errors import TransientError
from quire.workqueue.deferral import Deferrals

__all__ = ["Action", "Settlement", "ACK", "TERM", "LEAVE", "retry", "settle"]


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


def retry(backoff: Backoff, attempt: int, error: BaseException | None = None) -> Settlement:
    """Deliver again later: after ``error``'s ``retry_after`` if it is a
    ``TransientError`` that names one (off the consumer if it
    ``waits_off_queue``), else after ``backoff``'s wait for ``attempt``."""
    if isinstance(error, TransientError) and error.retry_after is not None:
        if error.retry_after >= 0:
            action = Action.DEFER if error.waits_off_queue else Action.RETRY
            return Settlement(action, float(error.retry_after))
    return Settlement(Action.RETRY, backoff.delay(attempt))


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
