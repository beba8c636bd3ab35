"""jobs.container / image_digest: jobs that run in a container of their image (issue 16);
nodes.runtimes: how a node's agent runs jobs (process, docker)

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("container", sa.JSON(), nullable=True))
        b.add_column(sa.Column("image_digest", sa.String(length=255), nullable=False, server_default=""))
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("runtimes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.drop_column("runtimes")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("image_digest")
        b.drop_column("container")
