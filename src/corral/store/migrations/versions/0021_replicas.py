"""leases, replicas: several server replicas on one database, one of them the leader (issue 17);
nodes.web_ports: what a node's agent last reported of its jobs' web-UI ports, for the proxy of any replica;
nodes.report_boot/report_seq: the newest agent report applied, whichever replica applied it.

Revision ID: 0021
Revises: 0020
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leases = op.create_table(
        "leases",
        sa.Column("name", sa.String(length=32), primary_key=True),
        sa.Column("holder", sa.String(length=128), nullable=False, server_default=""),
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.bulk_insert(
        leases, [{"name": "leader", "holder": "", "epoch": 0, "expires_at": datetime(1970, 1, 1, tzinfo=UTC)}]
    )
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=128), primary_key=True),
        sa.Column("host", sa.String(length=255), nullable=False, server_default=""),
        sa.Column("url", sa.String(length=255), nullable=False, server_default=""),
        sa.Column("version", sa.String(length=64), nullable=False, server_default=""),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_replicas_last_seen_at", "replicas", ["last_seen_at"])
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("web_ports", sa.JSON(), nullable=True))
        b.add_column(sa.Column("web_ports_at", sa.DateTime(timezone=True), nullable=True))
        b.add_column(sa.Column("report_boot", sa.String(length=64), nullable=False, server_default=""))
        b.add_column(sa.Column("report_seq", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as b:
        b.drop_column("report_seq")
        b.drop_column("report_boot")
        b.drop_column("web_ports_at")
        b.drop_column("web_ports")
    op.drop_index("ix_replicas_last_seen_at", table_name="replicas")
    op.drop_table("replicas")
    op.drop_table("leases")
