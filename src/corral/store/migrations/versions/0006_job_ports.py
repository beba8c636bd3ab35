"""node address and job web UI port (the authenticated proxy)

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("address", sa.String(length=255), nullable=False, server_default=""))
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("port", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("port")
    with op.batch_alter_table("nodes") as b:
        b.drop_column("address")
