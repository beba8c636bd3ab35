"""multi-node (gang) jobs: parts per node, per-node delivery and exits

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("nodes", sa.Integer(), nullable=False, server_default="1"))
        b.add_column(sa.Column("parts", sa.JSON(), nullable=False, server_default="[]"))
        b.add_column(sa.Column("node_list", sa.Text(), nullable=False, server_default=""))
        b.add_column(sa.Column("delivered_nodes", sa.Text(), nullable=False, server_default=""))
        b.add_column(sa.Column("part_exits", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        for col in ("part_exits", "delivered_nodes", "node_list", "parts", "nodes"):
            b.drop_column(col)
