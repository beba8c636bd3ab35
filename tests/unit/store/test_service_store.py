"""The services half of the store (issue 18) on SQLite and PostgreSQL: names are the cluster's, a change is a
read-modify-write that writes all of it or nothing (and loses nobody's change under concurrency), events and
revisions are capped, deleting a service removes its counts and graph points, replicas are live jobs only."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.core.errors import ConflictError
from corral.core.models import JobSpec
from corral.core.services import MAX_EVENTS, MAX_REVISIONS
from corral.core.states import JobState
from corral.store.records import Service

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REVISION = {"template": {"command": ["serve"]}, "port": 8000, "health_path": "/healthz"}
SETTINGS = {"public": False, "max_surge": 1, "max_unavailable": 0}


def tenants(store: Any) -> tuple[int, int]:
    return store.create_tenant("vision", T0).id, store.create_tenant("nlp", T0).id


def service(store: Any, tenant_id: int, name: str = "web", replicas: int = 2) -> Service:
    return store.create_service(tenant_id, None, name, SETTINGS, REVISION, replicas, T0)


def test_create_starts_at_revision_one_and_names_are_unique_across_tenants(store: Any) -> None:
    vision, nlp = tenants(store)
    s = service(store, vision)
    assert (s.name, s.tenant_id, s.revision, s.stable_revision, s.replicas) == ("web", vision, 1, 0, 2)
    assert s.version == 1 and not s.deleting and s.settings == SETTINGS
    assert [r["revision"] for r in s.revisions] == [1]
    assert s.current["port"] == 8000 and s.current["health_path"] == "/healthz"
    assert s.current["template"] == {"command": ["serve"]}
    assert s.state["rollout"]["state"] == "progressing"
    assert [e["kind"] for e in s.events] == ["created"]
    with pytest.raises(ConflictError) as err:
        service(store, nlp)  # another tenant, same name: the gateway's URL is the cluster's
    assert err.value.field == "name"
    with pytest.raises(ConflictError):
        service(store, vision)
    assert [x.name for x in store.list_services()] == ["web"]


def test_get_by_id_by_name_and_list_by_tenant(store: Any) -> None:
    vision, nlp = tenants(store)
    a = service(store, vision, "a")
    b = service(store, nlp, "b")
    c = service(store, vision, "c")
    assert store.get_service(a.id) == a
    assert store.get_service_by_name("b") == b
    assert store.get_service(10_000) is None and store.get_service_by_name("nope") is None
    assert [s.id for s in store.list_services()] == [a.id, b.id, c.id]
    assert [s.id for s in store.list_services(vision)] == [a.id, c.id]
    assert [s.id for s in store.list_services(nlp)] == [b.id]


def test_modify_writes_what_the_change_returns_and_its_events(store: Any) -> None:
    vision, _ = tenants(store)
    s = service(store, vision)
    later = T0 + timedelta(minutes=1)
    out = store.modify_service(
        s.id,
        lambda cur: {"replicas": cur.replicas + 1, "_events": [("scaled", "by hand")]},
        later,
        events=[("note", "first")],
    )
    assert out is not None and out.replicas == 3 and out.version == 2 and out.updated_at == later
    assert [(e["kind"], e["message"]) for e in out.events[-2:]] == [("note", "first"), ("scaled", "by hand")]
    assert store.get_service(s.id) == out
    # nothing to change and no event: nothing written, not even the version
    same = store.modify_service(s.id, lambda cur: {}, later + timedelta(minutes=1))
    assert same == out and store.get_service(s.id).version == 2  # type: ignore[union-attr]
    assert store.modify_service(10_000, lambda cur: {"replicas": 1}, later) is None


def test_a_change_that_raises_writes_nothing(store: Any) -> None:
    vision, _ = tenants(store)
    s = service(store, vision)

    def broken(cur: Service) -> dict[str, Any]:
        raise ConflictError("no", field="revision")

    with pytest.raises(ConflictError):
        store.modify_service(s.id, broken, T0 + timedelta(minutes=1), events=[("x", "y")])
    with pytest.raises(ValueError, match="not updatable"):
        store.modify_service(s.id, lambda cur: {"replicas": 5, "name": "other"}, T0 + timedelta(minutes=1))
    assert store.get_service(s.id) == s


def test_events_and_revisions_are_capped_newest_kept(store: Any) -> None:
    vision, _ = tenants(store)
    s = service(store, vision)
    for i in range(MAX_EVENTS + 20):
        store.modify_service(s.id, lambda cur, i=i: {"_events": [("n", str(i))]}, T0)
    events = store.get_service(s.id).events  # type: ignore[union-attr]
    assert len(events) == MAX_EVENTS
    assert events[-1]["message"] == str(MAX_EVENTS + 19) and events[0]["message"] == "20"

    def new_revision(cur: Service) -> dict[str, Any]:
        n = cur.revision + 1
        return {"revisions": [*cur.revisions, {**REVISION, "revision": n}], "revision": n}

    for _ in range(MAX_REVISIONS + 5):
        store.modify_service(s.id, new_revision, T0)
    after = store.get_service(s.id)
    assert after is not None and after.revision == MAX_REVISIONS + 6
    assert [r["revision"] for r in after.revisions] == list(range(7, MAX_REVISIONS + 7))
    assert after.current["revision"] == after.revision
    assert after.version == 1 + MAX_EVENTS + 20 + MAX_REVISIONS + 5


def test_concurrent_changes_lose_no_update(store: Any) -> None:
    vision, _ = tenants(store)
    s = service(store, vision)
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(20):
                store.modify_service(
                    s.id, lambda cur: {"settings": {**cur.settings, "n": cur.settings.get("n", 0) + 1}}, T0
                )
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    after = store.get_service(s.id)
    assert after is not None and after.settings["n"] == 160 and after.version == 161


def test_traffic_is_kept_per_server_and_replaced(store: Any) -> None:
    vision, _ = tenants(store)
    a, b = service(store, vision, "a"), service(store, vision, "b")
    store.save_service_traffic("s1", {a.id: {"requests": 10}, b.id: {"requests": 1}}, T0)
    store.save_service_traffic("s2", {a.id: {"requests": 5}}, T0 + timedelta(seconds=1))
    store.save_service_traffic("s1", {a.id: {"requests": 30, "errors": 2}}, T0 + timedelta(seconds=2))
    got = store.load_service_traffic()
    assert set(got) == {a.id, b.id} and set(got[a.id]) == {"s1", "s2"}
    assert got[a.id]["s1"] == {"requests": 30, "errors": 2, "_updated_at": T0 + timedelta(seconds=2)}
    assert got[a.id]["s2"]["requests"] == 5 and got[b.id]["s1"]["requests"] == 1


def test_samples_since_and_prune(store: Any) -> None:
    vision, _ = tenants(store)
    a, b = service(store, vision, "a"), service(store, vision, "b")
    for i in range(5):
        store.add_service_samples([(a.id, {"rps": float(i)}), (b.id, {"rps": 100.0})], T0 + timedelta(minutes=i))
    got = store.service_samples(a.id, T0 + timedelta(minutes=2))
    assert [(at, d["rps"]) for at, d in got] == [(T0 + timedelta(minutes=i), float(i)) for i in (2, 3, 4)]
    assert store.prune_service_samples(T0 + timedelta(minutes=3)) == 6
    assert [d["rps"] for _, d in store.service_samples(a.id, T0)] == [3.0, 4.0]
    assert len(store.service_samples(b.id, T0)) == 2


def test_delete_removes_the_service_its_traffic_and_samples(store: Any) -> None:
    vision, _ = tenants(store)
    a, b = service(store, vision, "a"), service(store, vision, "b")
    store.save_service_traffic("s1", {a.id: {"requests": 1}, b.id: {"requests": 2}}, T0)
    store.add_service_samples([(a.id, {"rps": 1.0}), (b.id, {"rps": 2.0})], T0)
    assert store.delete_service(a.id) is True
    assert store.get_service(a.id) is None and store.get_service_by_name("a") is None
    assert set(store.load_service_traffic()) == {b.id}
    assert store.service_samples(a.id, T0 - timedelta(days=1)) == []
    assert len(store.service_samples(b.id, T0 - timedelta(days=1))) == 1
    assert store.delete_service(a.id) is False
    assert service(store, vision, "a").id != a.id  # the name is free again


def test_live_replicas_are_the_pending_and_running_replica_jobs(store: Any, ready_nodes: Any) -> None:
    ready_nodes("n1")
    vision, _ = tenants(store)
    a, b = service(store, vision, "a"), service(store, vision, "b")

    def job(service_id: int | None) -> int:
        spec = JobSpec(command=("serve",), tenant_id=vision, service_id=service_id, service_revision=1)
        return int(store.create_job(spec, T0).id)

    pending, running, done, cancelled, other = job(a.id), job(a.id), job(a.id), job(a.id), job(b.id)
    plain = job(None)
    assert store.assign_job(running, "n1", [], T0)
    assert store.assign_job(done, "n1", [], T0)
    assert store.finish_job(done, JobState.FAILED, 1, "boom", T0)
    store.request_cancel(cancelled, T0)
    assert [j.id for j in store.live_replicas(a.id)] == [pending, running]
    assert [j.id for j in store.live_replicas()] == [pending, running, other]
    assert plain not in [j.id for j in store.live_replicas()]
    assert store.live_replicas(b.id)[0].spec.service_id == b.id
