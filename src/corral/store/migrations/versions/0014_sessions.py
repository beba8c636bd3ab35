"""login sessions tied to their token and password; failed-login back-off

Revision ID: 0014
Revises: 0013
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
