"""What fetching sources shows in metrics (``quire.metrics.CATALOGUE``):
calls by system and outcome, each call's time, each system's breaker state
and the deliveries deferred for it. ``system`` is the registered system id
(bounded, chosen by an operator), never a record's key."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from quire.metrics import ServiceMetrics, add_source_fetch
from quire.validator.sources.breakers import BreakerState

__all__ = ["SourceMeter"]


class SourceMeter:
    """Counts fetching in the service's metrics; without them, it counts nothing."""

    def __init__(self, metrics: ServiceMetrics | None = None) -> None:
        self._calls: Counter | None = None
        self._seconds: Histogram | None = None
        self._state: Gauge | None = None
        self._deferrals: Counter | None = None
        if metrics is not None:
            self._calls = metrics.counter("quire_source_fetches_total")
            self._seconds = metrics.histogram("quire_source_fetch_seconds")
            self._state = metrics.gauge("quire_source_breaker_state")
            self._deferrals = metrics.counter("quire_source_deferrals_total")

    def call(self, system: str, outcome: str, seconds: float | None = None) -> None:
        """One call (or, ``breaker_open``, one not made). Its time also goes
        to the current delivery's timings, as this system's share of ``fetch``."""
        if self._calls is not None:
            self._calls.labels(system=system, outcome=outcome).inc()
        if seconds is None:
            return
        if self._seconds is not None:
            self._seconds.labels(system=system).observe(seconds)
        add_source_fetch(system, seconds)

    def breaker(self, system: str, state: BreakerState) -> None:
        if self._state is not None:
            self._state.labels(system=system).set(int(state))

    def deferred(self, system: str) -> None:
        if self._deferrals is not None:
            self._deferrals.labels(system=system).inc()
