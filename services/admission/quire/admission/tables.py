"""Admission's own tables: tenants, token hashes, uploaded sources, job intake."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)

__all__ = ["metadata", "tenants", "tokens", "sources", "jobs"]

metadata = MetaData()
tenants = Table(
    "tenants",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
# Only the sha256 of a bearer token is stored.
tokens = Table(
    "tokens",
    metadata,
    Column("token_sha256", String(64), primary_key=True),
    Column("tenant", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)
sources = Table(
    "sources",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("sha256", String(64), primary_key=True),
    Column("size_bytes", BigInteger, nullable=False),
    Column("content_type", String(128), nullable=False),
    Column("blob_key", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
# The idempotency key is a unique constraint, so two identical submissions
# racing each other still make one job.
jobs = Table(
    "jobs",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("tenant", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("request_sha256", String(64), nullable=False),
    Column("manifest_digest", String(64), nullable=False),
    Column("item_count", Integer, nullable=False),
    Column("task", LargeBinary, nullable=False),
    Column("accepted_event", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("dispatched_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("tenant", "request_id", name="uq_jobs_tenant_request"),
)
