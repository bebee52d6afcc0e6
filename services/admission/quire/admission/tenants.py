"""Tenants and their bearer tokens. The tenant of a call always comes from its
token, never from the request body; tokens are stored as sha256 hashes."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
from sqlalchemy import select
from sqlalchemy.orm import Session

from quire.admission import tables
from quire.database import Database
from quire.errors import Unauthenticated

__all__ = ["Tenant", "TenantDirectory", "hash_token", "DEV_TENANT"]

log = logging.getLogger(__name__)
DEV_TENANT = "dev"
TOKEN_PREFIX = "qt_"


@dataclass(frozen=True)
class Tenant:
    id: str
    name: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TenantDirectory:
    def __init__(self, database: Database) -> None:
        self._db = database

    def create_tenant(self, name: str) -> tuple[Tenant, str]:
        """Create a tenant and its first token; the token is returned once, never stored."""
        tenant = Tenant(id=secrets.token_hex(8), name=name)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)

        def write(session: Session) -> None:
            session.execute(tables.tenants.insert().values(id=tenant.id, name=name, created_at=now))
            session.execute(
                tables.tokens.insert().values(
                    token_sha256=hash_token(token), tenant=tenant.id, created_at=now
                )
            )

        self._db.transaction(write)
        return tenant, token

    def ensure_dev_tenant(self, token_file: Path) -> None:
        """On first start, create the development tenant and write its token (mode 0600)."""
        exists = self._db.transaction(
            lambda s: s.execute(
                select(tables.tenants.c.id).where(tables.tenants.c.name == DEV_TENANT)
            ).first()
        )
        if exists is not None:
            return
        _tenant, token = self.create_tenant(DEV_TENANT)
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        log.info("development tenant created; its token is in %s", token_file)

    async def authenticate(self, context: grpc.aio.ServicerContext) -> Tenant:
        """The tenant of the bearer token in the call's metadata."""
        token = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                token = value.removeprefix("Bearer ").strip()
        if not token:
            raise Unauthenticated()
        digest = hash_token(token)

        def read(session: Session) -> Tenant | None:
            row = session.execute(
                select(tables.tenants.c.id, tables.tenants.c.name)
                .join(tables.tokens, tables.tokens.c.tenant == tables.tenants.c.id)
                .where(tables.tokens.c.token_sha256 == digest, tables.tokens.c.revoked_at.is_(None))
            ).first()
            return None if row is None else Tenant(id=row.id, name=row.name)

        tenant = await self._db.run(read)
        if tenant is None:
            raise Unauthenticated()
        return tenant
