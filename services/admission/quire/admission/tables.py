"""Admission's own tables: tenants, token hashes, uploaded sources, job intake
and idempotency keys."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

from quire.idempotency import request_ids_table

__all__ = [
    "MIGRATIONS",
    "metadata",
    "tenants",
    "tenant_storage",
    "tenant_usage",
    "tokens",
    "sources",
    "jobs",
    "idempotency_keys",
    "request_ids",
    "batches",
    "batch_packets",
    "notification_endpoints",
    "notifications",
    "notification_attempts",
    "dispatch_lease",
    "source_systems",
    "rollouts",
    "current_rulesets",
    "ruleset_changes",
]

metadata = MetaData()
MIGRATIONS = Path(__file__).with_name("migrations")
"""This service's chain of schema migrations (``quire.migrations``)."""
# Limits left NULL follow the service-wide defaults.
tenants = Table(
    "tenants",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("max_upload_bytes", BigInteger, nullable=True),
    Column("max_outstanding_jobs", Integer, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The tenant's weight in the batch dispatcher's fair share (NULL: 1).
    Column("scheduling_weight", Integer, nullable=True),
)
# A tenant's storage quota and retention periods (seconds); a missing row or
# a NULL follows the defaults (``AdmissionSettings``, ``RetentionSettings``).
# Its own table, so that data directories made before it need no migration.
tenant_storage = Table(
    "tenant_storage",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("storage_quota_bytes", BigInteger, nullable=True),
    Column("sources_seconds", BigInteger, nullable=True),
    Column("packets_seconds", BigInteger, nullable=True),
    Column("artifacts_seconds", BigInteger, nullable=True),
    Column("unused_uploads_seconds", BigInteger, nullable=True),
)
# Bytes of the uploads admission holds for each tenant (the sum of its
# ``sources`` rows), moved in the transaction that adds or forgets a source, so
# that the quota check at every upload reads one row instead of summing them
# all; recounted from ``sources`` at start and hourly (``tenants.storageusage``).
tenant_usage = Table(
    "tenant_usage",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("stored_bytes", BigInteger, nullable=False),
)
# Only the sha256 of a bearer token is stored. Its role: "tenant", "operator" or
# "reviewer"; operators' and reviewers' tokens have no tenant.
tokens = Table(
    "tokens",
    metadata,
    Column("token_sha256", String(64), primary_key=True),
    Column("token_id", String(32), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("tenant", String(64), ForeignKey("tenants.id"), nullable=True),
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
# Every job admission accepted. ``finished_at`` is set once audit reports the
# job terminal; jobs without it count against the tenant's outstanding quota.
jobs = Table(
    "jobs",
    metadata,
    Column("job", String(64), primary_key=True),
    Column("tenant", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("manifest_digest", String(64), nullable=False),
    Column("item_count", Integer, nullable=False),
    Column("task", LargeBinary, nullable=False),
    Column("accepted_event", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("dispatched_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    # The client's bundle_id, and the batch the job is a packet of.
    Column("bundle_id", String(128), nullable=True),
    Column("batch", String(64), nullable=True),
    # Set by the end tracker once it has recorded the job's end for its batch
    # and the tenant's notifications (``quire.admission.batches.finishes``).
    Column("end_recorded_at", DateTime(timezone=True), nullable=True),
    # When the job's budget runs out (``JobTask.deadline``); NULL: no budget.
    Column("deadline", DateTime(timezone=True), nullable=True),
    Index("ix_jobs_tenant_created", "tenant", "created_at"),
    Index("ix_jobs_batch", "batch"),
)
# Partial indexes over the few jobs each per-request or periodic read looks
# for, so that none of those reads grows with a tenant's whole history: the
# outstanding count at every submission, the dispatch sweep, the reconciler
# and the end tracker (which waits only for tenants with endpoints).
_UNFINISHED = jobs.c.finished_at.is_(None)
_UNDISPATCHED = jobs.c.dispatched_at.is_(None)
_UNRECORDED = jobs.c.end_recorded_at.is_(None)
Index("ix_jobs_outstanding", jobs.c.tenant, sqlite_where=_UNFINISHED, postgresql_where=_UNFINISHED)
Index("ix_jobs_unfinished", jobs.c.job, sqlite_where=_UNFINISHED, postgresql_where=_UNFINISHED)
Index(
    "ix_jobs_undispatched",
    jobs.c.created_at,
    sqlite_where=_UNDISPATCHED,
    postgresql_where=_UNDISPATCHED,
)
Index(
    "ix_jobs_unrecorded",
    jobs.c.tenant,
    jobs.c.batch,
    jobs.c.created_at,
    sqlite_where=_UNRECORDED,
    postgresql_where=_UNRECORDED,
)
# The idempotency key is the primary key, so two identical submissions racing
# each other make one job: the database decides, not a read-then-write.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("request_id", String(128), primary_key=True),
    Column("request_sha256", String(64), nullable=False),
    # No foreign key: the key is claimed first, then its job row is written,
    # in the same transaction.
    Column("job", String(64), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
)
# How often the reconciler re-drove a stalled job; the number makes each
# re-drive's messages new to JetStream (see quire.admission.jobs.reconciler).
redrives = Table(
    "redrives",
    metadata,
    Column("job", String(64), ForeignKey("jobs.job"), primary_key=True),
    Column("count", Integer, nullable=False),
    Column("last_at", DateTime(timezone=True), nullable=False),
)
# Request ids of creates and operators' mutations and their replies
# (AIP-155; ``quire.idempotency``).
request_ids = request_ids_table(metadata)
# A batch as submitted: persisted in one transaction with all its packets;
# the dispatcher turns packets into jobs in index order. ``state`` is
# DISPATCHING, FINISHING, DONE or CANCELLED (``BatchState`` without prefix).
batches = Table(
    "batches",
    metadata,
    Column("batch", String(64), primary_key=True),
    Column("tenant", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("packet_count", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    # Packets below this index have their job, or were cancelled undispatched.
    Column("next_index", Integer, nullable=False),
    Column("dispatched_count", Integer, nullable=False),
    Column("cancelled_undispatched", Integer, nullable=False),
    Column("terminal_count", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("cancelled_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Index("ix_batches_tenant_created", "tenant", "created_at"),
    Index("ix_batches_state", "state"),
)
# The batches not yet finished: what the batch dispatcher's plan and the end
# tracker read on every tick, however many batches have finished.
_BATCH_UNFINISHED = batches.c.finished_at.is_(None)
Index(
    "ix_batches_unfinished",
    batches.c.batch,
    sqlite_where=_BATCH_UNFINISHED,
    postgresql_where=_BATCH_UNFINISHED,
)
# Each packet of a batch. ``manifest`` is the serialized quire.type.Manifest;
# ``job`` is set in the transaction that creates the packet's job, so a
# dispatcher that dies mid-page creates each job once or not at all.
batch_packets = Table(
    "batch_packets",
    metadata,
    Column("batch", String(64), ForeignKey("batches.batch"), primary_key=True),
    Column("index", Integer, primary_key=True),
    Column("bundle_id", String(128), nullable=False),
    Column("manifest", LargeBinary, nullable=False),
    Column("job", String(64), nullable=True, unique=True),
    # The job's terminal state once known (``JobState`` name without prefix),
    # or CANCELLED_UNDISPATCHED for a packet a cancel stopped.
    Column("final_state", String(32), nullable=True),
    Column("reason_code", String(64), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
)
# A tenant's completion-notification endpoint. The HMAC secret is sealed
# (never stored in the clear) and shown to the tenant once.
notification_endpoints = Table(
    "notification_endpoints",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("url", String(2048), nullable=False),
    Column("secret_sealed", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
# The outbox of notifications: one row per ended job or batch of a tenant
# with an endpoint (the primary key makes a second one impossible).
notifications = Table(
    "notifications",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("subject", String(80), primary_key=True),
    # A random id the receiver can remember to refuse a replay.
    Column("delivery_id", String(64), nullable=False, unique=True),
    Column("payload", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("delivered_at", DateTime(timezone=True), nullable=True),
    Column("abandoned_at", DateTime(timezone=True), nullable=True),
    Index("ix_notifications_due", "delivered_at", "abandoned_at", "next_attempt_at"),
)
# Every delivery attempt, kept for the tenant to read.
notification_attempts = Table(
    "notification_attempts",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("subject", String(80), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("attempted_at", DateTime(timezone=True), nullable=False),
    Column("http_status", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
)
# Which admission replica runs the batch dispatcher: one row per duty, taken
# or renewed with a compare-and-set on (holder, expires_at).
dispatch_lease = Table(
    "dispatch_lease",
    metadata,
    Column("duty", String(32), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
# A tenant's source systems: where the pipeline fetches the sources a
# manifest names by reference (``quire.admission.tenants.sourcesystems``). A job copies
# its systems' rows into its task when accepted, so a later change here never
# changes a running job. ``credential_ref`` names where the fetching service
# finds the credential ("env:NAME" or "file:/path"), never the credential.
source_systems = Table(
    "source_systems",
    metadata,
    Column("tenant", String(64), ForeignKey("tenants.id"), primary_key=True),
    Column("system", String(64), primary_key=True),
    Column("base_url", String(2048), nullable=False),
    Column("credential_ref", String(1024), nullable=False),
    Column("timeout_ms", Integer, nullable=False),
    Column("max_bytes", BigInteger, nullable=False),
    Column("schema", String(128), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
# Operators' rollouts (``quire.admission.rollouts.records``): a candidate and the
# share of new jobs pinned to it. Rows are never deleted; ``open_stage`` holds
# the stage while the rollout is open (CANARY) and is NULL after, so the
# unique index allows at most one open rollout per stage.
rollouts = Table(
    "rollouts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("stage", String(16), nullable=False),
    Column("candidate_version", String(128), nullable=False),
    Column("candidate_ruleset", String(128), nullable=False),
    Column("share_basis_points", Integer, nullable=False),
    Column("canary_share_basis_points", Integer, nullable=False),
    # Tenant ids, space-separated; empty for every tenant.
    Column("tenants", Text, nullable=False),
    Column("concurrency_cap", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("open_stage", String(16), nullable=True, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
# The current version of each ruleset name (``quire.admission.rulesets.currents``):
# what a job naming no version is pinned to. One row per name, made when
# admission first sees the name, changed only by promoting a rollout.
current_rulesets = Table(
    "current_rulesets",
    metadata,
    Column("name", String(64), primary_key=True),
    # "name@version".
    Column("version", String(128), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
# Every promotion of a current version, written in the promotion's
# transaction, and recorded in audit's ledger afterwards (``recorded_at`` set
# once audit has answered). Rows are never deleted.
ruleset_changes = Table(
    "ruleset_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    # "" when the name had no current version yet.
    Column("previous_version", String(128), nullable=False),
    Column("current_version", String(128), nullable=False),
    # "rollouts/{rollout}".
    Column("rollout", String(128), nullable=False),
    # The operator's token id, and admission's build that made the change.
    Column("operator", String(64), nullable=False),
    Column("build_version", String(64), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=True),
)
