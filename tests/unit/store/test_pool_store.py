"""The pools half of the store (issue 19) on SQLite and PostgreSQL: pools (names unique, optimistic versions),
the nodes pools started (live ones, by name, by join token), the events each pool keeps (its newest 1000) and
tenants' budgets (one per tenant, replaced in place, gone with the tenant)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete

from corral.core.budgets import Budget
from corral.core.errors import ConflictError
from corral.core.pools import DRAINING, FAILED, LAUNCHING, RELEASED, RUNNING, InstanceType, PoolNode, PoolSpec
from corral.store.pools import MAX_EVENTS_PER_POOL
from corral.store.tables import TenantRow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
G4 = InstanceType("g4", 4, "A100-80GB", 80 * 1024, price_per_hour=8.0)
G1S = InstanceType("g1s", 1, "L4-24GB", 24 * 1024, price_per_hour=0.3, spot=True)


def spec(name: str = "burst", **kw: Any) -> PoolSpec:
    base: dict[str, Any] = {
        "provider": "local",
        "instance_types": (G4, G1S),
        "max_nodes": 2,
        "labels": {"zone": "lab"},
        "taints": ("experimental",),
        "settings": {},
    }
    return PoolSpec(name=name, **{**base, **kw})


def node(name: str, pool: str = "burst", state: str = LAUNCHING, at: datetime = T0, **kw: Any) -> PoolNode:
    return PoolNode(
        name=name,
        pool=pool,
        instance_type="g4",
        state=state,
        launched_s=at.timestamp(),
        price_per_hour=8.0,
        gpus=4,
        **kw,
    )


def test_create_get_list_and_a_taken_name(store: Any) -> None:
    p = store.create_pool(spec(), "admin", T0)
    assert p.name == "burst" and p.version == 1 and p.created_by == "admin" and p.created_at == T0
    assert p.spec == spec()  # every field round-trips, the instance types and taints as tuples
    assert store.get_pool("burst") == p
    assert store.get_pool("nope") is None
    store.create_pool(spec("alpha"), "admin", T0)
    assert [x.name for x in store.list_pools()] == ["alpha", "burst"]  # by name
    with pytest.raises(ConflictError) as err:
        store.create_pool(spec(max_nodes=5), "someone", T0)
    assert err.value.field == "name"
    assert store.get_pool("burst") == p  # the first one unchanged
    assert len(store.list_pools()) == 2


def test_update_bumps_the_version_and_a_stale_version_conflicts(store: Any) -> None:
    p = store.create_pool(spec(), "admin", T0)
    later = T0 + timedelta(minutes=5)
    changed = replace(p.spec, max_nodes=4, paused=True, instance_types=(G4,))
    out = store.update_pool(changed, later, expected_version=1)
    assert out is not None and out.version == 2 and out.updated_at == later and out.spec == changed
    assert store.get_pool("burst") == out
    with pytest.raises(ConflictError):
        store.update_pool(replace(changed, max_nodes=9), later, expected_version=1)  # someone else's v1
    assert store.get_pool("burst").spec.max_nodes == 4  # type: ignore[union-attr]
    assert store.update_pool(replace(changed, max_nodes=6), later).version == 3  # type: ignore[union-attr]
    assert store.update_pool(spec("nope"), later, expected_version=1) is None


def test_delete(store: Any) -> None:
    store.create_pool(spec(), "admin", T0)
    assert store.delete_pool("burst") is True
    assert store.get_pool("burst") is None and store.list_pools() == []
    assert store.delete_pool("burst") is False
    store.create_pool(spec(), "admin", T0)  # the name is free again
    assert store.get_pool("burst") is not None


def test_pool_nodes_add_update_list_and_find(store: Any) -> None:
    store.add_pool_node(node("burst-g4-1"), 11, ["1", "2"])
    store.add_pool_node(node("burst-g4-2", state=RUNNING, spot=True, provider_id="i-2"), 12, [])
    store.add_pool_node(node("burst-g4-3", state=RELEASED), 13, [])
    store.add_pool_node(node("other-g4-1", pool="other", state=DRAINING), None, [])
    store.add_pool_node(node("other-g4-2", pool="other", state=FAILED), None, [])
    assert [n.name for n in store.list_pool_nodes()] == [
        "burst-g4-1",
        "burst-g4-2",
        "burst-g4-3",
        "other-g4-1",
        "other-g4-2",
    ]
    assert [n.name for n in store.list_pool_nodes("burst")] == ["burst-g4-1", "burst-g4-2", "burst-g4-3"]
    assert [n.name for n in store.list_pool_nodes(live_only=True)] == ["burst-g4-1", "burst-g4-2", "other-g4-1"]
    assert [n.name for n in store.list_pool_nodes("other", live_only=True)] == ["other-g4-1"]

    got = store.get_pool_node("burst-g4-1")
    assert got is not None
    n, token_id, job_ids = got
    assert (token_id, job_ids) == (11, ["1", "2"])
    assert (n.pool, n.instance_type, n.state, n.gpus, n.price_per_hour) == ("burst", "g4", LAUNCHING, 4, 8.0)
    assert n.launched_s == T0.timestamp() and n.joined_s is None and n.live
    n2 = store.get_pool_node("burst-g4-2")[0]
    assert n2.spot and n2.provider_id == "i-2"
    assert store.get_pool_node("nope") is None

    joined = T0 + timedelta(minutes=2)
    assert store.update_pool_node("burst-g4-1", {"state": RUNNING, "joined_at": joined, "provider_id": "i-1"})
    n = store.get_pool_node("burst-g4-1")[0]
    assert (n.state, n.joined_s, n.provider_id) == (RUNNING, joined.timestamp(), "i-1")
    ended = T0 + timedelta(hours=1)
    assert store.update_pool_node("burst-g4-1", {"state": RELEASED, "ended_at": ended, "reason": "idle"})
    n = store.get_pool_node("burst-g4-1")[0]
    assert (n.state, n.ended_s, n.reason, n.live) == (RELEASED, ended.timestamp(), "idle", False)
    assert [x.name for x in store.list_pool_nodes("burst", live_only=True)] == ["burst-g4-2"]
    assert store.update_pool_node("nope", {"state": RUNNING}) is False
    with pytest.raises(ValueError, match="pool"):
        store.update_pool_node("burst-g4-2", {"pool": "evil"})  # not a column one may change
    assert store.get_pool_node("burst-g4-2")[0].pool == "burst"

    assert store.pool_node_for_token(12).name == "burst-g4-2"  # type: ignore[union-attr]
    assert store.pool_node_for_token(13).name == "burst-g4-3"  # type: ignore[union-attr]
    assert store.pool_node_for_token(999) is None


def test_a_node_name_is_taken_once(store: Any) -> None:
    store.add_pool_node(node("burst-g4-1"), 1, [])
    with pytest.raises(Exception):  # noqa: B017  (an IntegrityError: names are unique, whatever the backend)
        store.add_pool_node(node("burst-g4-1", pool="other"), 2, [])
    assert [n.pool for n in store.list_pool_nodes()] == ["burst"]


def test_events_are_listed_oldest_first_per_pool_with_a_limit(store: Any) -> None:
    store.add_pool_events([("burst", "n1", "launch", "g4 for job 1"), ("other", "", "policy-error", "x")], T0)
    store.add_pool_events([("burst", "n1", "joined", "m" * 5000)], T0 + timedelta(seconds=1))
    store.add_pool_events([], T0)  # nothing: nothing written
    burst = store.list_pool_events("burst")
    assert [(e.pool, e.node, e.kind) for e in burst] == [("burst", "n1", "launch"), ("burst", "n1", "joined")]
    assert burst[0].at == T0 and burst[0].message == "g4 for job 1"
    assert len(burst[1].message) == 2000  # cut
    assert [e.kind for e in store.list_pool_events("burst", limit=1)] == ["joined"]  # the newest
    assert [e.kind for e in store.list_pool_events()] == ["launch", "policy-error", "joined"]
    assert store.list_pool_events("nope") == []


def test_each_pool_keeps_its_newest_events(store: Any) -> None:
    store.add_pool_events([("other", "", "keep", "other pool")], T0)
    first = [("burst", "", "old", f"{i}") for i in range(MAX_EVENTS_PER_POOL)]
    store.add_pool_events(first, T0)
    store.add_pool_events([("burst", "", "new", f"{i}") for i in range(5)], T0 + timedelta(seconds=1))
    kept = store.list_pool_events("burst", limit=5 * MAX_EVENTS_PER_POOL)
    assert len(kept) == MAX_EVENTS_PER_POOL
    assert kept[0].message == "5" and kept[0].kind == "old"  # the five oldest went
    assert [e.message for e in kept[-5:]] == ["0", "1", "2", "3", "4"] and kept[-1].kind == "new"
    assert [e.kind for e in store.list_pool_events("other")] == ["keep"]  # another pool's are not touched
    # more than the cap in one call: the newest of them stay
    store.add_pool_events([("burst", "", "flood", f"{i}") for i in range(MAX_EVENTS_PER_POOL + 10)], T0)
    kept = store.list_pool_events("burst", limit=5 * MAX_EVENTS_PER_POOL)
    assert len(kept) == MAX_EVENTS_PER_POOL and {e.kind for e in kept} == {"flood"}
    assert kept[0].message == "10" and kept[-1].message == str(MAX_EVENTS_PER_POOL + 9)


def test_budgets_set_replace_list_and_delete(store: Any) -> None:
    vision = store.create_tenant("vision", T0).id
    nlp = store.create_tenant("nlp", T0).id
    assert store.list_budgets() == []
    store.set_budget(vision, Budget("ignored", "month", 100.0, None, "hold"), T0)
    store.set_budget(nlp, Budget("ignored", "day", None, 50.0, "notify"), T0)
    # the tenant's name comes from the tenant, ordered by it
    assert store.list_budgets() == [
        (nlp, Budget("nlp", "day", None, 50.0, "notify")),
        (vision, Budget("vision", "month", 100.0, None, "hold")),
    ]
    store.set_budget(vision, Budget("vision", "week", None, 9.5, "no-burst"), T0 + timedelta(hours=1))
    assert store.list_budgets()[1] == (vision, Budget("vision", "week", None, 9.5, "no-burst"))  # replaced
    assert len(store.list_budgets()) == 2
    assert store.delete_budget(vision) is True
    assert store.delete_budget(vision) is False
    assert store.list_budgets() == [(nlp, Budget("nlp", "day", None, 50.0, "notify"))]


def test_a_budget_goes_with_its_tenant(store: Any) -> None:
    """The store has no delete_tenant; the foreign key's cascade is what a deleted tenant row relies on."""
    vision = store.create_tenant("vision", T0).id
    nlp = store.create_tenant("nlp", T0).id
    store.set_budget(vision, Budget("vision", gpu_hours=1.0), T0)
    store.set_budget(nlp, Budget("nlp", gpu_hours=2.0), T0)
    with store._tx() as s:
        s.execute(delete(TenantRow).where(TenantRow.id == vision))
    assert [b.tenant for _, b in store.list_budgets()] == ["nlp"]
