"""How long to wait before trying again: the one formula every retry loop in
Quire waits by (the queues' redeliveries, the notifier's callbacks, the
validator's source fetches, the embedded stack's nats-server restarts).

The wait before try ``n + 1`` grows as ``base × 2^(n-1)``, never past the
cap, and is spread by jitter so that many callers failing together do not
come back together:

    NONE    exactly the ceiling (one supervisor restarting one process)
    EQUAL   uniform in [ceiling/2, ceiling] (a queue's redelivery: never
            much sooner than asked)
    FULL    uniform in [0, ceiling] (many independent callers of one
            receiver: the widest spread)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

__all__ = ["Backoff", "Jitter"]

_MAX_EXPONENT = 30
"""Past this the ceiling is the cap for any sane base; it keeps 2^n small."""


class Jitter(Enum):
    NONE = "none"
    EQUAL = "equal"
    FULL = "full"


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with jitter."""

    base_seconds: float
    cap_seconds: float
    jitter: Jitter = Jitter.EQUAL

    def ceiling(self, attempt: int) -> float:
        """The longest wait after failed try ``attempt`` (counted from 1;
        0 counts as 1)."""
        exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
        return min(self.cap_seconds, self.base_seconds * 2**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed try ``attempt``, jittered; ``rng``
        is the caller's own generator if it keeps one (tests seed it)."""
        ceiling = self.ceiling(attempt)
        if self.jitter is Jitter.NONE:
            return ceiling
        uniform = (rng or random).uniform
        if self.jitter is Jitter.EQUAL:
            return uniform(ceiling / 2, ceiling)
        return uniform(0.0, ceiling)
