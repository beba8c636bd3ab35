"""schema_compat: the oldest code revision that may still run on this schema (rolling upgrades, issue 17); a
contract migration raises it (corral.store.migrate.raise_min_compatible) and older code then refuses to start.
replicas.schema_head: the newest migration each replica's code knows, for `corral status` during an upgrade.

Expand-only: code at 0021 runs on this schema unchanged.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    compat = op.create_table(
        "schema_compat",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("min_revision", sa.String(length=64), nullable=False, server_default=""),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
    )
    op.bulk_insert(compat, [{"id": 1, "min_revision": "0021", "reason": "0022 only adds to 0021's schema"}])
    with op.batch_alter_table("replicas") as b:
        b.add_column(sa.Column("schema_head", sa.String(length=64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("replicas") as b:
        b.drop_column("schema_head")
    op.drop_table("schema_compat")
