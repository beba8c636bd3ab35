"""directory login (LDAP, OpenID Connect): group mappings

Revision ID: 0015
Revises: 0014
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # filled in by the change that owns this revision


def downgrade() -> None:
    pass
