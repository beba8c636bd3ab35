"""submit rules counter: `change_counters` gets a row `submit_rules` that the database bumps (triggers) whenever a
queue, a quota or a cloud pool is added, changed or removed (a tenant's removal takes its queues and quotas with it,
and bumps it too). Every submission checks its queue, its tenant's quotas and the pools; the server kept none of it
and read all three per submission (2.5 ms of a POST on SQLite, a tenth of the server's CPU in the Kueue scenario;
issue 13). It now keeps what it read and reads it again only when this counter moved, as it does with the nodes'
shapes (0029). These tables change only when an admin changes them, so every write of them bumps it.

SQLite has only row triggers; PostgreSQL bumps once per statement. A later migration that makes SQLite copy one of
these tables must create its triggers again; tests/unit/store/test_submit_rules_counter.py fails if one is missing
on a migrated database, and its first test needs every one of them.

Expand-only: a counter row and triggers; code at 0030 runs on this schema unchanged (its writes bump the counter).

Revision ID: 0031
Revises: 0030
"""

import time

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

BUMP = "UPDATE change_counters SET version = version + 1 WHERE name = 'submit_rules'"
TABLES = ("queues", "quotas", "pools")
# (trigger name, when, table)
TRIGGERS = tuple(
    (f"submit_rules_{table}_{short}", when, table)
    for table in TABLES
    for short, when in (("ins", "AFTER INSERT"), ("del", "AFTER DELETE"), ("upd", "AFTER UPDATE"))
)
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION corral_bump_submit_rules() RETURNS trigger AS $$
BEGIN
    {BUMP};
    RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    # Starts at the time in microseconds, not 0: a server that kept lists under this counter before a downgrade
    # (which drops the row) and an upgrade again cannot find the value it kept them under.
    op.execute(f"INSERT INTO change_counters (name, version) VALUES ('submit_rules', {time.time_ns() // 1000})")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if not sqlite:
        op.execute(POSTGRES_FUNCTION)
    for name, when, table in TRIGGERS:
        if sqlite:
            op.execute(f"CREATE TRIGGER {name} {when} ON {table} FOR EACH ROW BEGIN {BUMP}; END")
        else:
            op.execute(
                f"CREATE TRIGGER {name} {when} ON {table} FOR EACH STATEMENT EXECUTE FUNCTION corral_bump_submit_rules()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, _, table in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + ("" if sqlite else f" ON {table}"))
    if not sqlite:
        op.execute("DROP FUNCTION IF EXISTS corral_bump_submit_rules()")
    op.execute("DELETE FROM change_counters WHERE name = 'submit_rules'")
