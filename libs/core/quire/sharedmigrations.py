"""Schema changes of the tables several services keep alike, written once.

``stage_leases`` (``quire.leases``), ``request_ids``
(``quire.idempotency``) and the diagnostics tables
(``quire.diagnosticstore``) are declared once in core and kept by several
services, each in its own database. Each service's chain has its own
revision that adds them, at its own place in the chain; the revision calls
these, so the DDL exists once, beside the declarations it must match (a test
checks every chain ends at exactly the declared schema).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

__all__ = [
    "create_stage_leases",
    "drop_stage_leases",
    "add_lease_leased_at",
    "drop_lease_leased_at",
    "create_request_ids",
    "drop_request_ids",
    "create_diagnostics",
    "drop_diagnostics",
]


def create_stage_leases() -> None:
    """The lease table as every stage's first revision made it."""
    op.create_table(
        "stage_leases",
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("token", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job"),
    )


def drop_stage_leases() -> None:
    op.drop_table("stage_leases")


def add_lease_leased_at() -> None:
    with op.batch_alter_table("stage_leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("leased_at", sa.DateTime(timezone=True), nullable=True))


def drop_lease_leased_at() -> None:
    with op.batch_alter_table("stage_leases", schema=None) as batch_op:
        batch_op.drop_column("leased_at")


def create_request_ids() -> None:
    op.create_table(
        "request_ids",
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=128), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "method", "request_id"),
    )
    with op.batch_alter_table("request_ids", schema=None) as batch_op:
        batch_op.create_index("ix_request_ids_created", ["created_at"], unique=False)


def drop_request_ids() -> None:
    with op.batch_alter_table("request_ids", schema=None) as batch_op:
        batch_op.drop_index("ix_request_ids_created")
    op.drop_table("request_ids")


def create_diagnostics() -> None:
    op.create_table(
        "diagnostic_reads",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("reader", sa.String(length=256), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("diagnostic_reads", schema=None) as batch_op:
        batch_op.create_index("ix_diagnostic_reads_job", ["job", "read_at"], unique=False)

    op.create_table(
        "diagnostics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("instance", sa.String(length=128), nullable=False),
        sa.Column("build_version", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("error_type", sa.String(length=200), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expire_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("diagnostics", schema=None) as batch_op:
        batch_op.create_index("ix_diagnostics_expire", ["expire_time"], unique=False)
        batch_op.create_index("ix_diagnostics_job", ["job", "create_time"], unique=False)


def drop_diagnostics() -> None:
    with op.batch_alter_table("diagnostics", schema=None) as batch_op:
        batch_op.drop_index("ix_diagnostics_job")
        batch_op.drop_index("ix_diagnostics_expire")
    op.drop_table("diagnostics")
    with op.batch_alter_table("diagnostic_reads", schema=None) as batch_op:
        batch_op.drop_index("ix_diagnostic_reads_job")
    op.drop_table("diagnostic_reads")
