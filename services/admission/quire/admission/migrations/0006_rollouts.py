"""rollouts: operators' candidates and the share of new jobs pinned to them

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08 10:00:00.000000

Expand only: a new table, which the previous release ignores.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "rollouts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("candidate_version", sa.String(length=128), nullable=False),
        sa.Column("candidate_ruleset", sa.String(length=128), nullable=False),
        sa.Column("share_basis_points", sa.Integer(), nullable=False),
        sa.Column("canary_share_basis_points", sa.Integer(), nullable=False),
        sa.Column("tenants", sa.Text(), nullable=False),
        sa.Column("concurrency_cap", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("open_stage", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("open_stage"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("rollouts")
