"""alert_snapshot: the leader's current alerts as of its last evaluation round, one row (id 1) it replaces each
round, so that a replica that does not lead answers GET /api/v1/alerts with the leader's alerts.

Expand-only: code at 0022 runs on this schema unchanged (it never reads the new table).

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_snapshot",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("alerts", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("alert_snapshot")
