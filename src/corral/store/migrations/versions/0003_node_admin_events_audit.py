"""node cordon, GPU health and admin disable, node events, audit log

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("cordoned", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("gpus") as b:
        b.add_column(sa.Column("health_reason", sa.String(length=255), nullable=False, server_default=""))
        b.add_column(sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_events_node", "node_events", ["node"])
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_at", "audit_log")
    op.drop_table("audit_log")
    op.drop_index("ix_node_events_node", "node_events")
    op.drop_table("node_events")
    with op.batch_alter_table("gpus") as b:
        b.drop_column("disabled")
        b.drop_column("health_reason")
    with op.batch_alter_table("nodes") as b:
        b.drop_column("cordoned")
