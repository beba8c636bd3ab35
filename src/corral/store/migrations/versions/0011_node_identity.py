"""node identities: join tokens, node certificates, revocation

Revision ID: 0011
Revises: 0010
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
