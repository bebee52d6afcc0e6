"""Tenants, their limits and their bearer tokens.

The tenant of a call always comes from its token, never from the request
body. Tokens look like ``qt_<id>_<secret>``: the id names the token (for
listing and revoking) and is harmless to show; only the sha256 of the whole
token is stored. A tenant may hold several valid tokens at once, which is how
tokens rotate without downtime. Operator tokens (role ``operator``) call the
admin API and belong to no tenant; so do reviewer tokens (role ``reviewer``),
which make review calls only and are refused every other staff call
(``REVIEWER_NOT_ALLOWED``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
from sqlalchemy import Connection, bindparam, select, update

from quire.admission import tables
from quire.admission.settings import AdmissionSettings, read_secret_file
from quire.admission.tenants.storagepolicy import (
    TenantStorage,
    forget_source,
    read_storage,
    write_storage,
)
from quire.database import Database, insert_if_absent
from quire.errors import InvalidInput, InvalidSetting, NotFound, Unauthenticated
from quire.operatorcheck import refuse_reviewer
from quire.paging import Position, keyset_after
from quire.reasons import ReasonCode

__all__ = [
    "Tenant",
    "TokenRecord",
    "TenantDirectory",
    "hash_token",
    "DEV_TENANT",
    "OPERATOR_ROLE",
    "REVIEWER_ROLE",
    "TENANT_ROLE",
]

log = logging.getLogger(__name__)
DEV_TENANT = "dev"
TENANT_ROLE = "tenant"
OPERATOR_ROLE = "operator"
REVIEWER_ROLE = "reviewer"
STAFF_ROLES = (OPERATOR_ROLE, REVIEWER_ROLE)
T = TypeVar("T")
_TENANT_OF_TOKEN = (
    select(tables.tenants)
    .join(tables.tokens, tables.tokens.c.tenant == tables.tenants.c.id)
    .where(
        tables.tokens.c.token_sha256 == bindparam("digest"),
        tables.tokens.c.role == TENANT_ROLE,
        tables.tokens.c.revoked_at.is_(None),
    )
)
"""Built once: every call whose token is not cached, every upload's recheck."""


@dataclass(frozen=True)
class Tenant:
    """A tenant as stored; a limit of None (or 0) follows the service's default."""

    id: str
    name: str
    max_upload_bytes: int | None = None
    max_outstanding_jobs: int | None = None
    created_at: datetime | None = None
    scheduling_weight: int | None = None
    """Its share of batch dispatch against other tenants' (None: 1)."""

    def upload_ceiling(self, settings: AdmissionSettings) -> int:
        return self.max_upload_bytes or settings.max_upload_bytes

    def outstanding_quota(self, settings: AdmissionSettings) -> int:
        return self.max_outstanding_jobs or settings.max_outstanding_jobs


@dataclass(frozen=True)
class TokenRecord:
    """A bearer token as listed: its id, never its secret. ``tenant`` is None for
    an operator's or a reviewer's token."""

    token_id: str
    tenant: str | None
    created_at: datetime
    revoked_at: datetime | None
    role: str = TENANT_ROLE


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> tuple[str, str]:
    token_id = secrets.token_hex(6)
    return token_id, f"qt_{token_id}_{secrets.token_urlsafe(32)}"


CONFIGURED_TOKEN = re.compile(r"qt_([0-9a-f]{12})_[A-Za-z0-9_-]{32,}")
"""A token made elsewhere, for a Secret: an id of 12 hex digits and at least
32 URL-safe characters of secret, as ``secrets.token_hex(6)`` and
``secrets.token_urlsafe(32)`` make them (the Kubernetes guide, ``docs/guides/kubernetes.md``, shows one way)."""


def configured_operator_token(path: Path | None) -> str | None:
    """The operator token in ``QUIRE_OPERATOR_TOKEN_FILE``, checked for its
    shape; read in ``main``, before anything connects."""
    if path is None:
        return None
    token = read_secret_file(path, "QUIRE_OPERATOR_TOKEN_FILE")
    if CONFIGURED_TOKEN.fullmatch(token) is None:
        raise InvalidSetting(
            "QUIRE_OPERATOR_TOKEN_FILE", "a token qt_<12 hex digits>_<32 or more of A-Za-z0-9_->"
        )
    return token


def _write_secret(path: Path, secret: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")


def _bearer(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value.removeprefix("Bearer ").strip()
    return ""


def _tenant(row: object) -> Tenant:
    return Tenant(
        id=row.id,  # type: ignore[attr-defined]
        name=row.name,  # type: ignore[attr-defined]
        max_upload_bytes=row.max_upload_bytes,  # type: ignore[attr-defined]
        max_outstanding_jobs=row.max_outstanding_jobs,  # type: ignore[attr-defined]
        created_at=row.created_at,  # type: ignore[attr-defined]
        scheduling_weight=row.scheduling_weight,  # type: ignore[attr-defined]
    )


MAX_CACHED_TOKENS = 10_000
AUTH_CACHE_SECONDS = 1.0
"""How long a verified tenant token is trusted without reading the database
again. Every upload, submission and status call authenticates, and a read
transaction costs more than the rest of a small call; a token revoked through
this process is forgotten at once, one revoked elsewhere (another replica, the
operator CLI) within this many seconds. A token's limits are cached with it."""


class TenantDirectory:
    """Admission's tenants and tokens: writes them, and finds the tenant (or
    operator) behind a call's bearer token, caching a verified one briefly."""

    def __init__(self, database: Database, *, cache_seconds: float = AUTH_CACHE_SECONDS) -> None:
        self._db = database
        self._cache_seconds = cache_seconds
        self._verified: dict[str, tuple[float, Tenant]] = {}

    # -- tenants ---------------------------------------------------------

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction: the ``*_in`` methods, composed with
        something else written in the same transaction (a request id)."""
        return self._db.transaction(work)

    def forget_verified(self) -> None:
        """Drop the cached tokens and limits (after a change to either)."""
        self._verified.clear()

    def create_tenant(
        self,
        name: str,
        *,
        max_upload_bytes: int = 0,
        max_outstanding_jobs: int = 0,
        storage: TenantStorage | None = None,
        scheduling_weight: int = 0,
    ) -> tuple[Tenant, str]:
        """Create a tenant and its first token; the token is returned once, never stored.
        ``storage`` sets its own quota and retention periods."""
        return self._db.transaction(
            lambda s: self.create_tenant_in(
                s,
                name,
                max_upload_bytes=max_upload_bytes,
                max_outstanding_jobs=max_outstanding_jobs,
                storage=storage,
                scheduling_weight=scheduling_weight,
            )
        )

    def create_tenant_in(
        self,
        connection: Connection,
        name: str,
        *,
        max_upload_bytes: int = 0,
        max_outstanding_jobs: int = 0,
        storage: TenantStorage | None = None,
        scheduling_weight: int = 0,
    ) -> tuple[Tenant, str]:
        """``create_tenant`` in the caller's transaction; a ``scheduling_weight``
        of 0 is the default (checked by the caller: ``admin``)."""
        if not name or len(name) > 128:
            raise InvalidInput(ReasonCode.INVALID_TENANT, "a tenant name of 1 to 128 characters")
        tenant = Tenant(
            id=secrets.token_hex(8),
            name=name,
            max_upload_bytes=max_upload_bytes or None,
            max_outstanding_jobs=max_outstanding_jobs or None,
            created_at=datetime.now(UTC),
            scheduling_weight=scheduling_weight or None,
        )

        def write(connection: Connection) -> str:
            taken = connection.execute(
                select(tables.tenants.c.id).where(tables.tenants.c.name == name)
            ).first()
            if taken is not None:
                raise InvalidInput(ReasonCode.INVALID_TENANT, "a tenant with this name exists")
            connection.execute(
                tables.tenants.insert().values(
                    id=tenant.id,
                    name=name,
                    max_upload_bytes=tenant.max_upload_bytes,
                    max_outstanding_jobs=tenant.max_outstanding_jobs,
                    created_at=tenant.created_at,
                    scheduling_weight=tenant.scheduling_weight,
                )
            )
            if storage is not None and storage != TenantStorage():
                write_storage(connection, tenant.id, **storage.__dict__)
            return self._issue(connection, TENANT_ROLE, tenant.id)

        return tenant, write(connection)

    def list_tenants(
        self, *, after: Position | None = None, limit: int | None = None
    ) -> list[tuple[Tenant, list[TokenRecord]]]:
        """Tenants in creation order (``(created_at, id)``, a unique key, so
        pages of ListTenants never overlap), after ``after``, with their tokens."""
        table = tables.tenants
        order = (table.c.created_at, table.c.id)

        def read(connection: Connection) -> list[tuple[Tenant, list[TokenRecord]]]:
            query = select(table).order_by(*order).limit(limit)
            beyond = keyset_after(order, after)
            if beyond is not None:
                query = query.where(beyond)
            tenants = connection.execute(query).all()
            tokens = connection.execute(
                select(tables.tokens).where(
                    tables.tokens.c.role == TENANT_ROLE,
                    tables.tokens.c.tenant.in_([row.id for row in tenants]),
                )
            ).all()
            return [
                (
                    _tenant(row),
                    [
                        TokenRecord(t.token_id, t.tenant, t.created_at, t.revoked_at)
                        for t in tokens
                        if t.tenant == row.id
                    ],
                )
                for row in tenants
            ]

        return self._db.transaction(read)

    def storage(self, tenant_ids: list[str]) -> dict[str, TenantStorage]:
        """Each tenant's own quota and retention periods (None: the default)."""
        return self._db.transaction(lambda s: read_storage(s, tenant_ids))

    def update_retention(self, tenant_id: str, **periods: int) -> TenantStorage:
        """Set the tenant's retention periods (seconds; 0 is the default)."""
        self._require(tenant_id)
        return self._db.transaction(lambda s: write_storage(s, tenant_id, **periods))

    @staticmethod
    def update_retention_in(
        connection: Connection, tenant_id: str, **periods: int
    ) -> tuple[Tenant, TenantStorage]:
        """``update_retention`` in the caller's transaction; the tenant too."""
        row = connection.execute(
            select(tables.tenants).where(tables.tenants.c.id == tenant_id)
        ).first()
        if row is None:
            raise NotFound("tenant not found")
        return _tenant(row), write_storage(connection, tenant_id, **periods)

    def forget_source(self, tenant_id: str, sha256: str) -> bool:
        """Forget an upload whose bytes were retired (see ``storagepolicy``)."""
        return self._db.transaction(lambda s: forget_source(s, tenant_id, sha256))

    def _require(self, tenant_id: str) -> None:
        exists = self._db.transaction(
            lambda s: s.execute(
                select(tables.tenants.c.id).where(tables.tenants.c.id == tenant_id)
            ).first()
        )
        if exists is None:
            raise NotFound("tenant not found")

    def update_limits(
        self,
        tenant_id: str,
        *,
        max_upload_bytes: int,
        max_outstanding_jobs: int,
        storage_quota_bytes: int | None = None,
        scheduling_weight: int = 0,
    ) -> Tenant:
        """Set the tenant's limits; a ``storage_quota_bytes`` of 0 is the default,
        None leaves it as it is; a ``scheduling_weight`` of 0 is the default, 1."""
        tenant = self._db.transaction(
            lambda s: self.update_limits_in(
                s,
                tenant_id,
                max_upload_bytes=max_upload_bytes,
                max_outstanding_jobs=max_outstanding_jobs,
                storage_quota_bytes=storage_quota_bytes,
                scheduling_weight=scheduling_weight,
            )
        )
        self._verified.clear()
        return tenant

    @staticmethod
    def update_limits_in(
        connection: Connection,
        tenant_id: str,
        *,
        max_upload_bytes: int,
        max_outstanding_jobs: int,
        storage_quota_bytes: int | None = None,
        scheduling_weight: int = 0,
    ) -> Tenant:
        """``update_limits`` in the caller's transaction (then ``forget_verified``)."""

        def write(connection: Connection) -> Tenant:
            done = connection.execute(
                update(tables.tenants)
                .where(tables.tenants.c.id == tenant_id)
                .values(
                    max_upload_bytes=max_upload_bytes or None,
                    max_outstanding_jobs=max_outstanding_jobs or None,
                    scheduling_weight=scheduling_weight or None,
                )
                .returning(tables.tenants.c.id)
            ).first()
            if done is None:
                raise NotFound("tenant not found")
            if storage_quota_bytes is not None:
                write_storage(connection, tenant_id, storage_quota_bytes=storage_quota_bytes)
            row = connection.execute(
                select(tables.tenants).where(tables.tenants.c.id == tenant_id)
            ).one()
            return _tenant(row)

        return write(connection)

    # -- tokens ----------------------------------------------------------

    def _issue(self, connection: Connection, role: str, tenant: str | None) -> str:
        token_id, token = _new_token()
        connection.execute(
            tables.tokens.insert().values(
                token_sha256=hash_token(token),
                token_id=token_id,
                role=role,
                tenant=tenant,
                created_at=datetime.now(UTC),
            )
        )
        return token

    def create_token(self, tenant_id: str) -> tuple[TokenRecord, str]:
        """A further valid token for a tenant (rotation: the old one stays valid)."""
        return self._db.transaction(lambda s: self.create_token_in(s, tenant_id))

    def create_token_in(self, connection: Connection, tenant_id: str) -> tuple[TokenRecord, str]:
        """``create_token`` in the caller's transaction."""

        def write(connection: Connection) -> str:
            exists = connection.execute(
                select(tables.tenants.c.id).where(tables.tenants.c.id == tenant_id)
            ).first()
            if exists is None:
                raise NotFound("tenant not found")
            return self._issue(connection, TENANT_ROLE, tenant_id)

        token = write(connection)
        token_id = token.split("_")[1]
        return TokenRecord(token_id, tenant_id, datetime.now(UTC), None), token

    def create_reviewer_token_in(self, connection: Connection) -> tuple[TokenRecord, str]:
        """A reviewer's token, in the caller's transaction: no tenant's, good
        for review calls only."""
        token = self._issue(connection, REVIEWER_ROLE, None)
        record = TokenRecord(token.split("_")[1], None, datetime.now(UTC), None, REVIEWER_ROLE)
        return record, token

    def revoke_token(self, tenant_id: str, token_id: str) -> TokenRecord:
        record = self._db.transaction(lambda s: self.revoke_token_in(s, tenant_id, token_id))
        self._verified.clear()
        return record

    @staticmethod
    def revoke_token_in(
        connection: Connection, tenant_id: str | None, token_id: str, role: str = TENANT_ROLE
    ) -> TokenRecord:
        """``revoke_token`` in the caller's transaction (then ``forget_verified``);
        a reviewer's token with ``role`` reviewer and no ``tenant_id``."""

        def write(connection: Connection) -> TokenRecord:
            table = tables.tokens
            row = connection.execute(
                select(table).where(
                    table.c.token_id == token_id,
                    table.c.tenant == tenant_id,  # IS NULL for a reviewer's
                    table.c.role == role,
                )
            ).first()
            if row is None:
                raise NotFound("token not found")
            revoked = row.revoked_at or datetime.now(UTC)
            connection.execute(
                update(table).where(table.c.token_id == token_id).values(revoked_at=revoked)
            )
            return TokenRecord(token_id, tenant_id, row.created_at, revoked, role)

        return write(connection)

    # -- first start -----------------------------------------------------

    def ensure_bootstrap(self, service_dir: Path, operator_token: str | None = None) -> None:
        """With ``operator_token`` (from a mounted Secret): make sure it is a
        valid operator token, on every replica and every start, and nothing
        else; it is never written anywhere. Without it, on first start: the
        development tenant and an operator token, written (mode 0600) into the
        service directory for ``quire up`` and the CLI."""
        if operator_token is not None:
            self._ensure_configured_operator(operator_token)
            return

        def missing(connection: Connection) -> tuple[bool, bool]:
            dev = connection.execute(
                select(tables.tenants.c.id).where(tables.tenants.c.name == DEV_TENANT)
            ).first()
            operator = connection.execute(
                select(tables.tokens.c.token_id).where(tables.tokens.c.role == OPERATOR_ROLE)
            ).first()
            return dev is None, operator is None

        need_dev, need_operator = self._db.transaction(missing)
        if need_dev:
            _tenant_row, token = self.create_tenant(DEV_TENANT)
            _write_secret(service_dir / "dev-token", token)
            log.info("development tenant created; its token is in dev-token")
        if need_operator:
            token = self._db.transaction(lambda s: self._issue(s, OPERATOR_ROLE, None))
            _write_secret(service_dir / "operator-token", token)
            log.info("operator token created in operator-token")

    def _ensure_configured_operator(self, token: str) -> None:
        shape = CONFIGURED_TOKEN.fullmatch(token)
        if shape is None:
            raise InvalidSetting(
                "QUIRE_OPERATOR_TOKEN_FILE",
                "a token qt_<12 hex digits>_<32 or more of A-Z a-z 0-9 _ ->",
            )
        row = {
            "token_sha256": hash_token(token),
            "token_id": shape.group(1),
            "role": OPERATOR_ROLE,
            "tenant": None,
            "created_at": datetime.now(UTC),
        }

        def write(connection: Connection) -> tuple[bool, Any]:
            inserted = insert_if_absent(connection, tables.tokens, row)
            stored = connection.execute(
                select(tables.tokens.c.role, tables.tokens.c.revoked_at).where(
                    tables.tokens.c.token_sha256 == row["token_sha256"]
                )
            ).first()
            return inserted, stored

        inserted, stored = self._db.transaction(write)
        if stored is None or stored.role != OPERATOR_ROLE:
            raise InvalidSetting(
                "QUIRE_OPERATOR_TOKEN_FILE", "a token whose id no other token already has"
            )
        if inserted:
            log.info("configured operator token %s installed", shape.group(1))
        elif stored.revoked_at is not None:
            log.warning("the configured operator token %s was revoked", shape.group(1))

    # -- authentication --------------------------------------------------

    async def authenticate(self, context: grpc.aio.ServicerContext) -> Tenant:
        """The tenant of the bearer token in the call's metadata."""
        digest = hash_token(_bearer(context) or "-")

        def read(connection: Connection) -> Tenant | None:
            row = connection.execute(_TENANT_OF_TOKEN, {"digest": digest}).first()
            return None if row is None else _tenant(row)

        now = time.monotonic()
        cached = self._verified.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        tenant = await self._db.read(read)
        if tenant is None:
            self._verified.pop(digest, None)
            raise Unauthenticated()
        if len(self._verified) >= MAX_CACHED_TOKENS:
            self._verified.clear()  # simple and bounded; the next calls refill it
        self._verified[digest] = (now + self._cache_seconds, tenant)
        return tenant

    async def reauthenticate(self, context: grpc.aio.ServicerContext) -> Tenant:
        """``authenticate`` from the database, not the cache: for a call that
        outlived the check at its start (an upload), so a token revoked
        meanwhile, on any replica, is refused (UNAUTHENTICATED)."""
        self._verified.pop(hash_token(_bearer(context) or "-"), None)
        return await self.authenticate(context)

    async def authenticate_operator(self, context: grpc.aio.ServicerContext) -> str:
        """The id of the caller's operator token; PERMISSION_DENIED for a
        reviewer's (``REVIEWER_NOT_ALLOWED``)."""
        token_id, role = await self.authenticate_staff(context)
        if role != OPERATOR_ROLE:
            raise refuse_reviewer()
        return token_id

    async def authenticate_staff(self, context: grpc.aio.ServicerContext) -> tuple[str, str]:
        """The id and role of the caller's operator or reviewer token."""
        digest = hash_token(_bearer(context) or "-")

        def read(connection: Connection) -> Any:
            return connection.execute(
                select(tables.tokens.c.token_id, tables.tokens.c.role).where(
                    tables.tokens.c.token_sha256 == digest,
                    tables.tokens.c.role.in_(STAFF_ROLES),
                    tables.tokens.c.revoked_at.is_(None),
                )
            ).first()

        row = await self._db.read(read)
        if row is None:
            raise Unauthenticated("missing or invalid operator token")
        return row.token_id, row.role
