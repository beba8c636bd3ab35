"""gang staging: a multi-node job's input is staged on each of its nodes (issue 19). `stage_nodes` lists them
(",n1,n2,", as `node_list` does for a gang's parts) and `stage_done` those that have it in; `stage_node` stays the
first of them. An index on stage_state finds the jobs being staged without reading the others.

Expand-only: code at 0026 runs on this schema unchanged (it never reads the new columns; a job it stages has
stage_nodes NULL, which this code reads as its stage_node alone).

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("stage_nodes", sa.Text(), nullable=True))
        batch.add_column(sa.Column("stage_done", sa.Text(), nullable=False, server_default=""))
    op.create_index("ix_jobs_stage_state", "jobs", ["stage_state"])  # every sync asks for its node's stagings


def downgrade() -> None:
    op.drop_index("ix_jobs_stage_state", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("stage_done")
        batch.drop_column("stage_nodes")
