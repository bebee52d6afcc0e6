"""reviews: the job's tenant and its decisions' reason codes, for ListReviews' filters

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 17:19:00.864673

Expand only: a column and a table the previous release ignores, filled here
for the reviews already parked: the tenant from the task each review keeps
(``next_task``), the reason codes from its decisions. A review a previous
release's replica parks while both run has neither, and is listed only when
no tenant or reason is asked for, until it is resolved.
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from quire.type import queue_pb2

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REVIEWS = sa.table(
    "reviews",
    sa.column("job", sa.String),
    sa.column("decisions", sa.JSON),
    sa.column("next_task", sa.LargeBinary),
    sa.column("tenant", sa.String),
)
REASONS = sa.table(
    "review_reasons", sa.column("job", sa.String), sa.column("reason_code", sa.String)
)


def _decisions(stored: object) -> list[dict[str, object]]:
    decisions = json.loads(stored) if isinstance(stored, str) else stored
    return decisions if isinstance(decisions, list) else []


def _fill() -> None:
    """The tenant and the reason codes of every review already parked."""
    connection = op.get_bind()
    rows = connection.execute(sa.select(REVIEWS.c.job, REVIEWS.c.decisions, REVIEWS.c.next_task))
    for job, decisions, task in rows.all():
        tenant = queue_pb2.JobTask.FromString(task).tenant
        connection.execute(REVIEWS.update().where(REVIEWS.c.job == job).values(tenant=tenant))
        codes = {str(d.get("reason_code") or "") for d in _decisions(decisions)} - {""}
        if codes:
            connection.execute(REASONS.insert(), [{"job": job, "reason_code": c} for c in codes])


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "review_reasons",
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("job", "reason_code"),
    )
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("tenant", sa.String(length=64), server_default="", nullable=False)
        )
        batch_op.create_index("ix_reviews_tenant_created", ["tenant", "created_at"], unique=False)
    _fill()


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_index("ix_reviews_tenant_created")
        batch_op.drop_column("tenant")

    op.drop_table("review_reasons")
