"""Request ids (AIP-155) for creates and operators' mutations: a retry after a
lost reply gets the first reply back instead of a second effect.

Each service keeps its own ``request_ids`` table (``request_ids_table``). A
row is keyed by (scope, method, request_id): the scope is the tenant for a
tenant's call and ``OPERATORS`` for an operator's, so one tenant's ids never
meet another's. The row holds the sha256 of the request (request_id left
out) and the serialized reply.

The same semantics as ``SubmitJob``'s idempotency keys:

- the same id and the same request return the stored reply, no second effect;
- the same id with a different request is refused: ALREADY_EXISTS,
  ``IDEMPOTENCY_KEY_REUSED``;
- a request that fails stores nothing, so its retry runs again;
- an id is remembered for ``WINDOW`` (as ``SubmitJob``'s default window);
  after that it is new again.

One difference: on these calls ``request_id`` is optional (AIP-155: "should",
and the calls existed before the field); an empty id means no deduplication.
Quire's own client and CLI always send one.

``RequestOnce.run`` claims the id first, inside the transaction that makes
the effect (INSERT ... ON CONFLICT DO NOTHING on the primary key): of two
identical requests racing, one makes the effect and the other waits for its
commit and replays it. Calls whose effect spans several transactions and a
publish (a dead-letter retry, a review decision, a cancel) use ``replayed``
before and ``remember`` after; their steps are idempotent by state already,
the request id keeps a later retry of the same request from acting again
once the state has moved on (a job that died again is not retried twice).

Replies that carry a secret (a new tenant's or token's bearer token) are
stored without it: only the token's hash is ever kept, so a replay returns
the same tenant or token with the secret left out (``keep`` strips it and
marks the reply). Whoever lost the first reply revokes that token and
creates another.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from google.protobuf.message import Message
from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from quire.database import Database, as_utc, insert_if_absent
from quire.errors import Conflict, FieldViolation, InvalidInput
from quire.reasons import ReasonCode

__all__ = [
    "MAX_REQUEST_ID",
    "OPERATORS",
    "WINDOW",
    "RequestOnce",
    "check_request_id",
    "request_ids_table",
    "request_sha256",
]

MAX_REQUEST_ID = 128
"""As ``SubmitJob``'s: a UUID fits with room to spare."""
OPERATORS = "operators"
"""The scope of operators' calls: any operator token may finish another's retry."""
WINDOW = timedelta(hours=24)
"""How long a request id is remembered (``SubmitJob``'s default window)."""

M = TypeVar("M", bound=Message)


def request_ids_table(metadata: MetaData) -> Table:
    """The service's table of remembered request ids, on its own ``metadata``."""
    return Table(
        "request_ids",
        metadata,
        Column("scope", String(64), primary_key=True),
        Column("method", String(128), primary_key=True),
        Column("request_id", String(MAX_REQUEST_ID), primary_key=True),
        Column("request_sha256", String(64), nullable=False),
        # The serialized reply; empty only inside the transaction that claims it.
        Column("response", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Index("ix_request_ids_created", "created_at"),
    )


def check_request_id(request_id: str, *, required: bool = False) -> None:
    """INVALID_ARGUMENT for an id longer than ``MAX_REQUEST_ID``, one with a
    character of Unicode's "other" categories (controls such as NUL, format
    characters such as a right-to-left override, unassigned code points), or a
    missing one where ``required``, with ``SubmitJob``'s reason codes."""
    if not request_id and required:
        raise InvalidInput(
            ReasonCode.REQUEST_ID_MISSING,
            "request_id is required",
            (FieldViolation("request_id", "required"),),
        )
    if len(request_id) > MAX_REQUEST_ID:
        raise InvalidInput(
            ReasonCode.REQUEST_ID_TOO_LONG,
            f"request_id is limited to {MAX_REQUEST_ID} characters",
            (FieldViolation("request_id", "too long"),),
        )
    # Printable ASCII holds no control character: most ids are told at once.
    if not (request_id.isascii() and request_id.isprintable()) and any(
        unicodedata.category(character).startswith("C") for character in request_id
    ):
        raise InvalidInput(
            ReasonCode.REQUEST_ID_INVALID,
            "request_id may hold only printable characters",
            (FieldViolation("request_id", "unprintable character"),),
        )


def request_sha256(request: Message) -> str:
    """The request's fingerprint: its deterministic wire form without its request_id."""
    body = type(request)()
    body.CopyFrom(request)
    body.ClearField("request_id")  # type: ignore[arg-type]
    return hashlib.sha256(body.SerializeToString(deterministic=True)).hexdigest()


def _same(reply: M) -> M:
    return reply


@dataclass(frozen=True)
class RequestOnce(Generic[M]):
    """One call's request id: where it is remembered and what its reply is."""

    table: Table
    scope: str
    method: str
    request: Message
    reply_type: type[M]
    keep: Callable[[M], M] = field(default=_same)
    """What of the reply is stored and replayed (secrets are left out)."""

    def __post_init__(self) -> None:
        check_request_id(self.request_id)

    @property
    def request_id(self) -> str:
        return str(getattr(self.request, "request_id", ""))

    def run(self, connection: Connection, act: Callable[[], M]) -> M:
        """The stored reply of this request, or ``act``'s, remembered; in the
        caller's transaction, which must be the one ``act`` writes in."""
        if not self.request_id:
            return act()
        replay = self._claim(connection)
        if replay is not None:
            return replay
        reply = act()
        connection.execute(
            update(self.table)
            .where(*self._where())
            .values(response=self.keep(reply).SerializeToString())
        )
        return reply

    def replayed(self, connection: Connection) -> M | None:
        """The reply this request got before, if remembered; refuses the id
        reused for a different request."""
        if not self.request_id:
            return None
        row = connection.execute(select(self.table).where(*self._where())).first()
        if row is None or as_utc(row.created_at) <= datetime.now(UTC) - WINDOW:
            return None
        return self._reply(row)

    async def around(self, database: Database, act: Callable[[], Awaitable[M]]) -> M:
        """For an effect that spans several transactions: the reply remembered
        for this request, or ``act``'s, remembered after it (a crash in between
        leaves a retry to the effect's own state checks)."""
        replay = await database.read(self.replayed)
        if replay is not None:
            return replay
        reply = await act()
        return await database.run(lambda s: self.remember(s, reply))

    def remember(self, connection: Connection, reply: M) -> M:
        """Store ``reply`` as this request's; if a concurrent identical request
        stored one first, that one is the answer."""
        if not self.request_id:
            return reply
        replay = self._claim(connection, self.keep(reply).SerializeToString())
        return reply if replay is None else replay

    def _claim(self, connection: Connection, response: bytes = b"") -> M | None:
        """Take the id for this request (None), or the reply it already has."""
        now = datetime.now(UTC)
        connection.execute(
            delete(self.table).where(*self._where(), self.table.c.created_at <= now - WINDOW)
        )
        claimed = insert_if_absent(
            connection,
            self.table,
            {
                "scope": self.scope,
                "method": self.method,
                "request_id": self.request_id,
                "request_sha256": request_sha256(self.request),
                "response": response,
                "created_at": now,
            },
        )
        if claimed:
            return None
        row = connection.execute(select(self.table).where(*self._where())).one()
        return self._reply(row)

    def _reply(self, row: object) -> M:
        if row.request_sha256 != request_sha256(self.request):  # type: ignore[attr-defined]
            raise Conflict(
                ReasonCode.IDEMPOTENCY_KEY_REUSED, "request_id was used for a different request"
            )
        return self.reply_type.FromString(row.response)  # type: ignore[attr-defined]

    def _where(self) -> tuple[ColumnElement[bool], ...]:
        columns = self.table.c
        return (
            columns.scope == self.scope,
            columns.method == self.method,
            columns.request_id == self.request_id,
        )
