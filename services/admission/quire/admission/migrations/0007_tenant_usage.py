"""tenant_usage: each tenant's stored upload bytes, kept as sources come and go

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 05:45:00.000000

Expand only: a new table, filled here from ``sources``, which the previous
release ignores. Sources that a previous release's replica adds or forgets
while both run are not counted in it; admission recounts every tenant from
``sources`` at start and hourly (``quire.admission.tenants.storageusage``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("tenant"),
    )
    op.execute(
        "INSERT INTO tenant_usage (tenant, stored_bytes) "
        "SELECT tenant, SUM(size_bytes) FROM sources GROUP BY tenant"
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("tenant_usage")
