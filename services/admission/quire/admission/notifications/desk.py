"""A tenant's notification endpoint and the record of its deliveries: what
``SetNotificationEndpoint``, ``GetNotificationEndpoint`` and
``ListNotificationAttempts`` answer (``quire.admission.desks``).

The endpoint's secret is made here, shown in the reply that made it and
stored only sealed (``quire.admission.notifications.secrets``). A retry of
``SetNotificationEndpoint`` with the same request id replays the first
reply without the secret (``secret_withheld``), as ``CreateToken`` does.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import Connection, delete, select, update

from quire.admission import tables
from quire.admission.notifications.callbackurl import check_callback_destination, check_callback_url
from quire.admission.notifications.notifier import tenant_outcome
from quire.admission.notifications.secrets import NotificationSecrets
from quire.admission.settings import NotificationSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.v1 import notification_pb2 as pb
from quire.database import Database, as_utc, insert_if_absent
from quire.egress import EgressPolicy
from quire.errors import NotFound
from quire.idempotency import RequestOnce

__all__ = ["Notifications"]

SET_ENDPOINT = "quire.admission.v1.AdmissionService/SetNotificationEndpoint"
_SUBJECT_OWNERS = {
    "jobs": (tables.jobs, tables.jobs.c.job),
    "batches": (tables.batches, tables.batches.c.batch),
}


def _stamp(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(as_utc(moment))
    return stamp


def _without_secret(
    reply: pb.SetNotificationEndpointResponse,
) -> pb.SetNotificationEndpointResponse:
    kept = pb.SetNotificationEndpointResponse()
    kept.CopyFrom(reply)
    if kept.secret:
        kept.secret = ""
        kept.secret_withheld = True
    return kept


class Notifications:
    """Admission's ``NotificationDesk``: endpoints, their secrets, and the attempts."""

    def __init__(
        self,
        database: Database,
        secrets: NotificationSecrets,
        settings: NotificationSettings,
        *,
        egress: EgressPolicy,
    ) -> None:
        self._db = database
        self._secrets = secrets
        self._settings = settings
        self._egress = egress

    async def set_endpoint(
        self, tenant: Tenant, request: pb.SetNotificationEndpointRequest
    ) -> pb.SetNotificationEndpointResponse:
        if request.url:
            check_callback_url(request.url, allow_loopback_http=self._settings.allow_loopback_http)
            await check_callback_destination(request.url, self._egress)
        once = RequestOnce(
            tables.request_ids,
            tenant.id,
            SET_ENDPOINT,
            request,
            pb.SetNotificationEndpointResponse,
            keep=_without_secret,
        )
        # Made before the transaction (the data key may need a file read); unused
        # when the endpoint keeps its secret.
        fresh = await asyncio.to_thread(self._secrets.make, tenant.id) if request.url else None

        def act(connection: Connection) -> pb.SetNotificationEndpointResponse:
            if not request.url:
                return _remove(connection, tenant.id)
            assert fresh is not None
            return _store(connection, tenant.id, request, fresh)

        return await self._db.run(lambda connection: once.run(connection, lambda: act(connection)))

    async def get_endpoint(self, tenant: Tenant) -> pb.NotificationEndpoint:
        def read(connection: Connection) -> pb.NotificationEndpoint:
            row = connection.execute(_endpoint_query(tenant.id)).first()
            if row is None:
                return pb.NotificationEndpoint()
            return pb.NotificationEndpoint(url=row.url, create_time=_stamp(row.created_at))

        return await self._db.read(read)

    async def list_attempts(
        self, tenant: Tenant, request: pb.ListNotificationAttemptsRequest
    ) -> pb.ListNotificationAttemptsResponse:
        kind, _, ident = request.subject.partition("/")
        if kind not in _SUBJECT_OWNERS or not ident or "/" in ident:
            raise NotFound("no such job or batch")
        return await self._db.read(
            lambda connection: _attempts(connection, tenant.id, request.subject)
        )


def _endpoint_query(tenant: str):  # type: ignore[no-untyped-def]
    columns = tables.notification_endpoints.c
    return select(columns.url, columns.created_at, columns.secret_sealed).where(
        columns.tenant == tenant
    )


def _remove(connection: Connection, tenant: str) -> pb.SetNotificationEndpointResponse:
    connection.execute(
        delete(tables.notification_endpoints).where(
            tables.notification_endpoints.c.tenant == tenant
        )
    )
    return pb.SetNotificationEndpointResponse(endpoint=pb.NotificationEndpoint())


def _store(
    connection: Connection,
    tenant: str,
    request: pb.SetNotificationEndpointRequest,
    fresh: tuple[str, bytes],
) -> pb.SetNotificationEndpointResponse:
    secret, sealed = fresh
    now = datetime.now(UTC)
    made = insert_if_absent(
        connection,
        tables.notification_endpoints,
        {"tenant": tenant, "url": request.url, "secret_sealed": sealed, "created_at": now},
    )
    if not made:
        values: dict[str, object] = {"url": request.url}
        if request.rotate_secret:
            values["secret_sealed"] = sealed
        connection.execute(
            update(tables.notification_endpoints)
            .where(tables.notification_endpoints.c.tenant == tenant)
            .values(**values)
        )
    row = connection.execute(_endpoint_query(tenant)).one()
    shown = secret if made or request.rotate_secret else ""
    return pb.SetNotificationEndpointResponse(
        endpoint=pb.NotificationEndpoint(url=row.url, create_time=_stamp(row.created_at)),
        secret=shown,
    )


def _attempts(
    connection: Connection, tenant: str, subject: str
) -> pb.ListNotificationAttemptsResponse:
    outbox = tables.notifications.c
    row = connection.execute(
        select(outbox.delivered_at).where(outbox.tenant == tenant, outbox.subject == subject)
    ).first()
    if row is None:
        table, key = _SUBJECT_OWNERS[subject.partition("/")[0]]
        # Both tables key their rows by the full name ("jobs/…", "batches/…").
        owned = connection.execute(
            select(key).where(key == subject, table.c.tenant == tenant)
        ).first()
        if owned is None:
            raise NotFound("no such job or batch")
        return pb.ListNotificationAttemptsResponse()
    attempts = tables.notification_attempts.c
    rows = connection.execute(
        select(attempts.attempt, attempts.attempted_at, attempts.http_status, attempts.outcome)
        .where(attempts.tenant == tenant, attempts.subject == subject)
        .order_by(attempts.attempt)
    ).all()
    return pb.ListNotificationAttemptsResponse(
        attempts=[
            pb.NotificationAttempt(
                attempt=r.attempt,
                attempt_time=_stamp(r.attempted_at),
                outcome=tenant_outcome(r.outcome),
            )
            for r in rows
        ],
        deliver_time=_stamp(row.delivered_at),
    )
