"""The assembler's own tables: leases and the packets it made."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, String, Table

from quire.diagnosticstore import diagnostic_tables
from quire.leases import lease_table

__all__ = ["MIGRATIONS", "metadata", "leases", "diagnostics", "assemblies"]

metadata = MetaData()
MIGRATIONS = Path(__file__).with_name("migrations")
"""This service's chain of schema migrations (``quire.migrations``)."""
leases = lease_table(metadata)
diagnostics = diagnostic_tables(metadata)
"""Failed deliveries' error texts, for operators (``quire.diagnosticstore``)."""
assemblies = Table(
    "assemblies",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("blob_key", String(256), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("page_count", Integer, nullable=False),
    Column("lease_token", Integer, nullable=False),
    Column("assembled_at", DateTime(timezone=True), nullable=False),
)
