"""signatures record the signer identity and PAdES level the ledger records

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-12 10:00:00.000000

Rows signed before this revision get the signer identity of the key version
that signed them (a key's identity never changes); their level was never kept
by the signer and stays NULL.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("signatures", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signer_identity", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("level", sa.String(length=8), nullable=True))
    op.execute(
        "UPDATE signatures SET signer_identity = ("
        "SELECT signing_keys.signer_identity FROM signing_keys"
        " WHERE signing_keys.version = signatures.key_version)"
        " WHERE signatures.sha256 IS NOT NULL"
    )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("signatures", schema=None) as batch_op:
        batch_op.drop_column("level")
        batch_op.drop_column("signer_identity")
