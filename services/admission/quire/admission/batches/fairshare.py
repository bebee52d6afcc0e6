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
    """Whose turn it is to dispatch and how many children that turn may make;
    a turn the capacity cut short goes on first next tick."""

    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self._deficits: dict[str, float] = {}
        self._last: str = ""
        """The tenant whose turn ended last; the next round starts after it."""
        self._current: str = ""
        """A tenant whose turn the capacity cut short: it goes on first next
        tick, on the credit it has, without a new quantum."""

    def order(self, weights: Mapping[str, int]) -> list[str]:
        """This round's tenants (those with work): a turn cut short first, then
        the rest starting after the last one served.

        Tenants that have no work left lose their deficit."""
        for tenant in list(self._deficits):
            if tenant not in weights:
                del self._deficits[tenant]
        if self._current not in weights:
            self._current = ""
        tenants = sorted(weights)
        later = [tenant for tenant in tenants if tenant > self._last]
        rotation = later + [tenant for tenant in tenants if tenant <= self._last]
        if self._current:
            rotation.remove(self._current)
            rotation.insert(0, self._current)
        return rotation

    def grant(self, tenant: str, weights: Mapping[str, int]) -> int:
        """How many children the tenant may create on this turn: its credit,
        plus a quantum when the turn is a new one."""
        if tenant == self._current:
            return int(self._deficits.get(tenant, 0.0))
        heaviest = max(weights.values())
        quantum = self._page_size * max(weights[tenant], 1) / max(heaviest, 1)
        # At most two pages banked, so a tenant never comes back with a burst.
        banked = min(self._deficits.get(tenant, 0.0) + quantum, 2.0 * self._page_size)
        self._deficits[tenant] = banked
        return int(banked)

    def spend(self, tenant: str, created: int, *, exhausted: bool, cut_short: bool = False) -> None:
        """Charge what was created. A tenant whose work ran out keeps no
        credit; one that the window or the rate stopped while it still had
        credit keeps its turn (``cut_short``), so a full window that frees a
        few slots a tick still shares them by weight, not by turns."""
        left = self._deficits.get(tenant, 0.0) - created
        if exhausted:
            self._deficits.pop(tenant, None)
        else:
            self._deficits[tenant] = left
        if cut_short and not exhausted and left >= 1.0:
            self._current = tenant
        else:
            self._current = ""
            self._last = tenant

    def forfeit(self, tenant: str) -> None:
        """A deferred tenant (over its quota) banks nothing while it waits."""
        if self._current == tenant:
            self._current = ""
        self._last = tenant
        self._deficits.pop(tenant, None)


class TokenBucket:
    """Children per second across all tenants: ``rate`` tokens a second, at most
    ``burst`` held at once."""

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
