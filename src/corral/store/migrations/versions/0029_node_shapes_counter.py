"""node shapes counter: `change_counters` holds a row `node_shapes` that the database bumps (triggers) whenever a
node or a GPU is registered or removed, or a node's CPUs, memory or labels, or a GPU's model or memory change.
Submissions check that some node could ever hold a job against every node and GPU; they now keep the list they
read and read it again only when this counter moved (reading 600 GPUs per submission was a fifth of the server's
time in the Kueue scenario; issue 13). Heartbeats, states and health do not move it: the check reads none of them.

SQLite has only row triggers (one bump per row written; registrations are rare); PostgreSQL bumps once per
statement. `UPDATE OF` fires when a statement sets the column, changed or not, which errs on the side of reading
again. A later migration that makes SQLite copy the nodes or gpus table must create its triggers again;
tests/unit/store/test_node_shapes_counter.py fails if one is missing on a migrated database.

Expand-only: a new table and triggers; code at 0028 runs on this schema unchanged (its writes bump the counter).

Revision ID: 0029
Revises: 0028
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

BUMP = "UPDATE change_counters SET version = version + 1 WHERE name = 'node_shapes'"
# (trigger name, when, table)
TRIGGERS = (
    ("node_shapes_nodes_ins", "AFTER INSERT", "nodes"),
    ("node_shapes_nodes_del", "AFTER DELETE", "nodes"),
    ("node_shapes_nodes_upd", "AFTER UPDATE OF cpu_milli, memory_mib, labels", "nodes"),
    ("node_shapes_gpus_ins", "AFTER INSERT", "gpus"),
    ("node_shapes_gpus_del", "AFTER DELETE", "gpus"),
    ("node_shapes_gpus_upd", "AFTER UPDATE OF node_name, gpu_index, model, memory_mib", "gpus"),
)
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION corral_bump_node_shapes() RETURNS trigger AS $$
BEGIN
    {BUMP};
    RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    op.create_table(
        "change_counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.execute("INSERT INTO change_counters (name, version) VALUES ('node_shapes', 0)")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if not sqlite:
        op.execute(POSTGRES_FUNCTION)
    for name, when, table in TRIGGERS:
        if sqlite:
            op.execute(f"CREATE TRIGGER {name} {when} ON {table} FOR EACH ROW BEGIN {BUMP}; END")
        else:
            op.execute(
                f"CREATE TRIGGER {name} {when} ON {table} FOR EACH STATEMENT EXECUTE FUNCTION corral_bump_node_shapes()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, _, table in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + ("" if sqlite else f" ON {table}"))
    if not sqlite:
        op.execute("DROP FUNCTION IF EXISTS corral_bump_node_shapes()")
    op.drop_table("change_counters")
