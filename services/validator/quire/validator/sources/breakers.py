"""A circuit breaker per tenant and source system, so that one system slowing
down or failing does not make every worker call it, time out and retry in
lockstep.

The state machine is ``purgatory``'s (closed → open after ``failures``
consecutive failed calls → after ``open_seconds`` a trial → closed on its
success, open again on its failure), kept in memory per process. Around it:

- while half-open, ONE trial call per breaker at a time: purgatory would let
  every caller through, so callers other than the trial are refused as if
  it were open, told to wait half the open period (``Permit.wait_seconds``):
  a failed trial opens the breaker for a whole period again, a good one
  closes it, and either way a caller sent back at once would only use up
  one of its job's deliveries while the trial is still under way;
- a refusal says how long until the breaker lets a trial through
  (``opened_at + open_seconds - now``), which the job's deferral is built on;
- a call's outcome is recorded only once it is known: a cancelled call (the
  process draining) is no failure and no success, and a trial that ends so
  frees the trial slot. An outcome that arrives after the breaker opened
  meanwhile (a slow call that started while it was closed) changes nothing.

Only failures that may pass count (``errors.SourceCallFailed``): a 404, an
oversized body or a refused credential show the system answering, and
count as successes.

``quire_source_breaker_state{system}`` shows, per system id, the worst state
among the tenants' breakers of that id (0 closed, 1 half-open, 2 open), as
of the last call, trial or outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from purgatory import AsyncCircuitBreakerFactory
from purgatory.domain.model import CLOSED, OPENED, OpenedState
from purgatory.service._async.circuitbreaker import AsyncCircuitBreaker

__all__ = ["BreakerState", "Permit", "SourceBreakers"]


class BreakerState(IntEnum):
    """A breaker as callers see it: CLOSED lets calls through, HALF_OPEN one trial,
    OPEN none. Ordered best to worst; the value is the breaker-state gauge's."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(frozen=True)
class Permit:
    """Whether one call to a system may go now."""

    circuit: str
    system: str
    allowed: bool
    trial: bool = False
    """The one call let through a half-open breaker."""
    wait_seconds: float = 0.0
    """Refused: how long until the breaker lets a trial through (half the
    open period while another caller's trial is under way)."""


class _Failed(Exception):
    """Raised inside purgatory's context to record a failed call."""


class SourceBreakers:
    """The process's circuit breakers, one per tenant and source system, made on
    first use; ``on_state`` hears each system's worst state across tenants."""

    def __init__(
        self,
        *,
        failures: int,
        open_seconds: float,
        on_state: Callable[[str, BreakerState], None] | None = None,
    ) -> None:
        self._factory = AsyncCircuitBreakerFactory(
            default_threshold=failures, default_ttl=open_seconds
        )
        self._breakers: dict[str, AsyncCircuitBreaker] = {}
        self._system_of: dict[str, str] = {}
        self._trials: set[str] = set()
        self._trial_wait = open_seconds / 2
        self._on_state = on_state

    async def _breaker(self, tenant: str, system: str) -> AsyncCircuitBreaker:
        circuit = f"{tenant}/{system}"
        breaker = self._breakers.get(circuit)
        if breaker is None:
            breaker = await self._factory.get_breaker(circuit)
            self._breakers[circuit] = breaker
            self._system_of[circuit] = system
            self._publish(system)
        return breaker

    def _state_of(self, breaker: AsyncCircuitBreaker) -> BreakerState:
        context = breaker.context
        if context.state == CLOSED:
            return BreakerState.CLOSED
        if context.state == OPENED and self._wait(breaker) >= 0:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    @staticmethod
    def _wait(breaker: AsyncCircuitBreaker) -> float:
        context = breaker.context
        return (context.opened_at or 0.0) + context.ttl - time.time()

    def state(self, tenant: str, system: str) -> BreakerState:
        """The breaker's state now (CLOSED for one never used)."""
        breaker = self._breakers.get(f"{tenant}/{system}")
        return BreakerState.CLOSED if breaker is None else self._state_of(breaker)

    def wait_seconds(self, tenant: str, system: str) -> float:
        """Seconds until the breaker lets a trial through (0 unless it is open)."""
        breaker = self._breakers.get(f"{tenant}/{system}")
        if breaker is None or self._state_of(breaker) is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._wait(breaker))

    def _publish(self, system: str) -> None:
        if self._on_state is None:
            return
        worst = max(
            (
                self._state_of(breaker)
                for circuit, breaker in self._breakers.items()
                if self._system_of[circuit] == system
            ),
            default=BreakerState.CLOSED,
        )
        self._on_state(system, worst)

    async def admit(self, tenant: str, system: str) -> Permit:
        """Whether a call to ``system`` for ``tenant`` may go now. An allowed
        permit must end in ``record`` or ``release``."""
        breaker = await self._breaker(tenant, system)
        circuit = breaker.context.name
        state = self._state_of(breaker)
        if state is BreakerState.CLOSED:
            return Permit(circuit, system, True)
        if state is BreakerState.OPEN:
            return Permit(circuit, system, False, wait_seconds=max(0.0, self._wait(breaker)))
        if circuit in self._trials:
            return Permit(circuit, system, False, wait_seconds=self._trial_wait)
        self._trials.add(circuit)
        self._publish(system)
        return Permit(circuit, system, True, trial=True)

    async def record(self, permit: Permit, *, failed: bool) -> None:
        """The outcome of a permitted call."""
        try:
            breaker = self._breakers[permit.circuit]
            try:
                async with breaker:
                    if failed:
                        raise _Failed
            except _Failed:
                pass
            except OpenedState:
                pass  # opened by other calls while this one ran: nothing to add
        finally:
            self.release(permit)

    def release(self, permit: Permit) -> None:
        """A permitted call that ended without an outcome (cancelled)."""
        if permit.trial:
            self._trials.discard(permit.circuit)
        self._publish(permit.system)
