"""`corral status` during a rolling upgrade (issue 17): the database's schema revision, its minimum compatible
revision, and each replica's release and newest migration, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.cli.status import _schema_line
from corral.server.services.replicas import compute_status
from corral.store.migrate import code_head
from corral.store.records import Replica
from corral.store.sql import SqlStore

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_status_shows_the_schema_and_each_replicas_newest_migration(store: SqlStore) -> None:
    head = code_head()
    store.touch_replica(Replica("new", "h", "", "0.2.0", T0, T0, head))
    store.touch_replica(Replica("old", "h", "", "0.1.0", T0 + timedelta(seconds=1), T0, "0021"))
    store.touch_replica(Replica("older", "h", "", "0.0.9", T0 + timedelta(seconds=2), T0))  # before 0022: unknown
    status = compute_status(store, "new", T0 + timedelta(seconds=2))
    assert (status.schema_revision, status.min_compatible_revision) == (head, "0021")
    assert [(r.version, r.schema_head) for r in status.replicas] == [("0.2.0", head), ("0.1.0", "0021"), ("0.0.9", "")]
    line = _schema_line(status)
    assert line == f"schema: revision {head} (code from 0021 on may run on it; replicas on older code: 0021)"
    done = status.model_copy(update={"replicas": status.replicas[:1]})
    assert _schema_line(done) == f"schema: revision {head} (code from 0021 on may run on it)"
    assert "unknown" in _schema_line(status.model_copy(update={"schema_revision": ""}))
