"""diagnostics: failed deliveries' error texts for operators, and who read them

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 22:58:19.957783

"""

from collections.abc import Sequence

from quire.sharedmigrations import create_diagnostics, drop_diagnostics

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the shared diagnostics tables (``quire.sharedmigrations``)."""
    create_diagnostics()


def downgrade() -> None:
    """Downgrade schema."""
    drop_diagnostics()
