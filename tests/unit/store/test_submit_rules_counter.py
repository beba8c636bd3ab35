"""The submit rules counter (migration 0031) and read_submit_lists: the database bumps the counter whenever a queue,
a quota or a cloud pool is added, changed or removed, whoever writes it (SQLite and PostgreSQL; another server
replica, or an older server), and the store reads the lists a submission is checked against again exactly then.
A stale list would accept a job into a queue just removed, past a quota just lowered, or refuse one a new queue or
pool allows: these tests would catch each."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import text

from corral.core.pools import InstanceType, PoolSpec
from corral.core.resources import GpuInfo
from corral.store.records import Quota
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
G4 = InstanceType("g4", 4, "A100-80GB", 81920)
GPUS = [GpuInfo(index=0, uuid="n-0", model="H100-80GB", memory_mib=81920)]


def _lists(store: SqlStore, tenant_id: int) -> tuple[list[str], list[tuple[str, int, int | None]], list[str]]:
    got = store.read_submit_lists(tenant_id)
    return (
        [q.name for q in got.queues],
        [(q.gpu_model, q.guaranteed_gpus, q.max_gpus) for q in got.quotas],
        [f"{p.spec.name}:{p.spec.max_nodes}" for p in got.pools],
    )


def _fresh(store: SqlStore, tenant_id: int) -> tuple[list[str], list[tuple[str, int, int | None]], list[str]]:
    return (
        [q.name for q in store.list_queues(tenant_id)],
        [(q.gpu_model, q.guaranteed_gpus, q.max_gpus) for q in store.list_quotas(tenant_id)],
        [f"{p.spec.name}:{p.spec.max_nodes}" for p in store.list_pools()],
    )


def _sql(store: SqlStore, statement: str, **params: object) -> None:
    with store._tx() as s:  # noqa: SLF001 (a statement as any writer, another replica or old code, would run it)
        s.execute(text(statement), params)


def test_every_change_a_submission_is_checked_against_is_seen_at_once(store: SqlStore) -> None:
    """Each change is made after the tenant's lists were read (and kept), so each is seen only if its write moved
    the counter: every trigger of the migration is needed here (insert, update and delete on each table)."""
    a = store.create_tenant("a", T0).id
    b = store.create_tenant("b", T0).id

    def change(
        tenant: int, write: Callable[[], object]
    ) -> tuple[list[str], list[tuple[str, int, int | None]], list[str]]:
        _lists(store, tenant)  # kept
        write()
        got = _lists(store, tenant)
        assert got == _fresh(store, tenant)
        return got

    assert _lists(store, a) == (["default"], [], [])  # a tenant starts with its default queue
    assert change(a, lambda: store.upsert_queue(a, "extra", "best-effort", 0)) == (["default", "extra"], [], [])
    assert _lists(store, b) == (["default"], [], []), "another tenant's queue"
    assert change(b, lambda: store.upsert_queue(b, "batch", "strict", 5))[0] == ["batch", "default"]
    assert change(a, lambda: store.set_quota(Quota(a, "", 8, 16)))[1] == [("", 8, 16)]
    assert change(a, lambda: store.set_quota(Quota(a, "", 8, 4)))[1] == [("", 8, 4)]  # lowered
    assert change(a, lambda: store.create_pool(PoolSpec("burst", "local", (G4,), max_nodes=2), "admin", T0))[2] == [
        "burst:2"
    ]
    assert _lists(store, b)[2] == ["burst:2"]
    assert change(b, lambda: store.update_pool(PoolSpec("burst", "local", (G4,), max_nodes=5), T0))[2] == ["burst:5"]
    # written as another replica or an older server would: no call of this store's
    renamed = change(
        a, lambda: _sql(store, "UPDATE queues SET name = 'renamed' WHERE tenant_id = :t AND name = 'extra'", t=a)
    )
    assert renamed[0] == ["default", "renamed"]
    assert change(a, lambda: _sql(store, "UPDATE quotas SET max_gpus = 2 WHERE tenant_id = :t", t=a))[1] == [("", 8, 2)]
    assert change(a, lambda: _sql(store, "DELETE FROM queues WHERE tenant_id = :t", t=a))[0] == []
    assert change(a, lambda: store.delete_quota(a, ""))[1] == []
    assert change(a, lambda: store.delete_pool("burst")) == ([], [], [])
    assert _lists(store, b) == _fresh(store, b) == (["batch", "default"], [], [])


def test_every_table_of_the_rules_has_its_triggers(store: SqlStore) -> None:
    """A migration that copies one of these tables on SQLite drops its triggers; it must create them again."""
    with store._tx() as s:  # noqa: SLF001
        if store.is_sqlite:
            q = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'submit_rules_%'"
        else:
            q = "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'submit_rules_%'"
        names = {r[0] for r in s.execute(text(q))}
    assert names == {f"submit_rules_{t}_{w}" for t in ("queues", "quotas", "pools") for w in ("ins", "upd", "del")}


def test_nothing_changed_reads_nothing_again_and_gives_copies(store: SqlStore) -> None:
    t = store.create_tenant("t", T0).id
    store.set_quota(Quota(t, "", 4, None))
    store.upsert_node("n", "n", "simulated", 8000, 1024, {}, GPUS, T0)
    first = store.read_submit_lists(t)
    store.touch_node("n", T0)  # a heartbeat moves neither counter
    store.set_tenant_weight(t, 2.0)  # nor does what a submission is not checked against
    again = store.read_submit_lists(t)
    assert again.queues[0] is first.queues[0] and again.quotas[0] is first.quotas[0], "read again, nothing changed"
    assert again.nodes[0] is first.nodes[0]
    again.queues.clear()  # a caller's list is its own: the kept one is not touched
    assert [q.name for q in store.read_submit_lists(t).queues] == ["default"]
    store.upsert_node("n", "n", "simulated", 8000, 1024, {"zone": "x"}, GPUS, T0)
    assert store.read_submit_lists(t).nodes[0].labels == {"zone": "x"}, "a node's shape changed: read again"
