"""jobs (node, state) and a partial index of the gangs by state: what an agent's sync reads without scanning every
running job or a node's whole history (issue 13).

`list_node_jobs` read every RUNNING job of the cluster (the (state, id) index) and matched the node in each: an
agent's sync cost grew with the fleet's running jobs, three times per sync. It now reads a node's running jobs by
(node, state) and the running gangs (nodes > 1, whose later nodes are in node_list only) by state, in an index of
the gangs alone (partial, WHERE nodes > 1: a query must say `nodes > 1` to use it, so no other query's plan changes).
`list_stage_outs` no longer asks SQLite for id order, which made it walk the node's whole history in the node index
instead of using (stage_out_state, node); it sorts the few rows itself.

Expand-only: two indexes; code at 0029 runs on this schema unchanged. Plain CREATE INDEX (no batch), so SQLite
does not copy the jobs table (its row_version trigger, 0028, stays).

Revision ID: 0030
Revises: 0029
"""

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_node_state", "jobs", ["node", "state"])
    gangs = sa.text("nodes > 1")
    op.create_index("ix_jobs_gangs_state", "jobs", ["state"], sqlite_where=gangs, postgresql_where=gangs)


def downgrade() -> None:
    op.drop_index("ix_jobs_gangs_state", table_name="jobs")
    op.drop_index("ix_jobs_node_state", table_name="jobs")
