"""The signer's own tables: leases, key versions and one signature per job."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from quire.diagnosticstore import diagnostic_tables
from quire.idempotency import request_ids_table
from quire.leases import lease_table

__all__ = [
    "MIGRATIONS",
    "metadata",
    "leases",
    "diagnostics",
    "signing_keys",
    "signatures",
    "request_ids",
    "witness_heads",
    "witnessed",
    "witness_log_key",
]

metadata = MetaData()
MIGRATIONS = Path(__file__).with_name("migrations")
"""This service's chain of schema migrations (``quire.migrations``)."""
leases = lease_table(metadata)
diagnostics = diagnostic_tables(metadata)
"""Failed deliveries' error texts, for operators (``quire.diagnosticstore``)."""
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("version", String(32), primary_key=True),
    Column("certificate_sha256", String(64), nullable=False, unique=True),
    Column("certificate_pem", Text, nullable=False),
    Column("key_path", String(512), nullable=False),
    Column("cert_path", String(512), nullable=False),
    Column("signer_identity", String(256), nullable=False),
    Column("not_before", DateTime(timezone=True), nullable=False),
    Column("not_after", DateTime(timezone=True), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
# One row per job: the intent is recorded before signing, the artifact after.
signatures = Table(
    "signatures",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("key_version", String(32), nullable=False),
    Column("blob_key", String(256), nullable=False),
    Column("sha256", String(64), nullable=True),
    Column("size_bytes", BigInteger, nullable=True),
    Column("page_count", Integer, nullable=True),
    Column("certificate_sha256", String(64), nullable=True),
    # As on the job's ledger entry (the key's signer identity and the PAdES
    # level, "B-B" or "B-T"); NULL on rows signed before migration 0004 that
    # the migration could not fill (the level).
    Column("signer_identity", String(256), nullable=True),
    Column("level", String(8), nullable=True),
    Column("lease_token", Integer, nullable=False),
    Column("intent_at", DateTime(timezone=True), nullable=False),
    Column("signed_at", DateTime(timezone=True), nullable=True),
)
# Request ids of creates and operators' mutations and their replies
# (AIP-155; ``quire.idempotency``).
request_ids = request_ids_table(metadata)

# The witness (``quire.signer.witness``): per tenant log, the last checkpoint
# it cosigned (moved forward by compare-and-set on ``size``), every checkpoint
# it cosigned (its own copy, append-only), and audit's checkpoint key as it
# first saw it.
witness_heads = Table(
    "witness_heads",
    metadata,
    Column("origin", String(128), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary(32), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
witnessed = Table(
    "witnessed",
    metadata,
    Column("origin", String(128), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary(32), nullable=False),
    Column("checkpoint", Text, nullable=False),
    # The log's signed note with the witness's cosignature line.
    Column("cosigned_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("origin", "size"),
)
witness_log_key = Table(
    "witness_log_key",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("public_key", LargeBinary(32), nullable=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False),
)
