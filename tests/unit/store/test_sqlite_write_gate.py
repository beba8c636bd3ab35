"""The SQLite write gate (store/sqlite_gate.py): this process's writers queue in it, not in SQLite's busy handler.
It must be held exactly while a transaction that wrote is open, never by a read, and never outlive a rollback."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from corral.core.errors import ConflictError
from corral.store.sql import SqlStore
from corral.store.sqlite_gate import WriteGate
from corral.store.tables import UserRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path):
    s = SqlStore(f"sqlite:///{tmp_path}/gate.db")
    s.migrate()
    yield s
    s.close()


def test_held_from_the_first_write_until_commit_and_not_by_reads(store: SqlStore) -> None:
    gate = store.write_gate
    assert gate is not None
    with store._tx() as s:  # noqa: SLF001 (the store's own transaction)
        s.execute(select(UserRow.id)).all()
        assert not gate.held, "a read took the gate"
        s.add(UserRow(name="ann", role="user", created_at=NOW, password_hash=""))
        s.flush()
        assert gate.held
    assert not gate.held, "the gate outlived the commit"
    store.list_jobs()
    assert not gate.held


def test_opened_after_a_failed_write(store: SqlStore) -> None:
    store.create_user("ann", "user", NOW)
    with pytest.raises(ConflictError):
        store.create_user("ann", "user", NOW)  # the INSERT ran (gate taken), failed, rolled back
    assert store.write_gate is not None and not store.write_gate.held
    assert store.create_user("bob", "user", NOW).name == "bob"


def test_concurrent_writers_all_land(store: SqlStore) -> None:
    """Many threads writing at once through one store: each waits its turn; none fails as 'database is locked'."""
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for k in range(10):
                store.create_user(f"u{i}-{k}", "user", NOW)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.count_users() == 120
    assert store.write_gate is not None and not store.write_gate.held


def test_a_second_writer_waits_until_the_first_commits(store: SqlStore) -> None:
    gate = store.write_gate
    assert gate is not None
    wrote, go_on = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with store._tx() as s:  # noqa: SLF001
            s.add(UserRow(name="first", role="user", created_at=NOW, password_hash=""))
            s.flush()
            wrote.set()
            go_on.wait(10)
            order.append("first commits")

    t = threading.Thread(target=first)
    t.start()
    assert wrote.wait(10)

    def second() -> None:
        store.create_user("second", "user", NOW)
        order.append("second wrote")

    t2 = threading.Thread(target=second)
    t2.start()
    t2.join(0.3)
    assert t2.is_alive(), "the second writer did not wait for the first"
    go_on.set()
    t.join(10)
    t2.join(10)
    assert order == ["first commits", "second wrote"]


def test_reentrant_per_thread_and_bounded_wait() -> None:
    gate = WriteGate(wait_s=0.05)
    assert gate.acquire() and gate.acquire()  # a thread's second connection is not stopped by its first
    me = threading.get_ident()
    gate.release(me)
    assert gate.held
    other: list[bool] = []
    t = threading.Thread(target=lambda: other.append(gate.acquire()))
    t.start()
    t.join(5)
    assert other == [False], "a writer waited past wait_s instead of going on without the gate (SQLite decides)"
    gate.release(me)
    assert not gate.held
    t = threading.Thread(target=lambda: other.append(gate.acquire()))
    t.start()
    t.join(5)
    assert other == [False, True]


def test_postgres_has_no_gate() -> None:
    assert SqlStore("postgresql://u:p@127.0.0.1:1/none").write_gate is None
