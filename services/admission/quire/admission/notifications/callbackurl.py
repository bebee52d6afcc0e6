"""Which callback URLs a tenant may register for its completion notifications.

https only, so the signed status travels encrypted; plain http only to a
loopback address and only where the operator allows it (the embedded stack:
a receiver on the same machine). No user name or password in the URL (they
would be stored and logged as part of it), no fragment (never sent), at most
2,048 characters. Its host must not be, nor resolve to, an address Quire
does not call (``quire.egress``: loopback, private, link-local... unless the
operator allows the network); the notifier checks again on every connection.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from quire.egress import EgressPolicy
from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode

__all__ = ["MAX_URL_CHARS", "check_callback_url", "check_callback_destination", "redacted"]

MAX_URL_CHARS = 2048
FIELD = "url"


def _refuse(description: str) -> InvalidInput:
    return InvalidInput(
        ReasonCode.INVALID_NOTIFICATION_URL,
        f"url: {description}",
        (FieldViolation(FIELD, description),),
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_callback_url(url: str, *, allow_loopback_http: bool) -> str:
    """``url`` when a tenant may register it; INVALID_ARGUMENT
    (``INVALID_NOTIFICATION_URL``, a field violation on ``url``) otherwise."""
    if len(url) > MAX_URL_CHARS:
        raise _refuse(f"longer than {MAX_URL_CHARS} characters")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise _refuse("contains spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise _refuse("not a valid URL") from None
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise _refuse("must be an absolute https:// URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _refuse("must not carry a user name or password")
    if parts.fragment or url.endswith("#"):
        raise _refuse("must not have a fragment")
    if parts.scheme == "http" and not (allow_loopback_http and _is_loopback(host)):
        raise _refuse("must use https")
    return url


async def check_callback_destination(url: str, egress: EgressPolicy) -> None:
    """Refuse (``INVALID_NOTIFICATION_URL``) a checked URL whose host is, or
    resolves to, an address the egress policy does not allow."""
    refusal = await egress.refusal_of_url(url)
    if refusal is not None:
        raise _refuse(refusal)


def redacted(url: str) -> str:
    """The URL without its query (which may hold a token of the tenant's): safe to log."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}"
