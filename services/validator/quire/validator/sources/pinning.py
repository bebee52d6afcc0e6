"""Fetching and pinning a job's sources named by reference, at the start of
the validator's stage work and before any validation.

For each source with ``fetch`` and no ``pin``: reuse the job's pin if one
was written (a redelivery, a crash, a racing delivery), else fetch it from
its system (``fetcher``), pass it through the upload door's rule, normalise
a JSON source (``normalise``), store it content-addressed and write its pin
(``pins``) — at once, so progress survives a crash — and check it against
its system's schema (``schemas``; a mismatch rejects the job after the pin
is written, so the ledger records what was fetched). The task then names
the pinned bytes like an uploaded source (sha256, size, blob key) and
carries the pin, for the evaluator and every later stage.

**Order and concurrency.** A job's sources are grouped by source system;
each system's sources are fetched in position order, one call at a time,
and up to ``systems_at_once`` systems at once. One system at a time per job
means a job never competes with itself for a half-open breaker's single
trial, and a slow system holds one connection per job, not one per source;
different systems still overlap. The first permanent outcome (a 404, a
schema mismatch, ...) stops the job's other fetches: the job ends anyway.

**Retries within a delivery.** A call that fails in a way that may pass is
tried again after a full-jitter backoff (uniform in [0, min(2 s, 0.2 s ×
2^(n-1))]), at most ``tries_per_delivery`` tries, and only while the
remaining fetch budget covers the backoff plus a minimal call (0.5 s).

**Budget** (``budget``). Fetching ends by ``deadline - reserve``; one call
waits at most its system's timeout or what is left, if less. Without a
deadline, calls are bounded by their timeouts and retries by tries and
deliveries.

**Deferral.** When a system's breaker is open (or half-open with another
caller's trial under way), or its tries in this delivery are spent, the job
is deferred: ``SourceDeferred`` (transient, SOURCE_UNAVAILABLE) with
``retry_after`` = the time until the breaker lets a trial through plus a
random jitter of up to half the open period (so deferred jobs do not all
come back at once; half the open period at least while another caller's
trial is under way), capped so that the job comes back with room for one
call and the redelivery's own latency (two minimal calls) before the fetch
deadline. The task is deferred off the queue for that delay (a scheduled
copy, ``quire.workqueue.deferral``): neither the validator's slot nor one of
the stage's ``max_ack_pending`` slots is held meanwhile, so other tenants'
jobs do not queue behind a system that is down. Several systems deferring: the longest
delay (the job needs them all). A deferral is no state transition: the
job's status shows it as source waits (``waits``), one row per deferring
system with its breaker and when the task comes back, written here in one
small transaction; they are deleted once the job's sources are all pinned or
it ends here (rejected, failed). Writing them never decides the job: a
database error there is logged and the deferral raised as it was.

**Ending instead** (``SystemFailure``: FAILED, dead-lettered, inside the
deadline):

- ``DEADLINE_EXCEEDED``: the deadline had passed when the delivery began
  (the job waited too long), or what is left of the fetch budget cannot
  cover one call while its systems showed no trouble;
- ``SOURCE_UNAVAILABLE``: a system failed, timed out or had its breaker
  open, and the fetch budget cannot cover waiting for it plus one call; or
  this is the job's last allowed delivery (``attempt >= max_deliver``) and a
  system is still unavailable (so the reason is not RETRY_LIMIT_REACHED).

Per-call times go to ``quire_source_fetch_seconds`` and to the delivery's
timings as each system's share of ``fetch``; the whole phase is timed as
``fetch``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from opentelemetry import trace

from quire.blobstore import BlobStore
from quire.errors import PermanentError, Rejected, SystemFailure
from quire.metrics import FETCH_PHASE, phase
from quire.reasons import ReasonCode
from quire.telemetry import child_span
from quire.type import job_pb2, queue_pb2
from quire.validator.sources.breakers import BreakerState, Permit, SourceBreakers
from quire.validator.sources.budget import FetchBudget
from quire.validator.sources.credentials import resolve_credential
from quire.validator.sources.errors import SourceCallFailed, SourceDeferred, outcome_of
from quire.validator.sources.fetcher import FetchedBody, SourceCall, SourceFetcher
from quire.validator.sources.meter import SourceMeter
from quire.validator.sources.normalise import normalise_json
from quire.validator.sources.pins import Pin, PinStore, fetched_key
from quire.validator.sources.schemas import is_shipped, schema_error
from quire.validator.sources.settings import SourceSettings
from quire.validator.sources.waits import SourceWaits

__all__ = ["Pinned", "SourcePinner", "wants_fetching"]

_tracer = trace.get_tracer("quire.validator")
log = logging.getLogger(__name__)


def wants_fetching(task: queue_pb2.JobTask) -> bool:
    """Whether ``task`` names a source by reference that it does not carry a pin for."""
    return any(s.HasField("fetch") and not s.HasField("pin") for s in task.sources)


@dataclass(frozen=True)
class Pinned:
    """The task with every pin it has (each pinned source an ordinary one), and
    the rejection that ends the job, if a fetched source decided one."""

    task: queue_pb2.JobTask
    rejection: Rejected | None = None


def _with(task: queue_pb2.JobTask, pins: dict[int, Pin]) -> queue_pb2.JobTask:
    pinned = queue_pb2.JobTask()
    pinned.CopyFrom(task)
    for source in pinned.sources:
        if source.HasField("fetch") and not source.HasField("pin") and source.position in pins:
            pins[source.position].apply(source)
    return pinned


def _prepare_json(data: bytes, schema: str) -> tuple[bytes, tuple[str, ...], str]:
    """The bytes to pin, the normalisations, and where they fail ``schema``."""
    normalised = normalise_json(data)
    error = schema_error(schema, normalised.document, parsed=normalised.parsed) if schema else ""
    return normalised.data, normalised.codes, error


class SourcePinner:
    """Fetches and pins a job's sources named by reference: reuses the job's
    pins, fetches only what has none, and defers the job while a system is
    unavailable."""

    def __init__(
        self,
        *,
        fetcher: SourceFetcher,
        pins: PinStore,
        blobs: BlobStore,
        breakers: SourceBreakers,
        settings: SourceSettings,
        max_deliver: int,
        meter: SourceMeter | None = None,
        waits: SourceWaits | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._pins = pins
        self._blobs = blobs
        self._breakers = breakers
        self._settings = settings
        self._max_deliver = max_deliver
        self._meter = meter or SourceMeter()
        self._waits = waits
        """Where the job's status finds what it waits for; None: not recorded."""
        self._clock = clock
        self._random = rng or random.Random()

    async def pin_sources(self, task: queue_pb2.JobTask, attempt: int) -> Pinned:
        """``task`` with its sources named by reference pinned (a copy; the
        given task is not changed). Raises ``SourceDeferred`` to wait for a
        system, ``SystemFailure`` to end the job FAILED."""
        wanted = [s for s in task.sources if s.HasField("fetch") and not s.HasField("pin")]
        if not wanted:
            return Pinned(task)
        try:
            pinned = await self._pin_wanted(task, wanted, attempt)
        except SourceDeferred:
            raise  # its waits are written (_decide)
        except PermanentError:  # the job ends here: FAILED or REJECTED
            await self._clear_waits(task.job)
            raise
        await self._clear_waits(task.job)  # all pinned, or a rejection
        return pinned

    async def _pin_wanted(
        self, task: queue_pb2.JobTask, wanted: list[job_pb2.SourceRef], attempt: int
    ) -> Pinned:
        budget = FetchBudget.of(task, self._settings.budget_reserve_seconds, self._clock)
        if budget.passed():
            raise SystemFailure(
                ReasonCode.DEADLINE_EXCEEDED, "the job's deadline passed before it was fetched"
            )
        for source in wanted:
            if source.fetch.schema and not is_shipped(source.fetch.schema):
                raise SystemFailure(
                    ReasonCode.SOURCE_SCHEMA_INVALID,
                    f"schema {source.fetch.schema} is not one this validator ships",
                )
        with phase(FETCH_PHASE):
            pins = await self._pins.pinned(task.job)
            missing = [s for s in wanted if s.position not in pins]
            failures = await self._fetch(task, missing, pins, budget, attempt) if missing else {}
        return await self._decide(_with(task, pins), wanted, pins, failures)

    async def with_pins(self, task: queue_pb2.JobTask) -> queue_pb2.JobTask:
        """``task`` (a copy) with every pin the job has so far: what a FAILED
        ending records, so the ledger says what was fetched before it."""
        return _with(task, await self._pins.pinned(task.job))

    async def _decide(
        self,
        task: queue_pb2.JobTask,
        wanted: list[job_pb2.SourceRef],
        pins: dict[int, Pin],
        failures: dict[int, BaseException],
    ) -> Pinned:
        """The first permanent outcome by position ends the job; else any
        other error is raised; else the job waits for its slowest system."""
        for source in sorted(wanted, key=lambda s: s.position):
            failure = failures.get(source.position)
            pin = pins.get(source.position)
            if isinstance(failure, Rejected):
                return Pinned(task, failure)
            if isinstance(failure, PermanentError):
                raise failure
            if pin is not None and pin.schema_error:
                return Pinned(
                    task,
                    Rejected(
                        ReasonCode.SOURCE_SCHEMA_INVALID,
                        f"position {pin.position} does not match {pin.schema_version}"
                        f" ({pin.schema_error})",
                    ),
                )
        deferrals = []
        for failure in failures.values():
            if isinstance(failure, SourceDeferred):
                deferrals.append(failure)
            else:
                raise failure  # storage trouble and the like: the runner retries
        if deferrals:
            for deferral in deferrals:
                self._meter.deferred(deferral.system)
            longest = max(deferrals, key=lambda d: d.retry_after or 0.0)
            await self._record_waits(task, deferrals, longest.retry_after or 0.0)
            raise longest
        return Pinned(task)

    async def _record_waits(
        self, task: queue_pb2.JobTask, deferrals: list[SourceDeferred], retry_after: float
    ) -> None:
        """The job waits for ``deferrals``' systems; its task comes back in
        ``retry_after`` seconds (the longest deferral: the one raised)."""
        if self._waits is None:
            return
        breakers = {d.system: self._breakers.state(task.tenant, d.system) for d in deferrals}
        try:
            await self._waits.deferred(task.job, breakers, retry_after)
        except Exception:  # noqa: BLE001 - the status's aid, never the job's fate
            log.warning("source waits not recorded", extra={"job": task.job}, exc_info=True)

    async def _clear_waits(self, job: str) -> None:
        if self._waits is None:
            return
        try:
            await self._waits.cleared(job)
        except Exception:  # noqa: BLE001 - the status's aid, never the job's fate
            log.warning("source waits not cleared", extra={"job": job}, exc_info=True)

    async def _fetch(
        self,
        task: queue_pb2.JobTask,
        missing: list[job_pb2.SourceRef],
        pins: dict[int, Pin],
        budget: FetchBudget,
        attempt: int,
    ) -> dict[int, BaseException]:
        """Fetch and pin ``missing`` into ``pins``; what failed, by position."""
        systems: dict[str, list[job_pb2.SourceRef]] = {}
        for source in sorted(missing, key=lambda s: s.position):
            systems.setdefault(source.fetch.system, []).append(source)
        failures: dict[int, BaseException] = {}
        slots = asyncio.Semaphore(self._settings.systems_at_once)

        async def one_system(sources: list[job_pb2.SourceRef]) -> bool:
            """True when the job's fate is decided (stop the others)."""
            async with slots:
                for source in sources:
                    try:
                        pin = await self._pin_one(task, source, budget, attempt)
                    except Exception as error:  # noqa: BLE001 - decided on in _decide
                        failures[source.position] = error
                        return isinstance(error, PermanentError)
                    pins[source.position] = pin
                    if pin.schema_error:
                        return True
            return False

        running = [asyncio.create_task(one_system(sources)) for sources in systems.values()]
        try:
            for finished in asyncio.as_completed(running):
                if await finished:
                    break
        finally:
            for task_ in running:
                task_.cancel()  # those still fetching: the job is decided
            await asyncio.gather(*running, return_exceptions=True)
        return failures

    async def _pin_one(
        self,
        task: queue_pb2.JobTask,
        source: job_pb2.SourceRef,
        budget: FetchBudget,
        attempt: int,
    ) -> Pin:
        """Fetch one source (with retries in this delivery) and pin it."""
        settings = self._settings
        call = SourceCall.of(task.tenant, source.position, source.fetch, settings)
        if not call.base_url:
            # Admission copies the registration in; a batch packet's system
            # deleted after the batch was accepted leaves none to call.
            self._meter.call(call.system, "refused")
            raise SystemFailure(
                ReasonCode.SOURCE_REFUSED, f"source system {call.system} has no address"
            )
        tries = 0
        while True:
            try:
                token = await resolve_credential(
                    call.credential_ref,
                    directory=settings.credentials_dir,
                    env=settings.credential_variables,
                )
            except SystemFailure:
                self._meter.call(call.system, "refused")
                raise
            permit = await self._breakers.admit(task.tenant, call.system)
            if not permit.allowed:
                self._meter.call(call.system, "breaker_open")
                raise self._defer(call.system, permit.wait_seconds, budget, attempt)
            if budget.remaining() < settings.min_call_seconds:
                self._breakers.release(permit)
                # A redelivery was deferred (or its worker died): the system
                # showed trouble, whatever this delivery saw.
                raise self._out_of_budget(
                    task.tenant, call.system, troubled=tries > 0 or attempt > 1
                )
            timeout = budget.call_timeout(call.timeout_seconds)
            tries += 1
            body = await self._call(call, token, timeout, permit, tries)
            if body is not None:
                with body:
                    return await self._store(task, call, body)
            if tries >= settings.tries_per_delivery:
                wait = self._breakers.wait_seconds(task.tenant, call.system)
                raise self._defer(call.system, wait, budget, attempt)
            delay = settings.backoff.delay(tries, self._random)
            if budget.remaining() - delay < settings.min_call_seconds:
                wait = self._breakers.wait_seconds(task.tenant, call.system)
                raise self._defer(call.system, wait, budget, attempt)
            await asyncio.sleep(delay)

    async def _call(
        self, call: SourceCall, token: str | None, timeout: float, permit: Permit, tries: int
    ) -> FetchedBody | None:
        """One permitted call: the body, or None when it failed in a way
        that may pass (recorded against the breaker). Permanent outcomes raise."""
        started = time.perf_counter()
        attributes: dict[str, str | int | bool] = {
            "quire.source_system": call.system,
            "quire.position": call.position,
            "quire.try": tries,
        }
        try:
            with child_span(_tracer, "validator.source_fetch", attributes=attributes) as span:
                try:
                    body = await self._fetcher.fetch(call, timeout, token)
                except SourceCallFailed as failed:
                    span.set_attribute("quire.outcome", failed.outcome)
                    raise
                span.set_attribute("quire.outcome", "ok")
        except SourceCallFailed as failed:
            self._meter.call(call.system, failed.outcome, time.perf_counter() - started)
            await self._breakers.record(permit, failed=True)
            return None
        except PermanentError as refused:
            outcome = outcome_of(refused.reason)
            if outcome is None:  # not the system's answer (storage, a shredded key)
                self._breakers.release(permit)
                raise
            self._meter.call(call.system, outcome, time.perf_counter() - started)
            await self._breakers.record(permit, failed=False)  # the system answered
            raise
        except BaseException:
            self._breakers.release(permit)  # cancelled, or our own trouble: no outcome
            raise
        self._meter.call(call.system, "ok", time.perf_counter() - started)
        await self._breakers.record(permit, failed=False)
        return body

    def _defer(
        self, system: str, wait: float, budget: FetchBudget, attempt: int
    ) -> SourceDeferred | SystemFailure:
        """Wait ``wait`` seconds (plus jitter) for ``system``, or end the job."""
        if attempt >= self._max_deliver:
            return SystemFailure(
                ReasonCode.SOURCE_UNAVAILABLE,
                f"source system {system} still unavailable on the job's last delivery",
            )
        delay = wait + self._random.uniform(0, self._settings.breaker_open_seconds / 2)
        if budget.limited:
            # Come back with room for one call and for the redelivery's own
            # latency: back with less than a call needs, the job could only end.
            latest = budget.remaining() - 2 * self._settings.min_call_seconds
            if latest <= 0 or latest < wait:
                return SystemFailure(
                    ReasonCode.SOURCE_UNAVAILABLE,
                    f"the job's budget cannot cover waiting for source system {system}",
                )
            delay = min(delay, latest)
        return SourceDeferred(system, delay)

    def _out_of_budget(self, tenant: str, system: str, *, troubled: bool) -> SystemFailure:
        if troubled or self._breakers.state(tenant, system) is not BreakerState.CLOSED:
            return SystemFailure(
                ReasonCode.SOURCE_UNAVAILABLE,
                f"the job's budget ran out waiting for source system {system}",
            )
        return SystemFailure(
            ReasonCode.DEADLINE_EXCEEDED, "the job's budget left no time to fetch its sources"
        )

    async def _store(self, task: queue_pb2.JobTask, call: SourceCall, body: FetchedBody) -> Pin:
        """Store the fetched bytes content-addressed and write their pin."""
        fetched_at = datetime.fromtimestamp(self._clock(), UTC)
        codes: tuple[str, ...] = ()
        error = ""
        schema = ""
        if body.data is not None:
            schema = call.schema
            data, codes, error = await asyncio.to_thread(_prepare_json, body.data, schema)
            sha256, size, key = await asyncio.to_thread(self._write, task.tenant, data)
        else:
            assert body.writer is not None
            sha256, size = body.writer.sha256, body.writer.size
            key = fetched_key(task.tenant, sha256)
            await asyncio.to_thread(body.writer.promote, key)
        pin = Pin(
            position=call.position,
            system=call.system,
            key=call.key,
            sha256=sha256,
            size_bytes=size,
            fetched_sha256=body.sha256,
            schema_version=schema,
            fetched_at=fetched_at,
            normalisations=codes,
            blob_key=key,
            schema_error=error,
        )
        return await self._pins.pin(task.job, pin)

    def _write(self, tenant: str, data: bytes) -> tuple[str, int, str]:
        with self._blobs.writer(tenant, max_bytes=len(data)) as writer:
            writer.write(data)
            key = fetched_key(tenant, writer.sha256)
            writer.promote(key)
        return writer.sha256, writer.size, key
