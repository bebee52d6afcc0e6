"""AIP-158 paging, shared by every List RPC.

A page is asked for with ``page_size`` and ``page_token`` and answered with
``next_page_token`` (empty on the last page):

- ``page_size`` 0 means ``DEFAULT_PAGE_SIZE``; more than ``MAX_PAGE_SIZE`` is
  served as ``MAX_PAGE_SIZE`` (AIP-158 lets a server return fewer); a
  negative size is refused (INVALID_ARGUMENT, ``INVALID_PAGE``).
- A token carries the position of the last row served (its unique sort key),
  so the next page is a keyset query (``WHERE (created, id) > position``),
  never an OFFSET: rows added or removed meanwhile shift nothing, and nothing
  is served twice.
- A token is bound to the RPC and to the request's filter fields, and carries
  an HMAC: a token a client made up, changed, took from another List or from
  the same List under another filter is refused (INVALID_ARGUMENT,
  ``INVALID_PAGE``, a field violation on ``page_token``).

The HMAC key is derived from the service's identity private key, which every
replica of a service mounts from the same Secret: a token one replica issued
is honoured by another and after a restart. The position inside a token is
only authenticated, not hidden; it is the sort key of a row the caller was
just shown, never anything else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import ColumnElement, and_, or_

from quire.errors import FieldViolation, InvalidInput
from quire.identity import IdentitySettings, ServiceIdentity
from quire.reasons import ReasonCode

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "Page",
    "PageTokens",
    "Position",
    "keyset_after",
    "page_size",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_TOKEN_CHARS = 2048
"""A token longer than any this service issues is refused before decoding."""

Value = str | int | datetime
Position = tuple[Value, ...]
"""The sort key of the last row served, in the List's order."""
Filters = Mapping[str, str | int | bool]
"""The request fields (and caller scope) that choose which rows are listed."""

_FORMAT = b"quire-page-token/1"
_KEY_LABEL = b"quire.paging/hmac-key/1"
_MAC_BYTES = 32
Row = TypeVar("Row")


def page_size(requested: int) -> int:
    """The number of rows to serve for a request's ``page_size``."""
    if requested < 0:
        raise InvalidInput(
            ReasonCode.INVALID_PAGE,
            "page_size must not be negative",
            (FieldViolation("page_size", "must not be negative"),),
        )
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _refused(description: str) -> InvalidInput:
    return InvalidInput(
        ReasonCode.INVALID_PAGE,
        "page_token is not one this service issued for this request",
        (FieldViolation("page_token", description),),
    )


def _fingerprint(filters: Filters) -> str:
    canonical = json.dumps(dict(filters), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _encode_value(value: Value) -> Any:
    if isinstance(value, datetime):
        return {"t": value.isoformat()}
    return value


def _decode_value(value: Any) -> Value:
    if isinstance(value, dict) and isinstance(value.get("t"), str):
        return datetime.fromisoformat(value["t"])
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value
    raise ValueError("not a position value")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PageTokens:
    """Issues and opens one service's page tokens."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a page-token key needs at least 32 bytes")
        self._key = key

    @classmethod
    def from_identity(cls, identity: ServiceIdentity) -> PageTokens:
        """The key every replica of the service derives alike.

        Ed25519 signatures are deterministic (RFC 8032), so the identity's
        signature over a fixed label is a secret only the key's holders can
        compute, the same on every replica and after every restart; HKDF
        turns it into the HMAC key without exposing the private key itself.
        """
        seed = identity.sign(_KEY_LABEL)
        key = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=b"quire page tokens|" + identity.service.encode(),
        ).derive(seed)
        return cls(key)

    @classmethod
    def for_service(cls, settings: IdentitySettings | None) -> PageTokens:
        """The service's tokens, keyed from the identity it starts with."""
        if settings is None:
            raise RuntimeError("no service identity configured")
        return cls.from_identity(ServiceIdentity.load(settings))

    @classmethod
    def ephemeral(cls) -> PageTokens:
        """A random key: tokens hold only within this object (tests, one process)."""
        return cls(secrets.token_bytes(32))

    def page(self, rpc: str, size: int, token: str, filters: Filters | None = None) -> Page:
        """The page a request asks for; refuses a bad size or a token this
        service did not issue for ``rpc`` under the same ``filters``."""
        fingerprint = _fingerprint(filters or {})
        return Page(
            tokens=self,
            rpc=rpc,
            fingerprint=fingerprint,
            size=page_size(size),
            after=self._open(rpc, fingerprint, token) if token else None,
        )

    def issue(self, rpc: str, fingerprint: str, position: Position) -> str:
        payload = json.dumps(
            {"q": fingerprint, "p": [_encode_value(v) for v in position]},
            separators=(",", ":"),
        ).encode()
        mac = self._mac(rpc, payload)
        return base64.urlsafe_b64encode(payload + mac).decode().rstrip("=")

    def _mac(self, rpc: str, payload: bytes) -> bytes:
        message = b"\0".join((_FORMAT, rpc.encode(), payload))
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _open(self, rpc: str, fingerprint: str, token: str) -> Position:
        if len(token) > MAX_TOKEN_CHARS:
            raise _refused("not a page token")
        try:
            raw = _b64decode(token)
        except (binascii.Error, ValueError):
            raise _refused("not a page token") from None
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if len(raw) <= _MAC_BYTES or not hmac.compare_digest(mac, self._mac(rpc, payload)):
            raise _refused("not a page token of this List")
        try:
            fields = json.loads(payload)
            position = tuple(_decode_value(v) for v in fields["p"])
            issued_for = fields["q"]
        except (ValueError, KeyError, TypeError):
            raise _refused("not a page token") from None
        if issued_for != fingerprint:
            raise _refused("issued for a request with other filters")
        return position


@dataclass(frozen=True)
class Page:
    """One request's page: how many rows, after which position."""

    tokens: PageTokens
    rpc: str
    fingerprint: str
    size: int
    after: Position | None
    """None on the first page."""

    @property
    def fetch(self) -> int:
        """Rows to read: one more than served tells whether another page follows."""
        return self.size + 1

    def cut(
        self, rows: Sequence[Row], position: Callable[[Row], Position]
    ) -> tuple[list[Row], str]:
        """The rows to serve and the next page's token (empty when none follows).
        ``rows`` were read in order, ``fetch`` at most; ``position(row)`` is
        a row's sort key."""
        served = list(rows[: self.size])
        if len(rows) <= self.size or not served:
            return served, ""
        return served, self.next_token(position(served[-1]))

    def next_token(self, position: Position) -> str:
        return self.tokens.issue(self.rpc, self.fingerprint, position)


def keyset_after(
    columns: Sequence[Any], position: Position | None, *, descending: bool = False
) -> ColumnElement[bool] | None:
    """The rows after ``position`` in the order of ``columns`` (all ascending,
    or all descending): ``(a, b) > (x, y)`` written out, so that it means the
    same on SQLite and PostgreSQL. None on the first page."""
    if position is None:
        return None
    if len(position) != len(columns):
        raise _refused("not a page token of this List")
    terms = []
    for index, column in enumerate(columns):
        equal = [c == v for c, v in zip(columns[:index], position[:index], strict=True)]
        beyond = column < position[index] if descending else column > position[index]
        terms.append(and_(*equal, beyond))
    return or_(*terms)
