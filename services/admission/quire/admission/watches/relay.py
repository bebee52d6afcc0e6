"""WatchJob at the front door: audit's stream of a job's state changes,
relayed to the tenant that owns the job.

Ownership is checked first (``JobViews.owned``: another tenant's job is
NOT_FOUND, as in GetJob). The relays share one stream to audit
(``quire.admission.watches.feed``): each follows its job there and unfollows when
its caller goes away (or its deadline passes); audit ending the follow ends
the relay. Against an audit without that stream, each relay calls audit's
WatchJob, the caller's deadline going on to it.
Audit being unreachable, or going away mid-stream, is UNAVAILABLE
(``DEPENDENCY_UNAVAILABLE``), and draining ends every relay UNAVAILABLE
(``SERVICE_DRAINING``): the client watches again from the last sequence it
saw. Open relays are bounded per process like audit's watches, and each
tenant may hold only its share of them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import grpc

from quire.admission.jobs.outstanding import OutstandingJobs
from quire.admission.watches.feed import AuditFeed, Follow
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.errors import Overloaded, QuotaViolation, TransientError
from quire.jobs import SETTLED_STATES, TERMINAL_STATES, state_name
from quire.reasons import ReasonCode
from quire.settings import WatchSettings

__all__ = ["WatchRelay"]


def _refusal(reason: ReasonCode, message: str, subject: str, limit: str) -> Overloaded:
    return Overloaded(reason, message, retry_after=1.0, quota=(QuotaViolation(subject, limit),))


def _overloaded(limit: int) -> Overloaded:
    return _refusal(
        ReasonCode.WATCHES_EXCEEDED,
        "too many open watches; try again shortly",
        "watches",
        f"at most {limit} open watches per process",
    )


def _over_share(limit: int) -> Overloaded:
    return _refusal(
        ReasonCode.TENANT_WATCHES_EXCEEDED,
        "the tenant holds its share of open watches; close one or try again shortly",
        "tenant:watches",
        f"at most {limit} open watches per tenant",
    )


def _wanted(change: audit_service_pb2.WatchJobResponse, settled_only: bool) -> bool:
    """Whether a settled-only relay (or any other) passes ``change`` on."""
    return not settled_only or state_name(change.job.state) in SETTLED_STATES


class _Unsupported(Exception):
    """Audit does not serve FollowJobs."""


def _draining() -> TransientError:
    return TransientError(ReasonCode.SERVICE_DRAINING, "admission is shutting down; watch again")


_DRAINING = audit_service_pb2.FollowedChange(ended=True)
"""Put in every open follow's queue when admission drains (compared by identity)."""


class WatchRelay:
    """Relays audit's changes of a job to its tenant's WatchJob: bounded per
    process and per tenant, all ended on drain (``close``)."""

    def __init__(
        self,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        outstanding: OutstandingJobs,
        settings: WatchSettings | None = None,
    ) -> None:
        self._audit = audit
        self._feed = AuditFeed(audit)
        self._outstanding = outstanding
        self._settings = settings or WatchSettings()
        self._open = 0
        self._by_tenant: Counter[str] = Counter()
        self._closed = asyncio.Event()
        self._following: set[Follow] = set()

    @property
    def feed(self) -> AuditFeed:
        return self._feed

    def close(self) -> None:
        """End every relay (UNAVAILABLE) and refuse new ones: draining."""
        self._closed.set()
        for follow in self._following:
            follow.changes.put_nowait(_DRAINING)
        self._feed.close()

    async def relay(
        self,
        tenant: str,
        name: str,
        after: int,
        timeout: float | None,
        *,
        settled_only: bool = False,
    ) -> AsyncIterator[audit_service_pb2.WatchJobResponse]:
        """Audit's changes of the job ``name`` (already known to be
        ``tenant``'s) after ``after``, until audit ends the stream; only
        those into a terminal or parked state if ``settled_only`` (an older
        audit that sends every change has the others left out here)."""
        if self._closed.is_set():
            raise TransientError(ReasonCode.SERVICE_DRAINING, "admission is shutting down")
        if self._by_tenant[tenant] >= self._settings.max_tenant_watches:
            raise _over_share(self._settings.max_tenant_watches)
        if self._open >= self._settings.max_watches:
            raise _overloaded(self._settings.max_watches)
        self._open += 1
        self._by_tenant[tenant] += 1
        try:
            seen = after
            if not self._feed.unsupported:
                try:
                    async for change in self._followed(name, after, settled_only):
                        seen = change.sequence
                        if _wanted(change, settled_only):
                            yield self._noted(change)
                    return
                except _Unsupported:
                    pass  # an older audit, mid-rollout: a call of this watch's own
            async for change in self._one_call(name, seen, timeout, settled_only):
                if _wanted(change, settled_only):
                    yield self._noted(change)
        finally:
            self._open -= 1
            self._by_tenant[tenant] -= 1
            if not self._by_tenant[tenant]:
                del self._by_tenant[tenant]

    def _noted(
        self, change: audit_service_pb2.WatchJobResponse
    ) -> audit_service_pb2.WatchJobResponse:
        if state_name(change.job.state) in TERMINAL_STATES:
            self._outstanding.ended(change.job.name)
        return change

    async def _followed(
        self, name: str, after: int, settled_only: bool
    ) -> AsyncIterator[audit_service_pb2.WatchJobResponse]:
        """The job's changes through the shared stream."""
        follow = self._feed.follow(name, after, settled_only=settled_only)
        self._following.add(follow)
        try:
            while True:
                # Draining wins over changes still queued, and wakes a waiting
                # relay with _DRAINING, ahead of the feed's own ending (its
                # follows end broken as the stream closes).
                if self._closed.is_set():
                    raise _draining()
                change = await follow.changes.get()
                if change is _DRAINING:
                    raise _draining()
                if change.HasField("change"):
                    yield change.change
                if change.ended:
                    self._feed.ended(follow)
                    if change.code == grpc.StatusCode.UNIMPLEMENTED.value[0]:
                        raise _Unsupported()
                    if change.code:
                        raise self._refusal(change)
                    return
        finally:
            self._following.discard(follow)
            self._feed.unfollow(follow)

    def _refusal(self, change: audit_service_pb2.FollowedChange) -> Exception:
        if change.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]:
            return _overloaded(self._settings.max_watches)
        return TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable; watch again")

    async def _one_call(
        self, name: str, after: int, timeout: float | None, settled_only: bool
    ) -> AsyncIterator[audit_service_pb2.WatchJobResponse]:
        """The job's changes through a WatchJob call of its own."""
        call = self._audit.WatchJob(
            audit_service_pb2.WatchJobRequest(
                name=name, after_sequence=after, settled_only=settled_only
            ),
            timeout=timeout,
            wait_for_ready=True,
        )
        closing = asyncio.ensure_future(self._closed.wait())
        reading: asyncio.Future[object] | None = None
        try:
            while True:
                reading = asyncio.ensure_future(call.read())
                await asyncio.wait((reading, closing), return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    raise _draining()
                try:
                    change = reading.result()
                except grpc.aio.AioRpcError as error:
                    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise _overloaded(self._settings.max_watches) from None
                    raise TransientError(
                        ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable; watch again"
                    ) from None
                if change is grpc.aio.EOF:
                    return
                assert isinstance(change, audit_service_pb2.WatchJobResponse)
                yield change
        finally:
            closing.cancel()
            if reading is not None:
                reading.cancel()
            call.cancel()
