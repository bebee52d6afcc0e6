"""Every metric Quire exports, in Prometheus form, declared once.

Each process builds one :class:`ServiceMetrics` in ``main`` (its own
registry, not the library's global one) and passes it to what it measures;
``serve_metrics`` exposes the registry as ``/metrics`` on the service's
metrics address.

Names and units follow Prometheus conventions (``_total`` counters,
``_seconds`` and ``_bytes`` units). Labels stay low-cardinality: ``stage``,
``class`` (the priority class: interactive or batch), ``phase``, ``reason``
(a stable reason code), ``state``, ``outcome``, ``key_version``, the
gateway's ``route`` (the route's template, ``/v1/pdf/job/get/{job_id}``),
``method`` and ``status_class``, and ``system`` (a source system's id, as an
operator registered it: never a record's key). Never a job id, a tenant, a
file name or anything read from a document.

``CATALOGUE`` lists every family with its type and labels; the dashboard and
alert tests check their queries against it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from opentelemetry import trace
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from quire.pipeline import SERVICES, TEMP_SPACE_SERVICES, WORKER_SERVICES
from quire.telemetry import child_span

__all__ = [
    "Family",
    "CATALOGUE",
    "ServiceMetrics",
    "StageMeter",
    "PHASES",
    "metric_names",
    "phase",
    "delivery_timings",
    "add_source_fetch",
    "FETCH_PHASE",
    "count_source_read",
    "serve_metrics",
    "transaction_counter",
]

log = logging.getLogger(__name__)

PHASES = ("queue_wait", "fetch", "validate", "render", "sign", "store", "sandbox_wait")
"""The phases a stage's duration is split into (``quire_stage_phase_seconds``);
``sandbox_wait``, the wait for a sandbox worker in the job's lane, is part of
the phase that called the sandbox (validate, render, sign), shown on its own."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_DELIVERY_BUCKETS = (1, 2, 3, 4, 5, 8, 12, 20)


@dataclass(frozen=True)
class Family:
    """One metric family: its full exported name, type, labels and meaning."""

    name: str
    kind: str  # counter | gauge | histogram
    labels: tuple[str, ...]
    help: str
    exported_by: tuple[str, ...]


# Label values of ``stage`` are the pipeline's stage names (validate, assemble,
# sign), as in the queue subjects; admission's own reads are ``admit``.
CATALOGUE: tuple[Family, ...] = (
    Family(
        "quire_jobs_accepted_total",
        "counter",
        ("class",),
        "Jobs admission accepted (a new job, not a repeated request).",
        ("admission",),
    ),
    Family(
        "quire_jobs_refused_total",
        "counter",
        ("reason",),
        "Submissions admission refused, by reason code.",
        ("admission",),
    ),
    Family(
        "quire_uploads_refused_total",
        "counter",
        ("reason",),
        "Uploads admission's gate refused or closed, by reason code (an idle"
        " stream closed at the limit counts as UPLOAD_IDLE_TIMEOUT).",
        ("admission",),
    ),
    Family(
        "quire_jobs_completed_total",
        "counter",
        ("class",),
        "Jobs audit marked COMPLETED.",
        ("audit",),
    ),
    Family(
        "quire_jobs_rejected_total",
        "counter",
        ("reason",),
        "Jobs that ended REJECTED, by reason code.",
        ("audit",),
    ),
    Family(
        "quire_jobs_failed_total",
        "counter",
        ("reason",),
        "Jobs that ended FAILED (including dead-lettered), by reason code.",
        ("audit",),
    ),
    Family(
        "quire_queue_pending_messages",
        "gauge",
        ("stage", "class"),
        "Messages waiting on a stage's queue, not yet delivered.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_queue_oldest_ready_age_seconds",
        "gauge",
        ("stage", "class"),
        "Age of the oldest message waiting on a stage's queue (0 when none waits).",
        WORKER_SERVICES,
    ),
    Family(
        "quire_queue_candidate_pending_messages",
        "gauge",
        ("stage",),
        "Messages waiting on a stage's candidate-track consumer (a rollout's"
        " canary, held to its concurrency cap), not yet delivered.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_queue_candidate_oldest_ready_age_seconds",
        "gauge",
        ("stage", "class"),
        "Age of the oldest message waiting on a stage's candidate-track consumer"
        " (0 when none waits).",
        WORKER_SERVICES,
    ),
    Family(
        "quire_queue_age_budget_seconds",
        "gauge",
        ("stage", "class"),
        "The queue-age budget admission sheds new work against.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_in_flight",
        "gauge",
        ("stage",),
        "Deliveries this stage process is working on (leases held).",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_concurrency_limit",
        "gauge",
        ("stage",),
        "How many deliveries this stage process may work on at once.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_phase_seconds",
        "histogram",
        ("stage", "class", "phase"),
        "Time a stage spent in each phase of a delivery.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_outcomes_total",
        "counter",
        ("stage", "class", "outcome"),
        "Deliveries a stage settled: done (handed on), ended (the job ended here), retry, stale (a newer delivery owns it) or refused (not a valid task).",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_retries_total",
        "counter",
        ("stage", "class"),
        "Deliveries a stage will retry (negatively acknowledged with a delay).",
        WORKER_SERVICES,
    ),
    Family(
        "quire_stage_deliveries",
        "histogram",
        ("stage", "class"),
        "The delivery attempt at which a stage committed a job's outcome.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_dead_letters",
        "gauge",
        ("stage",),
        "Dead letters waiting for an operator.",
        ("audit",),
    ),
    Family(
        "quire_temp_space_used_bytes",
        "gauge",
        ("stage",),
        "Temporary space this stage holds under the blob store.",
        TEMP_SPACE_SERVICES,
    ),
    Family(
        "quire_temp_space_budget_bytes",
        "gauge",
        ("stage",),
        "Temporary space this stage may hold before it stops pulling work.",
        TEMP_SPACE_SERVICES,
    ),
    Family(
        "quire_audit_lag_seconds",
        "histogram",
        ("producer",),
        "Time from an event (by the service that produced it) to its ledger entry.",
        ("audit",),
    ),
    Family(
        "quire_audit_checkpoints_refused_total",
        "counter",
        (),
        "Checkpoints not signed because a tenant's stored ledger no longer extends"
        " the last signed one (a rewrite), or not cosigned because the witness"
        " refused them.",
        ("audit",),
    ),
    Family(
        "quire_audit_events_refused_total",
        "counter",
        ("kind",),
        "Events kept out of the ledger as findings, by why (UNKNOWN_JOB, OTHER_TENANT,"
        " OUT_OF_TURN, AFTER_END, LATE).",
        ("audit",),
    ),
    Family(
        "quire_source_read_bytes_total",
        "counter",
        ("stage",),
        "Source bytes a stage read from the blob store.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_sandbox_worker_restarts_total",
        "counter",
        ("stage",),
        "Sandbox worker processes replaced after they died or were killed.",
        WORKER_SERVICES,
    ),
    Family(
        "quire_authority_confirmations_total",
        "counter",
        ("stage", "by"),
        "Tasks a stage confirmed with audit before acting, by how: audit's pushed"
        " word (word) or a GetJob call (asked).",
        ("assembler", "signer"),
    ),
    Family(
        "quire_db_transactions_total",
        "counter",
        ("kind",),
        "Database transactions this process ran, by kind (write: committed with an"
        " fsync on SQLite; read: no write lock).",
        SERVICES,
    ),
    Family(
        "quire_signatures_total",
        "counter",
        ("key_version",),
        "Packets signed, by signing key version.",
        ("signer",),
    ),
    Family(
        "quire_batch_children_created_total",
        "counter",
        (),
        "Batch packets the dispatcher turned into jobs.",
        ("admission",),
    ),
    Family(
        "quire_batch_in_flight",
        "gauge",
        (),
        "Batch children created and not yet known ended, all tenants together (the dispatcher's last tick).",
        ("admission",),
    ),
    Family(
        "quire_batch_window",
        "gauge",
        (),
        "The dispatcher's window at its last tick: the full one, or the shared one while interactive work is in the pipeline.",
        ("admission",),
    ),
    Family(
        "quire_batch_deferrals_total",
        "counter",
        ("reason",),
        "Dispatcher ticks or tenants' turns that made nothing and waited: window (full), queue_age (the batch queue over its budget), quota (a tenant at its outstanding-job quota), rate.",
        ("admission",),
    ),
    Family(
        "quire_notification_attempts_total",
        "counter",
        ("outcome",),
        "Completion-notification delivery attempts by outcome: DELIVERED, REFUSED, TIMEOUT, UNREACHABLE; ABANDONED counts notifications given up.",
        ("admission",),
    ),
    Family(
        "quire_source_fetches_total",
        "counter",
        ("system", "outcome"),
        "Calls to source systems for sources named by reference, by source system id and outcome: ok, not_found, too_large, type_mismatch, refused, timeout, error, breaker_open (no call made: the system's circuit breaker is open).",
        ("validator",),
    ),
    Family(
        "quire_source_fetch_seconds",
        "histogram",
        ("system",),
        "Time one call to a source system took, whatever its outcome, by source system id.",
        ("validator",),
    ),
    Family(
        "quire_source_breaker_state",
        "gauge",
        ("system",),
        "A source system's circuit breaker: 0 closed, 1 half-open, 2 open (the worst among the tenants that registered that system id).",
        ("validator",),
    ),
    Family(
        "quire_source_deferrals_total",
        "counter",
        ("system",),
        "Deliveries the validator deferred (negatively acknowledged with a delay) to wait for a source system.",
        ("validator",),
    ),
    Family(
        "quire_http_requests_total",
        "counter",
        ("route", "method", "status_class"),
        "HTTP requests the gateway answered, by route template (never the path itself), method and status class (2xx, 4xx, 5xx).",
        ("gateway",),
    ),
    Family(
        "quire_http_request_duration_seconds",
        "histogram",
        ("route", "method", "status_class"),
        "Time the gateway took to answer an HTTP request, to the last byte of a streamed body.",
        ("gateway",),
    ),
)


def metric_names() -> set[str]:
    """Every series name a scrape may show (histograms add their suffixes)."""
    names: set[str] = set()
    for family in CATALOGUE:
        if family.kind == "histogram":
            base = family.name
            names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
        else:
            names.add(family.name)
    return names


def _bare(name: str) -> str:
    """prometheus-client appends ``_total`` to counters itself."""
    return name.removesuffix("_total")


class ServiceMetrics:
    """One process's metric families, on its own registry.

    Every family in ``CATALOGUE`` is registered, so a scrape always shows the
    same names; a service only moves the ones it owns."""

    def __init__(self, service: str) -> None:
        disable_created_metrics()  # no ``*_created`` series: they are not in the catalogue
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        self._families: dict[str, Counter | Gauge | Histogram] = {}
        for family in CATALOGUE:
            if service not in family.exported_by:
                continue
            self._families[family.name] = self._make(family)

    def _make(self, family: Family) -> Counter | Gauge | Histogram:
        if family.kind == "counter":
            return Counter(_bare(family.name), family.help, family.labels, registry=self.registry)
        if family.kind == "gauge":
            return Gauge(family.name, family.help, family.labels, registry=self.registry)
        buckets = _DELIVERY_BUCKETS if family.name == "quire_stage_deliveries" else _LATENCY_BUCKETS
        return Histogram(
            family.name, family.help, family.labels, buckets=buckets, registry=self.registry
        )

    def counter(self, name: str) -> Counter:
        family = self._families[name]
        assert isinstance(family, Counter), name
        return family

    def gauge(self, name: str) -> Gauge:
        family = self._families[name]
        assert isinstance(family, Gauge), name
        return family

    def histogram(self, name: str) -> Histogram:
        family = self._families[name]
        assert isinstance(family, Histogram), name
        return family


def transaction_counter(metrics: ServiceMetrics) -> Callable[[str], Callable[[], None]]:
    """For ``quire.database.Database``: each transaction kind's counter increment."""
    family = metrics.counter("quire_db_transactions_total")
    return lambda kind: family.labels(kind=kind).inc


def serve_metrics(metrics: ServiceMetrics, address: str) -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (the client
    library's own server); an empty address serves nothing. An address that
    cannot be bound is logged, and the service runs on without metrics."""
    if not address:
        return
    host, _, port = address.rpartition(":")
    try:
        start_http_server(
            int(port), addr=host.strip("[]") or "127.0.0.1", registry=metrics.registry
        )
    except OSError as error:
        # The work goes on without its metrics; the scrape target shows down.
        log.error("metrics not served on %s: %s", address, error.strerror or error)
        return
    log.info("metrics on %s/metrics", address)


@dataclass(frozen=True)
class _Delivery:
    meter: StageMeter
    priority: str
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase of this delivery, in the order first measured."""

    def add(self, name: str, seconds: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + max(0.0, seconds)


_current: ContextVar[_Delivery | None] = ContextVar("quire_delivery", default=None)
"""The delivery the running task works on; set by ``StageMeter.delivery``."""


class StageMeter:
    """What one stage process measures about its deliveries."""

    def __init__(self, metrics: ServiceMetrics, stage: str, limit: int) -> None:
        self.stage = stage
        self._tracer = trace.get_tracer(f"quire.{metrics.service}")
        self._in_flight = metrics.gauge("quire_stage_in_flight").labels(stage=stage)
        metrics.gauge("quire_stage_concurrency_limit").labels(stage=stage).set(limit)
        self._phases = metrics.histogram("quire_stage_phase_seconds")
        self._phase_series: dict[tuple[str, str], Histogram] = {}
        """Each (class, phase) series of ``_phases``, looked up once (a
        delivery observes several, each a locked lookup in the client)."""
        self._outcomes = metrics.counter("quire_stage_outcomes_total")
        self._retries = metrics.counter("quire_stage_retries_total")
        self._deliveries = metrics.histogram("quire_stage_deliveries")
        self._source_bytes = metrics.counter("quire_source_read_bytes_total").labels(stage=stage)
        for priority in ("interactive", "batch"):  # every series exists from the start
            for outcome in ("done", "ended", "retry", "stale", "refused"):
                self._outcomes.labels(stage=stage, **{"class": priority}, outcome=outcome)
            self._retries.labels(stage=stage, **{"class": priority})

    @contextmanager
    def delivery(self, priority: str, queued_seconds: float) -> Iterator[None]:
        """One delivery in flight: its queue wait observed, its phases attributed."""
        self._in_flight.inc()
        self.observe(priority, "queue_wait", queued_seconds)
        delivery = _Delivery(self, priority)
        delivery.add("queue_wait", queued_seconds)
        token = _current.set(delivery)
        try:
            yield
        finally:
            _current.reset(token)
            self._in_flight.dec()

    def observe(self, priority: str, name: str, seconds: float) -> None:
        series = self._phase_series.get((priority, name))
        if series is None:
            series = self._phases.labels(stage=self.stage, **{"class": priority}, phase=name)
            self._phase_series[(priority, name)] = series
        series.observe(max(0.0, seconds))

    def settled(self, priority: str, outcome: str, attempt: int) -> None:
        self._outcomes.labels(stage=self.stage, **{"class": priority}, outcome=outcome).inc()
        if outcome == "retry":
            self._retries.labels(stage=self.stage, **{"class": priority}).inc()
        elif outcome in ("done", "ended"):
            self._deliveries.labels(stage=self.stage, **{"class": priority}).observe(attempt)

    def source_read(self, size_bytes: int) -> None:
        self._source_bytes.inc(size_bytes)

    @contextmanager
    def phase(self, delivery: _Delivery, name: str) -> Iterator[None]:
        """One phase of ``delivery``: a child span, the histogram, and the
        delivery's own timings (recorded on its ledger entry)."""
        started = time.perf_counter()
        try:
            with child_span(self._tracer, f"{self.stage}.{name}", attributes={"quire.phase": name}):
                yield
        finally:
            seconds = time.perf_counter() - started
            self.observe(delivery.priority, name, seconds)
            delivery.add(name, seconds)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time one phase of the current delivery (a child span, the
    ``quire_stage_phase_seconds`` histogram and the delivery's timings);
    outside a delivery, nothing."""
    delivery = _current.get()
    if delivery is None:
        yield
        return
    with delivery.meter.phase(delivery, name):
        yield


FETCH_PHASE = "fetch"
"""The phase of reading sources; a source system's share is ``fetch:<system>``."""


def add_source_fetch(system: str, seconds: float) -> None:
    """Add ``seconds`` of fetching from source ``system`` to the current
    delivery's timings (its ledger entry shows them per system); outside a
    delivery, nothing. The caller keeps its own per-system histogram."""
    delivery = _current.get()
    if delivery is not None:
        delivery.add(f"{FETCH_PHASE}:{system}", seconds)


def delivery_timings() -> dict[str, float]:
    """Seconds per phase of the current delivery so far (its queue wait and
    every ``phase`` timed in it); empty outside a delivery."""
    delivery = _current.get()
    return {} if delivery is None else dict(delivery.timings)


def count_source_read(size_bytes: int) -> None:
    """Source bytes the current delivery read from the blob store."""
    delivery = _current.get()
    if delivery is not None:
        delivery.meter.source_read(size_bytes)
