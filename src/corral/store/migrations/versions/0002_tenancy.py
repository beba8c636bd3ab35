"""tenants, quotas, queues; users and jobs belong to tenants; token expiry

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "quotas",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("guaranteed_gpus", sa.Integer(), nullable=False),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "gpu_model", name="uq_quotas_tenant_model"),
    )
    op.create_table(
        "queues",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_queues_tenant_name"),
    )
    with op.batch_alter_table("users") as b:
        b.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("password_hash", sa.String(length=255), nullable=False, server_default=""))
        b.create_foreign_key("fk_users_tenant", "tenants", ["tenant_id"], ["id"])
    with op.batch_alter_table("api_tokens") as b:
        b.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("queue", sa.String(length=64), nullable=False, server_default="default"))
        b.add_column(sa.Column("time_limit_s", sa.Integer(), nullable=True))
        b.create_foreign_key("fk_jobs_tenant", "tenants", ["tenant_id"], ["id"])
        b.create_index("ix_jobs_tenant", ["tenant_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_tenant")
        b.drop_constraint("fk_jobs_tenant", type_="foreignkey")
        b.drop_column("time_limit_s")
        b.drop_column("queue")
        b.drop_column("tenant_id")
    with op.batch_alter_table("api_tokens") as b:
        b.drop_column("expires_at")
    with op.batch_alter_table("users") as b:
        b.drop_constraint("fk_users_tenant", type_="foreignkey")
        b.drop_column("password_hash")
        b.drop_column("tenant_id")
    op.drop_table("queues")
    op.drop_table("quotas")
    op.drop_table("tenants")
