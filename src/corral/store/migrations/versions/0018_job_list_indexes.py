"""jobs (state, id) and (tenant_id, state, id): the job list's filters (state, tenant) and its id order / id
pages in one index, and its X-Total-Count as an index-only count (issue 13)

Revision ID: 0018
Revises: 0017
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.create_index("ix_jobs_state_id", ["state", "id"])
        b.create_index("ix_jobs_tenant_state_id", ["tenant_id", "state", "id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_tenant_state_id")
        b.drop_index("ix_jobs_state_id")
