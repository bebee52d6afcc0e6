"""How a handler ends its part in one delivery: the one place messages are settled.

Every consumer of Quire's queues (the stage runner, audit's completion desk,
event recorder and dead-letter book) decides a ``Settlement`` and hands it
here:

    ACK      done; the message is removed
    TERM     never deliver again (forged, undecodable, or the job has ended)
    retry    deliver again after a delay (nak): the error's own ``retry_after``
             if it carries one, else capped exponential backoff with jitter
    LEAVE    touch nothing: a newer delivery of the same task owns the message

One retry policy (``Backoff``, from the queue settings) serves them all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

from nats.aio.msg import Msg

from quire.settings import QueueSettings

__all__ = ["Action", "Settlement", "ACK", "TERM", "LEAVE", "Backoff", "settle"]


class Action(Enum):
    ACK = "ack"
    TERM = "term"
    RETRY = "retry"
    LEAVE = "leave"


@dataclass(frozen=True)
class Settlement:
    action: Action
    delay_seconds: float = 0.0
    """How long JetStream waits before delivering again (``RETRY`` only)."""


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
        """Deliver again later; after ``error``'s ``retry_after`` if it names one."""
        asked = getattr(error, "retry_after", None)
        if isinstance(asked, int | float) and asked >= 0:
            return Settlement(Action.RETRY, float(asked))
        return Settlement(Action.RETRY, self.delay(attempt))


async def settle(msg: Msg, settlement: Settlement) -> None:
    """Apply ``settlement`` to ``msg``."""
    if settlement.action is Action.ACK:
        await msg.ack()
    elif settlement.action is Action.TERM:
        await msg.term()
    elif settlement.action is Action.RETRY:
        await msg.nak(delay=settlement.delay_seconds)
