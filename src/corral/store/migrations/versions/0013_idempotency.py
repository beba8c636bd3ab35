"""idempotent job submission

Revision ID: 0013
Revises: 0012
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
