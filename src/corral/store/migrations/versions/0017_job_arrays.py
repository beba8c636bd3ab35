"""jobs.array_id / array_index / array_limit: tasks of a job array (`corral submit --array 0-999%50`);
idempotency_keys.job_ids: every job one submission made (an array, a batch)

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("array_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_limit", sa.Integer(), nullable=True))
        b.create_index("ix_jobs_array", ["array_id"])
    with op.batch_alter_table("idempotency_keys") as b:
        b.add_column(sa.Column("job_ids", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as b:
        b.drop_column("job_ids")
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_array")
        b.drop_column("array_limit")
        b.drop_column("array_index")
        b.drop_column("array_id")
