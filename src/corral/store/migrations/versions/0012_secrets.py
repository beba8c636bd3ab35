"""tenant secrets, encrypted at rest

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_secrets_tenant_name"),
    )
    op.create_index("ix_secrets_key_id", "secrets", ["key_id"])
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("secret_env", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("secret_env")
    op.drop_index("ix_secrets_key_id", "secrets")
    op.drop_table("secrets")
