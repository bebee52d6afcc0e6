"""request ids of creates and operators' mutations (AIP-155)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 12:31:05.898418

"""

from collections.abc import Sequence

from quire.sharedmigrations import create_request_ids, drop_request_ids

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the shared request_ids tables (``quire.sharedmigrations``)."""
    create_request_ids()


def downgrade() -> None:
    """Downgrade schema."""
    drop_request_ids()
