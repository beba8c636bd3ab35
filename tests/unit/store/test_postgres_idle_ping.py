"""PostgreSQL: a pooled connection that sat idle (PING_IDLE_S) is pinged before use and replaced when dead, so the
server's first call after a database restart works; a busy server's connections are not pinged on every checkout
(a round trip per transaction), and one that died within that second fails its statement once."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

import corral.store.sql as sql
from corral.store.sql import SqlStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def database_url(postgres_url: str) -> str:
    """PostgreSQL only (conftest's `store` opens it)."""
    return postgres_url


def _kill_backends(url: str) -> int:
    """Terminate every other session of the test's database, as a restart of PostgreSQL would."""
    db = url.rpartition("/")[2]
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db,),
        ).fetchall()
    return len(rows)


def test_an_idle_connection_killed_by_the_database_is_replaced_before_use(
    store: SqlStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql, "PING_IDLE_S", 0.05)
    assert store.get_node("n1") is None  # a pooled connection now
    assert _kill_backends(postgres_url) >= 1
    time.sleep(0.1)  # idle for longer than PING_IDLE_S: pinged, found dead, replaced
    assert store.get_node("n1") is None and store.count_users() == 0


def test_a_connection_used_within_the_idle_time_is_not_pinged(
    store: SqlStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql, "PING_IDLE_S", 3600.0)
    assert store.get_node("n1") is None
    assert _kill_backends(postgres_url) >= 1
    with pytest.raises(OperationalError):  # no ping: the dead connection's statement fails, once
        store.get_node("n1")
    assert store.get_node("n1") is None  # the pool dropped the connections made before: a new one
