"""partial indexes over unfinished, undispatched and unrecorded jobs, and unfinished batches

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 05:50:00.000000

Expand only: indexes, which the previous release's reads use as well. Before
them, the outstanding count at every submission read every job the tenant
ever had, the dispatch sweep, the reconciler and the end tracker every job
in the table, and the batch dispatcher's plan every batch.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFINISHED = sa.text("finished_at IS NULL")
_UNDISPATCHED = sa.text("dispatched_at IS NULL")
_UNRECORDED = sa.text("end_recorded_at IS NULL")


def upgrade() -> None:
    """Upgrade schema."""
    for name, columns, where in (
        ("ix_jobs_outstanding", ["tenant"], _UNFINISHED),
        ("ix_jobs_unfinished", ["job"], _UNFINISHED),
        ("ix_jobs_undispatched", ["created_at"], _UNDISPATCHED),
        ("ix_jobs_unrecorded", ["tenant", "batch", "created_at"], _UNRECORDED),
    ):
        op.create_index(name, "jobs", columns, sqlite_where=where, postgresql_where=where)
    op.create_index(
        "ix_batches_unfinished",
        "batches",
        ["batch"],
        sqlite_where=_UNFINISHED,
        postgresql_where=_UNFINISHED,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_batches_unfinished", table_name="batches")
    for name in (
        "ix_jobs_unrecorded",
        "ix_jobs_undispatched",
        "ix_jobs_unfinished",
        "ix_jobs_outstanding",
    ):
        op.drop_index(name, table_name="jobs")
