"""The validator's own tables: leases and its decisions."""

from __future__ import annotations

from sqlalchemy import JSON, Column, DateTime, Integer, MetaData, String, Table

from quire.leases import lease_table

__all__ = ["metadata", "leases", "validations"]

metadata = MetaData()
leases = lease_table(metadata)
validations = Table(
    "validations",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("verdict", String(16), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("findings", JSON, nullable=False),
    Column("lease_token", Integer, nullable=False),
    Column("decided_at", DateTime(timezone=True), nullable=False),
)
