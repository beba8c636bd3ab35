"""jobs.phase: what a RUNNING container job does before its command starts ("pulling 43%");
nodes.images: the container images cached on a node (image-aware placement). Issue 16.

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("phase", sa.String(length=64), nullable=False, server_default=""))
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("images", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.drop_column("images")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("phase")
