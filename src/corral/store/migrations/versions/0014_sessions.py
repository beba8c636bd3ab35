"""login sessions tied to their token and password; failed-login back-off

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as b:
        b.add_column(sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("api_tokens") as b:
        b.add_column(sa.Column("is_session", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        b.create_index("ix_api_tokens_parent_id", ["parent_id"])
    # Sessions made before this revision were named so; they end with a password change from now on.
    op.execute("UPDATE api_tokens SET is_session = true WHERE name IN ('web session', 'login session')")
    op.create_table(
        "login_failures",
        sa.Column("key", sa.String(length=80), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("login_failures")
    with op.batch_alter_table("api_tokens") as b:
        b.drop_index("ix_api_tokens_parent_id")
        b.drop_column("parent_id")
        b.drop_column("is_session")
    with op.batch_alter_table("users") as b:
        b.drop_column("disabled")
