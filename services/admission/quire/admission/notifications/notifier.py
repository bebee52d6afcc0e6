"""The notifier: delivers the outbox's completion notifications to tenants'
callback URLs, signed (``quire.notifysign``), retried with capped exponential
backoff and full jitter, every try recorded.

It runs beside admission's other loops and never holds up completion: the
end tracker only writes an outbox row (``quire.admission.notifications.outbox``). Rows are
durable, so a restart resumes them. A row is claimed before its POST: the
claiming transaction counts the attempt and moves ``next_attempt_at`` past
the POST's timeout, so another replica leaves it alone (PostgreSQL also
skips rows another claimer holds locked). If admission dies mid-POST, the row
falls due again when the claim runs out and is sent again with the same
delivery id; the receiver acts on a delivery id once, which is why
"exactly one notification per job" is the receiver's to count. An attempt
whose outcome was never recorded leaves a gap in the attempt numbers.

Nothing about a notification's URL beyond its host, nor its payload or its
secret, is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import httpx
from sqlalchemy import Connection, select, update

from quire.admission import tables
from quire.admission.notifications.secrets import NotificationSecrets
from quire.admission.settings import NotificationSettings
from quire.database import Database, insert_if_absent
from quire.egress import EgressPolicy, guarded_transport, was_refused
from quire.errors import PermanentError
from quire.metrics import ServiceMetrics
from quire.notifysign import DELIVERY_HEADER, SIGNATURE_HEADER, signature_header
from quire.reasons import ReasonCode

__all__ = ["Claim", "Notifier", "Outcome"]

log = logging.getLogger(__name__)
CLAIM_MARGIN_SECONDS = 5.0
"""A claim keeps other replicas off a row for twice the POST's timeout and this."""
CANDIDATES_PER_SLOT = 4


class Outcome(StrEnum):
    """One try as it is recorded (and counted for operators)."""

    DELIVERED = "DELIVERED"
    REFUSED = "REFUSED"
    """The receiver answered with a status other than 2xx."""
    TIMEOUT = "TIMEOUT"
    UNREACHABLE = "UNREACHABLE"
    BLOCKED = "BLOCKED"
    """Not sent: the URL's host resolves to an address Quire does not call."""


def tenant_outcome(recorded: str) -> str:
    """What the tenant is told of a try: DELIVERED, REFUSED (Quire would not
    send it) or FAILED. Never which failure: the receiver's status, a timeout
    and no connection look alike, so a callback URL cannot probe a network."""
    if recorded == Outcome.DELIVERED:
        return "DELIVERED"
    if recorded == Outcome.BLOCKED:
        return "REFUSED"
    return "FAILED"


@dataclass(frozen=True)
class Claim:
    """One notification taken for one attempt."""

    tenant: str
    subject: str
    delivery_id: str
    payload: bytes
    attempt: int
    url: str
    secret_sealed: bytes


class Notifier:
    """Admission's delivery loop (``run_forever``) over the notification outbox."""

    def __init__(
        self,
        database: Database,
        secrets: NotificationSecrets,
        settings: NotificationSettings,
        *,
        egress: EgressPolicy,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._attempts = (
            metrics.counter("quire_notification_attempts_total") if metrics is not None else None
        )
        self._db = database
        self._secrets = secrets
        self._settings = settings
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_seconds),
            follow_redirects=False,
            transport=transport or guarded_transport(egress),
            trust_env=False,
        )
        self._in_flight: dict[asyncio.Task[None], str] = {}
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Look at the outbox now rather than at the next poll."""
        self._wake.set()

    async def run_forever(self) -> None:
        try:
            while True:
                free = self._settings.concurrency - len(self._in_flight)
                claimed = await self._claim_safely(free) if free > 0 else []
                for claim in claimed:
                    task = asyncio.create_task(self._deliver_safely(claim))
                    self._in_flight[task] = claim.tenant
                    task.add_done_callback(self._done)
                if len(claimed) < free or free <= 0:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow
                    # a cancel that comes as the wake does, and the loop never ends.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._settings.poll_seconds):
                            await self._wake.wait()
                    self._wake.clear()
        finally:
            for task in list(self._in_flight):
                task.cancel()
            await asyncio.gather(*self._in_flight, return_exceptions=True)
            await self._http.aclose()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)
        self._wake.set()

    async def _claim_safely(self, limit: int) -> list[Claim]:
        busy = Counter(self._in_flight.values())
        try:
            return await self._db.run(lambda connection: self.claim(connection, limit, busy))
        except Exception:  # noqa: BLE001 - the database may be restarting: poll again
            log.warning("notification outbox not readable; trying again", exc_info=True)
            return []

    def claim(
        self, connection: Connection, limit: int, busy: Counter[str] | None = None
    ) -> list[Claim]:
        """Take up to ``limit`` due notifications, at most ``tenant_concurrency``
        in flight per tenant; abandon those past their last try or whose tenant
        has removed its endpoint."""
        now = datetime.now(UTC)
        busy = Counter(busy or {})
        rows = connection.execute(_due(now, limit * CANDIDATES_PER_SLOT, connection)).all()
        lease = now + timedelta(seconds=2 * self._settings.timeout_seconds + CLAIM_MARGIN_SECONDS)
        taken: list[Claim] = []
        for row in rows:
            if row.url is None or row.attempts >= self._settings.max_attempts:
                _settle(connection, row.tenant, row.subject, abandoned_at=now)
                continue
            if len(taken) >= limit or busy[row.tenant] >= self._settings.tenant_concurrency:
                continue
            busy[row.tenant] += 1
            attempt = row.attempts + 1
            _settle(connection, row.tenant, row.subject, attempts=attempt, next_attempt_at=lease)
            taken.append(
                Claim(
                    row.tenant,
                    row.subject,
                    row.delivery_id,
                    row.payload,
                    attempt,
                    row.url,
                    row.secret_sealed,
                )
            )
        return taken

    async def _deliver_safely(self, claim: Claim) -> None:
        try:
            await self.deliver(claim)
        except asyncio.CancelledError:
            raise
        except PermanentError as error:
            if error.reason is ReasonCode.DATA_SHREDDED:
                await self._db.run(
                    lambda s: _settle(s, claim.tenant, claim.subject, abandoned_at=_now())
                )
            log.warning(
                "notification not sent", extra={"tenant": claim.tenant, "reason": error.reason}
            )
        except Exception:  # noqa: BLE001 - the claim runs out and the row is tried again
            log.warning(
                "notification attempt not recorded",
                extra={"tenant": claim.tenant, "subject": claim.subject},
                exc_info=True,
            )

    async def deliver(self, claim: Claim) -> Outcome:
        """One POST of ``claim``, and its record."""
        secret = await asyncio.to_thread(self._secrets.open, claim.tenant, claim.secret_sealed)
        outcome, status = await self._post(claim, secret)
        await self._db.run(lambda connection: self.record(connection, claim, outcome, status))
        if self._attempts is not None:
            self._attempts.labels(outcome=outcome.value).inc()
            if outcome is not Outcome.DELIVERED and claim.attempt >= self._settings.max_attempts:
                self._attempts.labels(outcome="ABANDONED").inc()
        log.info(
            "notification attempt",
            extra={
                "tenant": claim.tenant,
                "subject": claim.subject,
                "attempt": claim.attempt,
                "outcome": outcome.value,
                "http_status": status,
            },
        )
        return outcome

    async def _post(self, claim: Claim, secret: str) -> tuple[Outcome, int]:
        headers = {
            "Content-Type": "application/json",
            DELIVERY_HEADER: claim.delivery_id,
            SIGNATURE_HEADER: signature_header(
                secret, claim.delivery_id, claim.payload, int(time.time())
            ),
        }
        try:
            async with asyncio.timeout(self._settings.timeout_seconds):
                # The reply's body is never read: only its status counts.
                async with self._http.stream(
                    "POST", claim.url, content=claim.payload, headers=headers
                ) as reply:
                    status = reply.status_code
        except (TimeoutError, httpx.TimeoutException):
            return Outcome.TIMEOUT, 0
        except httpx.HTTPError as error:
            return (Outcome.BLOCKED if was_refused(error) else Outcome.UNREACHABLE), 0
        return (Outcome.DELIVERED if 200 <= status < 300 else Outcome.REFUSED), status

    def record(self, connection: Connection, claim: Claim, outcome: Outcome, status: int) -> None:
        """The attempt, and what follows for the row, in one transaction. A row
        another replica has claimed since (its claim ran out) is left to it."""
        now = datetime.now(UTC)
        insert_if_absent(
            connection,
            tables.notification_attempts,
            {
                "tenant": claim.tenant,
                "subject": claim.subject,
                "attempt": claim.attempt,
                "attempted_at": now,
                "http_status": status,
                "outcome": outcome.value,
            },
        )
        if outcome is Outcome.DELIVERED:
            _settle(connection, claim.tenant, claim.subject, delivered_at=now)
        elif claim.attempt >= self._settings.max_attempts:
            _settle(connection, claim.tenant, claim.subject, claim.attempt, abandoned_at=now)
        else:
            retry = now + timedelta(seconds=self._settings.backoff.delay(claim.attempt))
            _settle(connection, claim.tenant, claim.subject, claim.attempt, next_attempt_at=retry)


def _now() -> datetime:
    return datetime.now(UTC)


def _due(now: datetime, limit: int, connection: Connection) -> Any:
    outbox, endpoints = tables.notifications, tables.notification_endpoints
    query = (
        select(
            outbox.c.tenant,
            outbox.c.subject,
            outbox.c.delivery_id,
            outbox.c.payload,
            outbox.c.attempts,
            endpoints.c.url,
            endpoints.c.secret_sealed,
        )
        .outerjoin(endpoints, endpoints.c.tenant == outbox.c.tenant)
        .where(
            outbox.c.delivered_at.is_(None),
            outbox.c.abandoned_at.is_(None),
            outbox.c.next_attempt_at <= now,
        )
        .order_by(outbox.c.next_attempt_at)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=outbox)
    return query


def _settle(
    connection: Connection, tenant: str, subject: str, attempt: int | None = None, **values: Any
) -> None:
    """Update an undelivered, unabandoned row (still at ``attempt``, when given)."""
    outbox = tables.notifications.c
    conditions = [
        outbox.tenant == tenant,
        outbox.subject == subject,
        outbox.delivered_at.is_(None),
        outbox.abandoned_at.is_(None),
    ]
    if attempt is not None:
        conditions.append(outbox.attempts == attempt)
    connection.execute(update(tables.notifications).where(*conditions).values(**values))
