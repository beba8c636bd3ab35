"""metric points and rollups, alert rules, history and silences; job retries and GPU summary

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("max_retries", sa.Integer(), nullable=False, server_default="3"))
        b.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
        b.add_column(sa.Column("gpu_summary", sa.JSON(), nullable=False, server_default="{}"))
    op.create_table(
        "metric_points",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_metric_points_lookup", "metric_points", ["metric", "node", "ts"])
    op.create_index("ix_metric_points_ts", "metric_points", ["ts"])
    op.create_index("ix_metric_points_job", "metric_points", ["job_id"])
    op.create_table(
        "metric_rollups",
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("min", sa.Float(), nullable=False),
        sa.Column("max", sa.Float(), nullable=False),
        sa.Column("sum", sa.Float(), nullable=False),
        sa.Column("last", sa.Float(), nullable=False),
        sa.Column("last_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "node", "gpu", "bucket"),
    )
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "alert_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_history_fingerprint", "alert_history", ["fingerprint"])
    op.create_index("ix_alert_history_at", "alert_history", ["at"])
    op.create_table(
        "silences",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("silences")
    op.drop_index("ix_alert_history_at", "alert_history")
    op.drop_index("ix_alert_history_fingerprint", "alert_history")
    op.drop_table("alert_history")
    op.drop_table("alert_rules")
    op.drop_table("metric_rollups")
    for ix in ("ix_metric_points_job", "ix_metric_points_ts", "ix_metric_points_lookup"):
        op.drop_index(ix, "metric_points")
    op.drop_table("metric_points")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("gpu_summary")
        b.drop_column("not_before")
        b.drop_column("max_retries")
