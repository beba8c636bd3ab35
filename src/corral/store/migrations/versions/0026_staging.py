"""staging: a job's data staged in before it runs and out after it ends (issue 19): what to stage, the tenant
secret that opens S3, where its input is being staged (or was), and the outcome of its stage-out.

Expand-only: code at 0025 runs on this schema unchanged (nullable or defaulted job columns it never reads).

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("stage_in", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stage_out", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stage_secret", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("stage_state", sa.String(length=16), nullable=False, server_default=""))
        batch.add_column(sa.Column("stage_node", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("stage_progress", sa.String(length=255), nullable=False, server_default=""))
        batch.add_column(sa.Column("stage_out_state", sa.String(length=16), nullable=False, server_default=""))
        batch.add_column(sa.Column("stage_out_message", sa.Text(), nullable=False, server_default=""))
    op.create_index("ix_jobs_stage_out", "jobs", ["stage_out_state", "node"])
    op.create_index("ix_jobs_stage_node", "jobs", ["stage_node"])  # every sync asks for its node's stagings


def downgrade() -> None:
    op.drop_index("ix_jobs_stage_node", "jobs")
    op.drop_index("ix_jobs_stage_out", "jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in (
            "stage_out_message",
            "stage_out_state",
            "stage_progress",
            "stage_node",
            "stage_state",
            "stage_secret",
            "stage_out",
            "stage_in",
        ):
            batch.drop_column(column)
