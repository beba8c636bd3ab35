"""jobs run as Unix identities: per-user UID mapping

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as b:
        b.add_column(sa.Column("unix_uid", sa.BigInteger(), nullable=True))
        b.add_column(sa.Column("unix_gid", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("isolation", sa.String(length=16), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.drop_column("isolation")
    with op.batch_alter_table("users") as b:
        b.drop_column("unix_gid")
        b.drop_column("unix_uid")
