"""nodes counter: `change_counters` gets a row `nodes` that the database bumps (triggers) whenever a node or a GPU
is registered or removed, or anything the node list shows changes, except a node's state and last heartbeat: its
hostname, backend, CPUs, memory, labels, registration time, cordon, address, isolation, runtimes, images, and any
column of a GPU (health and admin disable included). Every scheduling pass and every `GET /api/v1/nodes` read every
node and GPU (1,000 nodes and 8,000 GPUs: about half of a `GET /nodes`, and of the pass's snapshot; issue 13); the
store now keeps the list it read and, while this counter stays, reads only each node's state and last heartbeat
(which change with every agent's sync) again.

SQLite has only row triggers; PostgreSQL bumps once per statement. `UPDATE OF` fires when a statement sets a column,
changed or not, which errs on the side of reading again. A later migration that makes SQLite copy the nodes or gpus
table must create its triggers again; tests/unit/store/test_nodes_counter.py fails if one is missing on a migrated
database.

Expand-only: a counter row and triggers; code at 0031 runs on this schema unchanged (its writes bump the counter).

Revision ID: 0032
Revises: 0031
"""

import time

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

BUMP = "UPDATE change_counters SET version = version + 1 WHERE name = 'nodes'"
NODE_COLUMNS = (
    "hostname, backend, cpu_milli, memory_mib, labels, registered_at, cordoned, address, isolation, runtimes, images"
)
# (trigger name, when, table)
TRIGGERS = (
    ("nodes_nodes_ins", "AFTER INSERT", "nodes"),
    ("nodes_nodes_del", "AFTER DELETE", "nodes"),
    ("nodes_nodes_upd", f"AFTER UPDATE OF {NODE_COLUMNS}", "nodes"),
    ("nodes_gpus_ins", "AFTER INSERT", "gpus"),
    ("nodes_gpus_del", "AFTER DELETE", "gpus"),
    ("nodes_gpus_upd", "AFTER UPDATE", "gpus"),
)
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION corral_bump_nodes() RETURNS trigger AS $$
BEGIN
    {BUMP};
    RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    # Starts at the time in microseconds, not 0 (as 0031): a list kept under this counter before a downgrade and an
    # upgrade again is never taken for current.
    op.execute(f"INSERT INTO change_counters (name, version) VALUES ('nodes', {time.time_ns() // 1000})")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if not sqlite:
        op.execute(POSTGRES_FUNCTION)
    for name, when, table in TRIGGERS:
        if sqlite:
            op.execute(f"CREATE TRIGGER {name} {when} ON {table} FOR EACH ROW BEGIN {BUMP}; END")
        else:
            op.execute(
                f"CREATE TRIGGER {name} {when} ON {table} FOR EACH STATEMENT EXECUTE FUNCTION corral_bump_nodes()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, _, table in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + ("" if sqlite else f" ON {table}"))
    if not sqlite:
        op.execute("DROP FUNCTION IF EXISTS corral_bump_nodes()")
    op.execute("DELETE FROM change_counters WHERE name = 'nodes'")
