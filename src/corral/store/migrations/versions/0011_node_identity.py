"""node identities: join tokens, node certificates, revocation

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("secret_hash", sa.String(128), nullable=False, unique=True),
        sa.Column("description", sa.String(255), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("max_uses", sa.Integer(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "node_certs",
        sa.Column("serial", sa.String(64), primary_key=True),
        sa.Column("fingerprint", sa.String(80), nullable=False, unique=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("not_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("join_token_id", sa.Integer(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_node_certs_node", "node_certs", ["node"])
    # The old skeleton-key join tokens (bearer tokens of kind "join") open nothing any more: revoke them.
    op.execute(sa.text("UPDATE api_tokens SET revoked = :t WHERE kind = 'join'").bindparams(t=True))


def downgrade() -> None:
    op.drop_index("ix_node_certs_node", table_name="node_certs")
    op.drop_table("node_certs")
    op.drop_table("join_tokens")
