"""pools: cloud node pools (issue 19): the pools an admin declared, the nodes they started (live, and as history
of what each cost), the autoscaler's events, tenants' budgets, and the tolerations and pool a job asks for.

Expand-only: code at 0024 runs on this schema unchanged (new tables, and nullable job columns it never reads).

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(length=64), nullable=False, unique=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
    )
    op.create_table(
        "pool_nodes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(length=255), nullable=False, unique=True),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("price_per_hour", sa.Float(), nullable=False, server_default="0"),
        sa.Column("gpus", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("provider_id", sa.String(length=255), nullable=False, server_default=""),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notice_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("job_ids", sa.JSON(), nullable=False),
    )
    op.create_index("ix_pool_nodes_pool_state", "pool_nodes", ["pool", "state"])
    op.create_table(
        "pool_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False, server_default=""),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
    )
    op.create_index("ix_pool_events_pool_id", "pool_events", ["pool", "id"])
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=True),
        sa.Column("money", sa.Float(), nullable=True),
        sa.Column("policy", sa.String(length=16), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", name="uq_budgets_tenant"),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("tolerations", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("pool", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pool")
        batch.drop_column("tolerations")
    op.drop_table("budgets")
    op.drop_index("ix_pool_events_pool_id", "pool_events")
    op.drop_table("pool_events")
    op.drop_index("ix_pool_nodes_pool_state", "pool_nodes")
    op.drop_table("pool_nodes")
    op.drop_table("pools")
