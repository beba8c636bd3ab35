"""job row version: `row_version` counts the updates of a job's row, bumped by the database itself (a trigger), so
that a reader can keep the jobs it has read and load again only those whose row changed since (the scheduler's pass
read and converted every pending and running job, a quarter of the server's time with thousands pending; issue 13).
Every write path is covered, old code's included, since no statement has to set it.

SQLite: an AFTER UPDATE trigger sets it to the old value + 1 (recursive triggers are off, and the WHEN clause stops
a statement that sets it itself). PostgreSQL: a BEFORE UPDATE trigger does it on the new row. A later migration that
makes SQLite copy the jobs table (a batch "move and copy") must create the trigger again;
tests/unit/store/test_job_row_version.py fails if it is missing on a migrated database.

Expand-only: a column with a server default and a trigger; code at 0027 runs on this schema unchanged (its updates
bump the version too).

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

SQLITE_TRIGGER = """
CREATE TRIGGER jobs_row_version AFTER UPDATE ON jobs FOR EACH ROW WHEN NEW.row_version = OLD.row_version
BEGIN
    UPDATE jobs SET row_version = OLD.row_version + 1 WHERE id = OLD.id;
END
"""
POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION corral_jobs_row_version() RETURNS trigger AS $$
BEGIN
    NEW.row_version := OLD.row_version + 1;
    RETURN NEW;
END
$$ LANGUAGE plpgsql
"""
POSTGRES_TRIGGER = """
CREATE TRIGGER jobs_row_version BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION corral_jobs_row_version()
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("row_version", sa.Integer(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "sqlite":
        op.execute(SQLITE_TRIGGER)
    else:
        op.execute(POSTGRES_FUNCTION)
        op.execute(POSTGRES_TRIGGER)


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS jobs_row_version" + ("" if op.get_bind().dialect.name == "sqlite" else " ON jobs")
    )
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP FUNCTION IF EXISTS corral_jobs_row_version()")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("row_version")
