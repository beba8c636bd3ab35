"""Issue 13's cheaper read paths keep their answers: the credential cache never lets a revoked token or a
disabled user through (at once through this server, within CREDENTIAL_TTL_S through another replica), the
column-loaded node list equals the per-node one, pending counts per tenant, tenant names on job lists."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server import auth
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.memory import MemoryStore
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Setup = tuple[TestClient, SqlStore, dict[str, str], str]


@pytest.fixture
def setup(database_url: str, tmp_path: Path) -> Iterator[Setup]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        yield client, store, {"Authorization": f"Bearer {creds.admin_token}"}, database_url
    store.close()


def _member(client: TestClient, store: SqlStore, admin: dict[str, str], name: str, tenant: str) -> tuple[dict, int]:
    store.create_user(name, "member", T0, tenant_id=store.create_tenant(tenant, T0).id)
    r = client.post("/api/v1/tokens", json={"name": "t", "user": name}, headers=admin)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}, int(r.json()["id"])


def test_a_token_revoked_through_this_server_stops_at_once(setup: Setup) -> None:
    client, store, admin, _ = setup
    alice, token_id = _member(client, store, admin, "alice", "vision")
    for _ in range(3):  # cached now
        assert client.get("/api/v1/jobs", headers=alice).status_code == 200
    assert client.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code == 204
    assert client.get("/api/v1/jobs", headers=alice).status_code == 401


def test_a_user_disabled_in_the_store_stops_at_once(setup: Setup) -> None:
    client, store, admin, _ = setup
    alice, _ = _member(client, store, admin, "alice", "vision")
    assert client.get("/api/v1/jobs", headers=alice).status_code == 200
    user = store.find_user("alice")
    assert user is not None and store.update_user(user.id, disabled=True)
    assert client.get("/api/v1/jobs", headers=alice).status_code == 401


def test_a_revocation_on_another_replica_counts_within_the_ttl(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    client, store, admin, url = setup
    alice, token_id = _member(client, store, admin, "alice", "vision")
    now = [1000.0]
    monkeypatch.setattr(auth, "_clock", lambda: now[0])
    assert client.get("/api/v1/jobs", headers=alice).status_code == 200
    other = SqlStore(url)  # another server replica on the same database: this server's cache cannot know
    try:
        assert other.revoke_token(token_id)
    finally:
        other.close()
    now[0] += auth.CREDENTIAL_TTL_S - 0.5  # may still be served from the cache ...
    assert client.get("/api/v1/jobs", headers=alice).status_code in (200, 401)
    now[0] += 0.5  # ... but never once the TTL has passed
    assert client.get("/api/v1/jobs", headers=alice).status_code == 401
    assert client.get("/api/v1/jobs", headers=alice).status_code == 401


def test_unknown_tokens_are_never_cached_and_entries_are_per_secret(setup: Setup) -> None:
    client, store, admin, _ = setup
    alice, _ = _member(client, store, admin, "alice", "vision")
    bob, _ = _member(client, store, admin, "bob", "nlp")
    spec = JobSpec(command=("true",), tenant_id=store.find_tenant("vision").id)  # type: ignore[union-attr]
    job = store.create_job(spec, T0)
    for _ in range(2):
        assert client.get("/api/v1/jobs", headers={"Authorization": "Bearer crl_nope"}).status_code == 401
        assert [j["id"] for j in client.get("/api/v1/jobs", headers=alice).json()] == [job.id]
        assert client.get("/api/v1/jobs", headers=bob).json() == []
        assert client.get(f"/api/v1/jobs/{job.id}", headers=bob).status_code == 404
    assert client.get("/api/v1/jobs", headers=alice).json()[0]["tenant"] == "vision"


def test_a_new_tenants_name_is_on_its_jobs(setup: Setup) -> None:
    client, store, admin, _ = setup
    assert client.get("/api/v1/jobs", headers=admin).status_code == 200  # tenant names read before the tenant
    tenant = store.create_tenant("late", T0)
    job = store.create_job(JobSpec(command=("true",), tenant_id=tenant.id), T0)
    assert [j["tenant"] for j in client.get("/api/v1/jobs", headers=admin).json()] == ["late"]
    assert client.get(f"/api/v1/jobs/{job.id}", headers=admin).json()["tenant"] == "late"


def _fleet(store: SqlStore | MemoryStore) -> None:
    for i in range(3):
        gpus = [
            GpuInfo(index=g, uuid=f"GPU-{i}-{g}", model="H100", memory_mib=81920, nvlink_peers=(1 - g,), numa_node=g)
            for g in range(2)
        ]
        store.upsert_node(f"n{i}", f"h{i}", "simulated", 8000, 65536, {"rack": str(i)}, gpus, T0, isolation="users")


@pytest.mark.parametrize("kind", ["sql", "memory"])
def test_list_nodes_equals_each_node_and_pending_counts_per_tenant(kind: str, database_url: str) -> None:
    store: SqlStore | MemoryStore = open_store(database_url) if kind == "sql" else MemoryStore()
    try:
        _fleet(store)
        store.set_gpu_health("n1", 0, False, "xid 79")
        store.set_gpu_disabled("n2", 1, True)
        store.set_node_cordoned("n0", True)
        assert store.list_nodes() == [store.get_node(n) for n in ("n0", "n1", "n2")]
        a, b = store.create_tenant("a", T0).id, store.create_tenant("b", T0).id
        ids = [store.create_job(JobSpec(command=("true",), tenant_id=t), T0).id for t in (a, a, b, None)]
        assert store.finish_job(ids[1], JobState.CANCELLED, None, "", T0)
        assert store.count_jobs_by_tenant([JobState.PENDING]) == {a: 1, b: 1, None: 1}
        assert store.count_jobs_by_tenant([JobState.RUNNING]) == {}
    finally:
        if isinstance(store, SqlStore):
            store.close()
