"""Tenants, users, roles and tokens through the API: what each role sees and may do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store


class Api:
    def __init__(self, client: TestClient, admin_token: str) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str, password: str = "correct horse") -> dict[str, str]:
        r = self.call("POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": password})
        assert r.status_code == 201, r.text
        token = self.call("POST", "/login", auth={}, json={"username": name, "password": password}).json()["token"]
        return {"Authorization": f"Bearer {token}"}

    def submit(self, auth: dict[str, str], **kw: Any) -> Any:
        return self.call("POST", "/jobs", auth=auth, json={"command": ["true"], **kw})


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(NodeCertApp(create_app(Settings(data_dir=tmp_path, database_url=database_url), store))) as client:
        a = Api(client, creds.admin_token)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(16)]
        assert (
            client.post(
                "/api/v1/agents/register",
                json={"name": "n1", "backend": "simulated", "gpus": gpus},
                headers=NodeAgents(client)("n1"),
            ).status_code
            == 200
        )
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


def test_member_sees_only_its_tenants_jobs(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    mine = api.submit(alice).json()
    theirs = api.submit(bob).json()
    assert mine["tenant"] == "vision" and theirs["tenant"] == "nlp"
    assert [j["id"] for j in api.call("GET", "/jobs?all=true", auth=alice).json()] == [mine["id"]]
    for path in (f"/jobs/{theirs['id']}", f"/jobs/{theirs['id']}/logs", f"/jobs/{theirs['id']}/events"):
        assert api.call("GET", path, auth=alice).status_code == 404  # not 403: its existence is private
    assert api.call("POST", f"/jobs/{theirs['id']}/cancel", auth=alice).status_code == 404
    assert {j["id"] for j in api.call("GET", "/jobs?all=true").json()} == {mine["id"], theirs["id"]}  # admin


@pytest.mark.parametrize(
    ("role", "can_submit", "can_manage_users"),
    [
        pytest.param("viewer", False, False, id="viewer-reads-only"),
        pytest.param("member", True, False, id="member-submits"),
        pytest.param("tenant-admin", True, True, id="tenant-admin-manages-its-tenant"),
    ],
)
def test_roles(api: Api, role: str, can_submit: bool, can_manage_users: bool) -> None:
    who = api.user("carol", role, "vision")
    assert (api.submit(who).status_code == 201) is can_submit
    r = api.call("POST", "/users", auth=who, json={"name": "dave", "role": "member"})
    assert (r.status_code == 201) is can_manage_users
    if can_manage_users:
        assert r.json()["tenant"] == "vision"
        assert api.call("POST", "/users", auth=who, json={"name": "eve", "role": "admin"}).status_code == 403
        assert {u["name"] for u in api.call("GET", "/users", auth=who).json()} == {"carol", "dave"}
    refused = api.call("POST", "/tenants", auth=who, json={"name": "x"})
    assert refused.status_code == 403
    # In words a user acts on, not the action's code ("role member may not manage-cluster"):
    assert refused.json()["error"]["message"] == (
        f"your role ({role}) may not manage the cluster (tenants, quotas, queues, nodes); that takes: admin"
    )


def test_tokens_are_hashed_revocable_and_expire(api: Api, database_url: str) -> None:
    alice = api.user("alice", "member", "vision")
    made = api.call("POST", "/tokens", auth=alice, json={"name": "ci", "expires_in_s": 3600}).json()
    secret = made.pop("token")
    assert secret.startswith("crl_") and made["user"] == "alice" and made["expires_at"]
    ci = {"Authorization": f"Bearer {secret}"}
    assert api.call("GET", "/whoami", auth=ci).json() == {"user": "alice", "role": "member", "tenant": "vision"}
    assert all(t.get("token") is None for t in api.call("GET", "/tokens", auth=alice).json())  # never shown again
    store = open_store(database_url)
    try:
        assert all(secret not in (t.name or "") for t in store.list_tokens())
        from corral.server.auth import hash_token

        assert store.find_token(hash_token(secret)) is not None and store.find_token(secret) is None
    finally:
        store.close()
    assert api.call("DELETE", f"/tokens/{made['id']}", auth=alice).status_code == 204
    assert api.call("GET", "/whoami", auth=ci).status_code == 401


def test_login_failures_are_one_message(api: Api) -> None:
    api.user("alice", "member", "vision")
    for body in ({"username": "alice", "password": "wrong-password"}, {"username": "nobody", "password": "x"}):
        r = api.call("POST", "/login", auth={}, json=body)
        assert r.status_code == 401 and r.json()["error"]["message"] == "wrong user name or password"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param("/tenants", {"name": "Bad Name"}, "name", id="tenant-name"),
        pytest.param("/tenants", {"name": "t2", "parent": "nope"}, "parent", id="unknown-parent"),
        pytest.param(
            "/tenants/vision/quotas", {"guaranteed_gpus": 8, "max_gpus": 4}, "max_gpus", id="max-below-guarantee"
        ),
        pytest.param("/tenants/vision/quotas", {"guaranteed_gpus": -1}, "guaranteed_gpus", id="negative-quota"),
        pytest.param("/tenants/vision/quotas", {"guaranteed_gpus": 17}, "guaranteed_gpus", id="quota-exceeds-pool"),
        pytest.param(
            "/tenants/vision/quotas",
            {"gpu_model": "A100", "guaranteed_gpus": 1},
            "gpu_model",
            id="quota-for-a-model-not-in-the-pool",
        ),
        pytest.param("/users", {"name": "x", "role": "god"}, "role", id="unknown-role"),
        pytest.param("/users", {"name": "x", "password": "short"}, "password", id="short-password"),
        pytest.param("/jobs", {"command": ["true"], "queue": "nope"}, "queue", id="unknown-queue"),
        pytest.param("/jobs", {"command": ["true"], "time_limit_s": 0}, "time_limit_s", id="zero-time-limit"),
    ],
)
def test_bad_tenancy_input_names_the_field(api: Api, path: str, body: dict[str, Any], field: str) -> None:
    method = "PUT" if path.endswith("quotas") else "POST"
    r = api.call(method, path, json=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["field"] == field


def test_quotas_and_queues_roundtrip(api: Api) -> None:
    r = api.call("PUT", "/tenants/vision/quotas", json={"gpu_model": "H100", "guaranteed_gpus": 8, "max_gpus": 16})
    assert r.status_code == 200
    api.call("PUT", "/tenants/vision/quotas", json={"gpu_model": "H100", "guaranteed_gpus": 4, "max_gpus": 16})
    assert api.call("GET", "/quotas?tenant=vision").json() == [
        {"tenant": "vision", "gpu_model": "H100", "guaranteed_gpus": 4, "max_gpus": 16}
    ]
    assert (
        api.call("PUT", "/tenants/vision/queues", json={"name": "urgent", "mode": "strict", "priority": 10}).status_code
        == 200
    )
    assert {q["name"] for q in api.call("GET", "/queues?tenant=vision").json()} == {"default", "urgent"}
    alice = api.user("alice", "member", "vision")
    assert api.submit(alice, queue="urgent").json()["queue"] == "urgent"
    assert api.call("GET", "/quotas?tenant=nlp", auth=alice).status_code == 404
    assert api.call("DELETE", "/tenants/vision/quotas?gpu_model=H100").status_code == 204
    assert api.call("GET", "/quotas?tenant=vision").json() == []


def test_usage_report_is_scoped_to_the_callers_tenant(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    store = api.client.app.state.ctx.store  # type: ignore[attr-defined]
    from datetime import UTC, datetime, timedelta

    from corral.core.states import JobState

    start = datetime.now(UTC) - timedelta(hours=3)
    for who, gpus in ((alice, 2), (bob, 1)):
        job_id = api.submit(who, gpus=0).json()["id"]
        store.finish_job(job_id, JobState.CANCELLED, None, "", start)  # keep the scheduler off it
        from sqlalchemy import update

        from corral.store.tables import JobRow

        with store._tx() as s:  # a finished two-hour run of `gpus` GPUs
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(gpus=gpus, started_at=start, finished_at=start + timedelta(hours=2), node="n1", gpu_indices=[0])
            )
    mine = api.call("GET", "/reports/usage", auth=alice).json()
    assert mine == [{"key": "vision", "gpu_hours": 4.0, "jobs": 1, "avg_util_pct": None, "cost": 0.0}]
    everyone = api.call("GET", "/reports/usage").json()
    assert {r["key"]: r["gpu_hours"] for r in everyone} == {"vision": 4.0, "nlp": 2.0}
    csv = api.call("GET", "/reports/usage", params={"format": "csv", "group_by": "user"})
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0] == "user,gpu_hours,jobs,avg_util_pct,cost"
    bad = api.call("GET", "/reports/usage", params={"group_by": "planet"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "group_by"


def test_guarantees_of_all_tenants_fit_the_pool(api: Api) -> None:
    assert api.call("PUT", "/tenants/vision/quotas", json={"guaranteed_gpus": 10}).status_code == 200
    r = api.call("PUT", "/tenants/nlp/quotas", json={"guaranteed_gpus": 8})
    assert r.status_code == 400 and "pool has 16" in r.json()["error"]["message"]
    assert api.call("GET", "/quotas?tenant=nlp").json() == []  # nothing half-applied
    assert api.call("PUT", "/tenants/nlp/quotas", json={"guaranteed_gpus": 6}).status_code == 200


def test_job_for_a_model_the_tenant_has_no_quota_for(api: Api) -> None:
    api.call("PUT", "/tenants/vision/quotas", json={"gpu_model": "H100", "guaranteed_gpus": 2, "max_gpus": 4})
    alice = api.user("alice", "member", "vision")
    r = api.submit(alice, gpus=1, gpu_model="A100")
    assert r.status_code == 400 and r.json()["error"]["field"] in ("gpu_model",)
    assert api.submit(alice, gpus=1, gpu_model="H100").status_code == 201
    assert api.call("GET", "/jobs?all=true", auth=alice).json()[0]["gpu_model"] == "H100"


def test_another_tenants_tokens_and_users_are_out_of_reach(api: Api) -> None:
    boss = api.user("vboss", "tenant-admin", "vision")
    bob = api.user("bob", "member", "nlp")
    bob_token = api.call("POST", "/tokens", auth=bob, json={"name": "x"}).json()
    assert api.call("DELETE", f"/tokens/{bob_token['id']}", auth=boss).status_code == 404
    assert api.call("POST", "/tokens", auth=boss, json={"user": "bob"}).status_code == 404
    assert api.call("PATCH", "/users/bob", auth=boss, json={"role": "viewer"}).status_code == 404
    assert all(t["user"] != "bob" for t in api.call("GET", "/tokens", auth=boss).json())
