"""Audit's own tables: the append-only ledger, its chain heads, and the job view."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
)

from quire.idempotency import request_ids_table
from quire.leases import lease_table

__all__ = [
    "MIGRATIONS",
    "metadata",
    "ledger",
    "chain_heads",
    "jobs",
    "leases",
    "dead_letters",
    "request_ids",
    "refused_events",
]

metadata = MetaData()
MIGRATIONS = Path(__file__).with_name("migrations")
"""This service's chain of schema migrations (``quire.migrations``)."""
# Commit-task deliveries: completion is fenced like every stage's final write.
leases = lease_table(metadata)
# One row per transition, never updated or deleted. ``entry_hash`` chains each
# tenant's entries: sha256(prev_hash || event bytes).
ledger = Table(
    "ledger",
    metadata,
    Column("sequence", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(128), nullable=False, unique=True),
    Column("job", String(64), nullable=False, index=True),
    Column("tenant", String(64), nullable=False),
    Column("from_state", String(32), nullable=False),
    Column("to_state", String(32), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("event", LargeBinary, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("entry_hash", String(64), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)
chain_heads = Table(
    "chain_heads",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("head_hash", String(64), nullable=False),
    Column("length", BigInteger, nullable=False),
)
# The current state of each job, derived from the ledger in the same transaction.
jobs = Table(
    "jobs",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("state", String(32), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("item_count", Integer, nullable=False),
    Column("manifest_digest", String(64), nullable=False),
    Column("output_digest", String(64), nullable=False),
    Column("ruleset_version", String(128), nullable=False),
    Column("key_version", String(32), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
# Jobs that ended FAILED, from quire.dead.<stage>: one row per job, for the
# generation that failed last; operators retry or discard them.
dead_letters = Table(
    "dead_letters",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("stage", String(16), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("deliveries", Integer, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("task", LargeBinary, nullable=False),
    # dead -> retrying -> retried, or dead -> discarded
    Column("status", String(16), nullable=False),
    Column("dead_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True), nullable=True),
    Column("resolved_by", String(64), nullable=False, default=""),
)
# How often a stalled dead-letter retry was published again (see
# quire.audit.retrydrive): the number makes each copy new to JetStream.
retry_redrives = Table(
    "retry_redrives",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("count", Integer, nullable=False),
    Column("last_at", DateTime(timezone=True), nullable=False),
)
# Request ids of creates and operators' mutations and their replies
# (AIP-155; ``quire.idempotency``).
request_ids = request_ids_table(metadata)
# Events the recorder kept out of the ledger (``quire.audit.succession``): each
# a finding, once per event id, never appended. What the producer claimed is
# kept as it came (the event's bytes) for whoever looks into it.
refused_events = Table(
    "refused_events",
    metadata,
    Column("event_id", String(128), primary_key=True),
    Column("job", String(64), nullable=False, index=True),
    Column("tenant", String(64), nullable=False),
    Column("producer", String(32), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("to_state", String(32), nullable=False),
    Column("event", LargeBinary, nullable=False),
    Column("refused_at", DateTime(timezone=True), nullable=False),
)
