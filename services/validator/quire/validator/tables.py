"""The validator's own tables: leases, decisions, rulesets, reviews, the
sources it fetched and pinned, and the source systems jobs wait for."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
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
    "validations",
    "rulesets",
    "reviews",
    "review_reasons",
    "request_ids",
    "source_pins",
    "source_waits",
]

metadata = MetaData()
MIGRATIONS = Path(__file__).with_name("migrations")
"""This service's chain of schema migrations (``quire.migrations``)."""
leases = lease_table(metadata)
diagnostics = diagnostic_tables(metadata)
"""Failed deliveries' error texts, for operators (``quire.diagnosticstore``)."""
validations = Table(
    "validations",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("verdict", String(16), nullable=False),
    Column("reason_code", String(64), nullable=False),
    Column("findings", JSON, nullable=False),
    Column("decisions", JSON, nullable=False),
    Column("ruleset", String(160), nullable=False),
    Column("ruleset_digest", String(64), nullable=False),
    # The task as received, so a ruleset can be re-evaluated in the shadow.
    Column("task", LargeBinary, nullable=False),
    Column("lease_token", Integer, nullable=False),
    Column("decided_at", DateTime(timezone=True), nullable=False),
)
# Published rulesets; a name@version never changes once stored.
rulesets = Table(
    "rulesets",
    metadata,
    Column("key", String(160), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("version", String(32), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("loaded_at", DateTime(timezone=True), nullable=False),
)
# Jobs parked for a human decision, with the task that approval hands on.
# ``operator`` is who decided: the staff token's name (``operators/-/tokens/…``
# or ``reviewers/-/tokens/…``). ``tenant`` is the job's (its task's), for
# ListReviews' filter.
reviews = Table(
    "reviews",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("ruleset", String(160), nullable=False),
    Column("decisions", JSON, nullable=False),
    Column("next_task", LargeBinary, nullable=False),
    Column("operator", String(128), nullable=True),
    Column("note", String(1000), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True), nullable=True),
    Column("tenant", String(64), nullable=False, server_default=""),
    Index("ix_reviews_tenant_created", "tenant", "created_at"),
)
# The reason codes of a review's decisions, one row each, for ListReviews'
# filter (the decisions themselves are JSON, which SQL filters poorly).
review_reasons = Table(
    "review_reasons",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("reason_code", String(64), primary_key=True),
)
# Request ids of creates and operators' mutations and their replies
# (AIP-155; ``quire.idempotency``).
request_ids = request_ids_table(metadata)
# What was fetched for each source a job names by reference, pinned before
# validation (``quire.validator.sources.pins``). Written as each source is
# fetched, first writer wins, never changed: a redelivery reuses it and never
# fetches that position again.
source_pins = Table(
    "source_pins",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("system", String(64), nullable=False),
    Column("key", String(256), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("fetched_sha256", String(64), nullable=False),
    Column("schema_version", String(160), nullable=False),
    Column("fetched_at", DateTime(timezone=True), nullable=False),
    Column("normalisations", JSON, nullable=False),
    Column("blob_key", String(512), nullable=False),
    # Where the pinned bytes first fail their schema ("" when they match or
    # no schema applies): the verdict is the bytes', so a redelivery that
    # reuses the pin decides as the first one did without reading them again.
    Column("schema_error", String(512), nullable=False),
)
# The source systems a job waits for (``quire.validator.sources.waits``):
# one row per system the validator deferred the job for, with that system's
# breaker and when the job's task comes back; replaced at each deferral,
# deleted once the job's sources are pinned or it ends at this stage. Not
# evidence: what GetJob shows while a job waits, never in the ledger.
source_waits = Table(
    "source_waits",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("system", String(64), primary_key=True),
    # "open", "half-open" or "closed".
    Column("breaker", String(16), nullable=False),
    Column("retry_at", DateTime(timezone=True), nullable=False),
    # When the job began waiting for this system (kept across deferrals).
    Column("since", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # Rows of jobs that ended elsewhere (cancelled) are swept by age.
    Index("ix_source_waits_updated", "updated_at"),
)
