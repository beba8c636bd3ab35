"""tenant secrets, encrypted at rest

Revision ID: 0012
Revises: 0011
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
