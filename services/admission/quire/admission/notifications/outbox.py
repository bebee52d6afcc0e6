"""The outbox of completion notifications: one row per ended job or batch of
a tenant that has registered an endpoint, written in the same transaction
that records the end, so a notification is neither lost nor made twice.
Delivery (signing, POSTing, retrying) reads it later and never holds up
completion."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select

from quire.admission import tables
from quire.database import insert_if_absent

__all__ = ["queue_notification", "has_endpoint"]

_ENDPOINT = select(tables.notification_endpoints.c.tenant).where(
    tables.notification_endpoints.c.tenant == bindparam("tenant")
)


def has_endpoint(connection: Connection, tenant: str) -> bool:
    return connection.execute(_ENDPOINT, {"tenant": tenant}).first() is not None


def queue_notification(
    connection: Connection, *, tenant: str, subject: str, document: dict[str, Any]
) -> bool:
    """Queue ``document`` (a job's or batch's final status) for the tenant's
    endpoint. False when the tenant has none, or ``subject`` ("jobs/{job}",
    "batches/{batch}") already has its notification."""
    if not has_endpoint(connection, tenant):
        return False
    now = datetime.now(UTC)
    return insert_if_absent(
        connection,
        tables.notifications,
        {
            "tenant": tenant,
            "subject": subject,
            "delivery_id": secrets.token_hex(16),
            "payload": json.dumps(document, sort_keys=True, separators=(",", ":")).encode(),
            "created_at": now,
            "next_attempt_at": now,
            "attempts": 0,
        },
    )
