"""jobs run as Unix identities: per-user UID mapping

Revision ID: 0010
Revises: 0009
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
