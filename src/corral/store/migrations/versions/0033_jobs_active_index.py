"""jobs: a partial index of the ids of the pending and running jobs, the default job list's rows (issue 13).

`GET /api/v1/jobs` lists pending and running jobs in id order, a page at a time. PostgreSQL guesses that a state's
rows spread evenly over the ids, so for the first page it walked the primary key from the oldest job, past every
finished one, to the waiting ones, which are the newest: 16 ms for 500 jobs among 100,000 finished ones, under the
32 clients of bench/api_load.py the largest part of a page's time. It walks this index instead (0.2 ms). A query
picks it only when its states are among PENDING and RUNNING, so no other query's plan changes.

Expand-only: an index; code at 0032 runs on this schema unchanged. Plain CREATE INDEX (no batch), so SQLite does not
copy the jobs table (its row_version trigger, 0028, stays).

Revision ID: 0033
Revises: 0032
"""

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

ACTIVE = "state IN ('PENDING', 'RUNNING')"


def upgrade() -> None:
    active = sa.text(ACTIVE)
    op.create_index("ix_jobs_active_id", "jobs", ["id"], sqlite_where=active, postgresql_where=active)


def downgrade() -> None:
    op.drop_index("ix_jobs_active_id", table_name="jobs")
