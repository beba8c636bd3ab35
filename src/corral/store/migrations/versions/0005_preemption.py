"""preemption and failure counts, attained service

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        b.add_column(sa.Column("preempt_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))
        b.add_column(sa.Column("attained_gpu_s", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        for col in ("attained_gpu_s", "preemptions", "preempt_requested", "failures"):
            b.drop_column(col)
