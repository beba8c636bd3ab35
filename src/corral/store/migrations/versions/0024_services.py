"""services: long-running services (issue 18): the services table, the gateways' traffic counts and the graphs'
samples, and the service and revision a replica job runs.

Expand-only: code at 0023 runs on this schema unchanged (new tables, and nullable job columns it never reads).

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=True),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("revisions", sa.JSON(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("stable_revision", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("deleting", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("name", name="uq_services_name"),
        sqlite_autoincrement=True,  # ids are never reused: old replica jobs keep their service_id as history
    )
    op.create_table(
        "service_traffic",
        sa.Column("service_id", sa.Integer(), primary_key=True),
        sa.Column("server", sa.String(length=128), primary_key=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "service_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("service_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
    )
    op.create_index("ix_service_samples_service_at", "service_samples", ["service_id", "at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("service_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("service_revision", sa.Integer(), nullable=True))
        batch.create_index("ix_jobs_service", ["service_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_service")
        batch.drop_column("service_revision")
        batch.drop_column("service_id")
    op.drop_index("ix_service_samples_service_at", table_name="service_samples")
    op.drop_table("service_samples")
    op.drop_table("service_traffic")
    op.drop_table("services")
