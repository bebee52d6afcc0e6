"""current_rulesets and ruleset_changes: each ruleset name's current version, and its promotions

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 14:00:24.028690

Expand only: two new tables, which the previous release ignores. No row is
written here: admission adopts each name's current version when it first
sees it (the newest version then known, which is what the previous release
pinned jobs naming no version to), so an upgrade changes no job's ruleset.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "current_rulesets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "ruleset_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("previous_version", sa.String(length=128), nullable=False),
        sa.Column("current_version", sa.String(length=128), nullable=False),
        sa.Column("rollout", sa.String(length=128), nullable=False),
        sa.Column("operator", sa.String(length=64), nullable=False),
        sa.Column("build_version", sa.String(length=64), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("ruleset_changes")
    op.drop_table("current_rulesets")
