"""stage leases record when each delivery took its token

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:01:48.697163

"""

from collections.abc import Sequence

from quire.sharedmigrations import add_lease_leased_at, drop_lease_leased_at

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the shared lease table's ``leased_at`` (``quire.sharedmigrations``)."""
    add_lease_leased_at()


def downgrade() -> None:
    """Downgrade schema."""
    drop_lease_leased_at()
