"""The batch dispatcher's two pacing rules, kept free of I/O so they can be
reasoned about (and unit-tested) on their own.

``DeficitRoundRobin``: tenants with batches to dispatch are visited in
turn; each visit adds the tenant's quantum — proportional to its scheduling
weight, the heaviest tenant's being one page — to its deficit, and the
tenant may create that many children (whole ones; the fraction carries to
its next turn). A tenant with nothing left to dispatch loses its deficit, so
idling never banks credit. Over any stretch where tenants stay busy, their
children are created in the ratio of their weights.

``TokenBucket``: children per second across all tenants, with a burst of
one page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

__all__ = ["DeficitRoundRobin", "TokenBucket"]


class DeficitRoundRobin:
    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self._deficits: dict[str, float] = {}
        self._last: str = ""
        """The tenant visited last; the next round starts after it."""

    def order(self, weights: Mapping[str, int]) -> list[str]:
        """This round's tenants (those with work), starting after the last one served.

        Tenants that have no work left lose their deficit."""
        for tenant in list(self._deficits):
            if tenant not in weights:
                del self._deficits[tenant]
        tenants = sorted(weights)
        later = [tenant for tenant in tenants if tenant > self._last]
        return later + [tenant for tenant in tenants if tenant <= self._last]

    def grant(self, tenant: str, weights: Mapping[str, int]) -> int:
        """Add the tenant's quantum; how many children it may create now."""
        heaviest = max(weights.values())
        quantum = self._page_size * max(weights[tenant], 1) / max(heaviest, 1)
        # At most two pages banked: a tenant the rate held back gets its turn
        # first next round (``order``), not a burst.
        banked = min(self._deficits.get(tenant, 0.0) + quantum, 2.0 * self._page_size)
        self._deficits[tenant] = banked
        return int(banked)

    def spend(self, tenant: str, created: int, *, exhausted: bool) -> None:
        """Charge what was created, ending the tenant's turn; a tenant whose
        work ran out keeps no credit."""
        self._last = tenant
        if exhausted:
            self._deficits.pop(tenant, None)
        else:
            self._deficits[tenant] = self._deficits.get(tenant, 0.0) - created

    def forfeit(self, tenant: str) -> None:
        """A deferred tenant (over its quota) banks nothing while it waits."""
        self._last = tenant
        self._deficits.pop(tenant, None)


class TokenBucket:
    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = max(burst, 1.0)
        self._clock = clock
        self._tokens = self._burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now

    def available(self) -> int:
        self._refill()
        return int(self._tokens)

    def take(self, count: int) -> None:
        self._refill()
        self._tokens -= count

    def wait_seconds(self) -> float:
        """How long until one whole token is available."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self._rate)
