"""Signed completion notifications: how Quire signs each POST to a tenant's
callback URL, and how the receiver checks it. Standard library only, so a
receiver can import it (``pip install quire-core``) or copy it.

Each POST carries::

    Content-Type:       application/json
    Quire-Delivery-Id:  <32 hex digits; the same on every retry of one notification>
    Quire-Signature:    t=<unix seconds>,v1=<64 hex digits>

where ``v1`` is ``HMAC-SHA256(key, f"{t}.{delivery_id}.".encode() + body)``,
``body`` the raw request body and ``key`` the tenant's notification secret
exactly as ``SetNotificationEndpoint`` showed it, as UTF-8 bytes. The
receiver:

1. recomputes ``v1`` over the raw body and compares in constant time
   (a tampered body, id or timestamp, or another secret, fails);
2. refuses a ``t`` more than ``tolerance`` seconds from its own clock (a
   captured request cannot be replayed later);
3. remembers the delivery ids it acted on, for longer than the tolerance,
   and does not act twice on one (a replay within the tolerance, or Quire's
   own retry of a delivery whose reply it never got). It answers such a
   repeat 2xx, so that Quire stops retrying, and does nothing.

Several ``v1=`` entries may appear (reserved for a rotation overlap); one
matching is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TOLERANCE_SECONDS",
    "ReplayGuard",
    "ReplayedNotification",
    "SignatureRejected",
    "sign",
    "signature_header",
    "verify",
]

DELIVERY_HEADER = "Quire-Delivery-Id"
SIGNATURE_HEADER = "Quire-Signature"
TOLERANCE_SECONDS = 300
"""How far a notification's timestamp may be from the receiver's clock."""
SCHEME = "v1"
MAX_HEADER = 1024


class SignatureRejected(ValueError):
    """The notification is not from Quire with this secret, or is stale."""


class ReplayedNotification(SignatureRejected):
    """A valid notification whose delivery id was already acted on."""


def sign(secret: str, delivery_id: str, body: bytes, timestamp: int) -> str:
    """The ``v1`` signature (64 hex digits) of ``body`` sent at ``timestamp``."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, delivery_id: str, body: bytes, timestamp: int) -> str:
    """The ``Quire-Signature`` header's value."""
    return f"t={timestamp},{SCHEME}={sign(secret, delivery_id, body, timestamp)}"


def _parse(header: str) -> tuple[int, list[str]]:
    if len(header) > MAX_HEADER:
        raise SignatureRejected("signature header too long")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == SCHEME:
            signatures.append(value)
    if timestamp is None or not signatures:
        raise SignatureRejected("signature header lacks t= or v1=")
    return timestamp, signatures


def verify(
    secret: str,
    body: bytes,
    *,
    delivery_id: str,
    signature: str,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> dict[str, Any]:
    """The notification's JSON document, once its signature and timestamp
    check out; ``SignatureRejected`` otherwise. Replays are the caller's to
    refuse (``ReplayGuard``)."""
    timestamp, candidates = _parse(signature)
    expected = sign(secret, delivery_id, body, timestamp)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise SignatureRejected("signature does not match")
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance:
        raise SignatureRejected("timestamp outside the tolerance")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise SignatureRejected("body is not a JSON object")
    return document


class ReplayGuard:
    """The delivery ids a receiver has acted on (in memory, bounded; a real
    receiver keeps them in its database, next to what it did)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def first_time(self, delivery_id: str) -> None:
        """Record ``delivery_id``; ``ReplayedNotification`` if it was seen before."""
        with self._lock:
            if delivery_id in self._seen:
                raise ReplayedNotification("delivery id already seen")
            self._seen[delivery_id] = None
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
