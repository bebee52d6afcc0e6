"""witness: the last checkpoint cosigned per tenant log, a copy of each one
cosigned, and audit's checkpoint key as the witness first saw it

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 13:30:25.541259

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
        "witness_heads",
        sa.Column("origin", sa.String(length=128), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("origin"),
    )
    op.create_table(
        "witness_log_key",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("public_key", sa.LargeBinary(length=32), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "witnessed",
        sa.Column("origin", sa.String(length=128), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=False),
        sa.Column("cosigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("origin", "size"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("witnessed")
    op.drop_table("witness_log_key")
    op.drop_table("witness_heads")
