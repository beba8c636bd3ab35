"""Login back-off counters, session revocation and the last admin, in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.errors import ConflictError
from corral.core.login_backoff import BackoffPolicy
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
POLICY = BackoffPolicy(free_failures=3, base_s=10.0, max_s=60.0, forget_after_s=600.0)


def test_failures_lock_after_the_free_ones_and_double_to_the_cap(store: SqlStore) -> None:
    locks = [store.record_login_failure("user:a", T0 + timedelta(seconds=i), POLICY) for i in range(6)]
    assert locks[:2] == [None, None]
    assert [lock - (T0 + timedelta(seconds=i)) for i, lock in enumerate(locks) if lock][:4] == [
        timedelta(seconds=10),
        timedelta(seconds=20),
        timedelta(seconds=40),
        timedelta(seconds=60),
    ]
    assert store.load_login_lock(["user:a", "addr:x"], T0 + timedelta(seconds=6)) == locks[-1]
    assert store.load_login_lock(["user:b", "addr:x"], T0) is None  # other keys are not locked
    assert store.load_login_lock(["user:a"], T0 + timedelta(hours=1)) is None  # the lock runs out


def test_a_success_clears_and_old_failures_are_forgotten(store: SqlStore) -> None:
    for i in range(2):
        store.record_login_failure("user:a", T0 + timedelta(seconds=i), POLICY)
    store.clear_login_failures("user:a")
    assert store.record_login_failure("user:a", T0 + timedelta(seconds=3), POLICY) is None  # 1st again
    assert store.record_login_failure("user:a", T0 + timedelta(seconds=4), POLICY) is None  # 2nd
    # ten minutes without a failure: the count starts from zero, so the 3rd does not lock
    assert store.record_login_failure("user:a", T0 + timedelta(seconds=4 + 601), POLICY) is None
    assert store.purge_login_failures(T0 + timedelta(days=2)) == 1
    assert store.load_login_lock(["user:a"], T0) is None


def test_parallel_failures_are_all_counted(store: SqlStore) -> None:
    policy = BackoffPolicy(free_failures=40, base_s=10.0)
    threads = [threading.Thread(target=store.record_login_failure, args=("addr:1.2.3.4", T0, policy)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 8 counted: 31 more reach the 40th failure, which locks; had one been lost, the 39th more would not
    for _ in range(31):
        store.record_login_failure("addr:1.2.3.4", T0, policy)
    assert store.record_login_failure("addr:1.2.3.4", T0, policy) is not None


def _user(store: SqlStore, name: str, role: str = "member") -> int:
    tenant = store.find_tenant("t") or store.create_tenant("t", T0)
    return store.create_user(name, role, T0, tenant_id=tenant.id).id


def test_revoking_a_token_revokes_the_sessions_opened_with_it_down_the_chain(store: SqlStore) -> None:
    uid = _user(store, "alice")
    api = store.create_token("h-api", "user", "api", uid, T0)
    web = store.create_token("h-web", "user", "web session", uid, T0, is_session=True, parent_id=api.id)
    web2 = store.create_token("h-web2", "user", "web session", uid, T0, is_session=True, parent_id=web.id)
    other = store.create_token("h-other", "user", "api", uid, T0)
    assert store.revoke_token(api.id)
    assert store.find_token("h-web") is None and store.find_token("h-web2") is None
    assert store.find_token("h-other") is not None
    assert web2.parent_id == web.id and other.parent_id is None


def test_revoke_sessions_keeps_api_tokens_and_the_one_kept(store: SqlStore) -> None:
    uid = _user(store, "alice")
    store.create_token("h-api", "user", "api", uid, T0)
    keep = store.create_token("h-s1", "user", "login session", uid, T0, is_session=True)
    store.create_token("h-s2", "user", "web session", uid, T0, is_session=True)
    assert store.revoke_sessions(uid, keep_token_id=keep.id) == 1
    assert store.find_token("h-s2") is None
    assert store.find_token("h-s1") is not None and store.find_token("h-api") is not None


def test_the_last_admin_keeps_the_role(store: SqlStore) -> None:
    first = _user(store, "root", "admin")
    with pytest.raises(ConflictError, match="last admin"):
        store.update_user(first, role="member")
    with pytest.raises(ConflictError, match="last admin"):
        store.update_user(first, disabled=True)
    assert store.get_user(first).role == "admin"  # type: ignore[union-attr]
    second = _user(store, "root2", "admin")
    assert store.update_user(first, role="member")  # another admin remains: allowed
    with pytest.raises(ConflictError):
        store.update_user(second, disabled=True)


def test_two_admins_demoting_each_other_at_once_leave_one_admin(store: SqlStore) -> None:
    ids = [_user(store, "root", "admin"), _user(store, "root2", "admin")]
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def demote(uid: int) -> None:
        barrier.wait()
        try:
            store.update_user(uid, role="member")
            outcomes.append("ok")
        except ConflictError:
            outcomes.append("refused")

    threads = [threading.Thread(target=demote, args=(uid,)) for uid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "refused"]
    assert [u.role for u in store.list_users()].count("admin") == 1
