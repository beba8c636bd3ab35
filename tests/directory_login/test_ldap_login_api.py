"""LDAP login through the API (the app over a real store, SQLite and PostgreSQL, and a real slapd): users are
provisioned into the tenant and role their groups map to, and a directory never opens a door it should not."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store
from e2e.conftest import free_port

from .conftest import GROUPS, PEOPLE, SEED_USERS, Slapd
from .test_ldap_directory import INJECTIONS


@dataclass
class Cluster:
    api: TestClient
    admin: dict[str, str]
    store: SqlStore

    def login(self, user: str, password: str) -> Any:
        return self.api.post("/api/v1/login", json={"username": user, "password": password})

    def token(self, user: str, password: str | None = None) -> dict[str, str]:
        r = self.login(user, password or SEED_USERS[user])
        assert r.status_code == 200, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def map(self, group: str, tenant: str, role: str = "member") -> int:
        r = self.api.post(
            "/api/v1/directory/groups", json={"group": group, "tenant": tenant, "role": role}, headers=self.admin
        )
        assert r.status_code == 201, r.text
        return int(r.json()["id"])


def make_cluster(tmp_path: Path, database_url: str, **settings: Any) -> tuple[Cluster, SqlStore]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings.setdefault("login_failures_allowed", 1000)  # the back-off is tested elsewhere; here it would interfere
    app = create_app(Settings(data_dir=tmp_path, database_url=database_url, **settings), store)
    admin = {"Authorization": f"Bearer {creds.admin_token}"}
    api = TestClient(app)
    for tenant in ("vision", "nlp"):
        assert api.post("/api/v1/tenants", json={"name": tenant}, headers=admin).status_code == 201
    return Cluster(api, admin, store), store


def ldap_settings(s: Slapd) -> dict[str, Any]:
    return {"ldap_url": s.url, "ldap_user_dn_template": f"uid={{username}},{PEOPLE}", "ldap_group_search_base": GROUPS}


@pytest.fixture
def cluster(slapd: Slapd, tmp_path: Path, database_url: str) -> Iterator[Cluster]:
    c, store = make_cluster(tmp_path, database_url, **ldap_settings(slapd))
    c.map("vision", "vision")
    c.map("nlp", "nlp")
    try:
        yield c
    finally:
        store.close()


def whoami(c: Cluster, headers: dict[str, str]) -> dict[str, Any]:
    r = c.api.get("/api/v1/whoami", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_login_provisions_the_user_into_the_mapped_tenant_and_role(cluster: Cluster) -> None:
    alice = cluster.token("alice")
    assert whoami(cluster, alice) == {"user": "alice", "role": "member", "tenant": "vision"}
    users = {u["name"]: u for u in cluster.api.get("/api/v1/users", headers=cluster.admin).json()}
    assert users["alice"]["directory"] == "ldap" and users["alice"]["has_password"] is False
    # the web portal's password login goes the same way
    r = cluster.api.post("/web/login", json={"username": "bob", "password": SEED_USERS["bob"]})
    assert r.status_code == 200, r.text
    assert (r.json()["user"], r.json()["tenant"], r.json()["role"]) == ("bob", "nlp", "member")


def test_bob_of_another_tenant_cannot_see_alices_jobs(cluster: Cluster) -> None:
    now = datetime.now(UTC)
    cluster.store.upsert_node("node-a", "node-a", "simulated", 0, 0, {}, [], now, address="127.0.0.1")
    alice, bob = cluster.token("alice"), cluster.token("bob")
    r = cluster.api.post("/api/v1/jobs", json={"command": ["echo", "secret"], "name": "alices"}, headers=alice)
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    assert cluster.api.get(f"/api/v1/jobs/{job}", headers=alice).status_code == 200
    assert cluster.api.get(f"/api/v1/jobs/{job}", headers=bob).status_code == 404
    assert job not in [j["id"] for j in cluster.api.get("/api/v1/jobs?all=true", headers=bob).json()]


def test_wrong_password_and_unknown_user_are_refused_alike(cluster: Cluster) -> None:
    for user, password in [("alice", "wrong-password"), ("alice", SEED_USERS["bob"]), ("nobody", "whatever-1")]:
        r = cluster.login(user, password)
        assert r.status_code == 401 and r.json()["error"]["message"] == "wrong user name or password", (user, r.text)
        assert cluster.store.find_user(user) is None  # nothing is provisioned


def test_a_user_in_no_mapped_group_is_refused(cluster: Cluster) -> None:
    r = cluster.login("carol", SEED_USERS["carol"])
    assert r.status_code == 401 and "no directory group" in r.json()["error"]["message"]
    assert cluster.store.find_user("carol") is None


def test_removed_from_every_mapped_group_the_user_is_cut_off(cluster: Cluster) -> None:
    bob = cluster.token("bob")
    nlp = next(
        m["id"]
        for m in cluster.api.get("/api/v1/directory/groups", headers=cluster.admin).json()
        if m["group"] == "nlp"
    )
    assert cluster.api.delete(f"/api/v1/directory/groups/{nlp}", headers=cluster.admin).status_code == 204
    assert cluster.login("bob", SEED_USERS["bob"]).status_code == 401
    assert cluster.api.get("/api/v1/whoami", headers=bob).status_code == 401  # the session it held is revoked


def test_several_mapped_groups_the_highest_role_wins_and_picks_the_tenant(cluster: Cluster) -> None:
    """dave is in vision (member of vision) and nlp-leads (tenant-admin of nlp)."""
    cluster.map("nlp-leads", "nlp", "tenant-admin")
    assert whoami(cluster, cluster.token("dave")) == {"user": "dave", "role": "tenant-admin", "tenant": "nlp"}


def test_a_group_may_be_mapped_by_its_dn_and_mappings_follow_the_directory(cluster: Cluster) -> None:
    vision = next(
        m["id"]
        for m in cluster.api.get("/api/v1/directory/groups", headers=cluster.admin).json()
        if m["group"] == "vision"
    )
    cluster.api.delete(f"/api/v1/directory/groups/{vision}", headers=cluster.admin)
    cluster.map(f"CN=Vision,{GROUPS}", "vision", "viewer")  # DNs compare without case
    assert whoami(cluster, cluster.token("alice"))["role"] == "viewer"


def test_ldap_injection_strings_are_refused(cluster: Cluster) -> None:
    """With alice's right password, no crafted name (wildcards, filter breakers, NUL, DN parts) logs in."""
    for name in INJECTIONS:
        r = cluster.login(name, SEED_USERS["alice"])
        assert r.status_code in (401, 422), (name, r.text)  # 422: NUL bytes are refused before any route
    assert not any(u.directory for u in cluster.store.list_users())  # no one was provisioned


def test_a_local_user_is_never_taken_over_by_the_directory(cluster: Cluster) -> None:
    r = cluster.api.post(
        "/api/v1/users", json={"name": "bob", "tenant": "vision", "password": "local-password"}, headers=cluster.admin
    )
    assert r.status_code == 201, r.text
    assert cluster.login("bob", SEED_USERS["bob"]).status_code == 401  # bob's LDAP password
    assert whoami(cluster, cluster.token("bob", "local-password"))["tenant"] == "vision"


def test_only_admins_manage_mappings(cluster: Cluster) -> None:
    alice = cluster.token("alice")
    assert cluster.api.get("/api/v1/directory/groups", headers=alice).status_code == 403
    r = cluster.api.post(
        "/api/v1/directory/groups", json={"group": "interns", "tenant": "vision", "role": "admin"}, headers=alice
    )
    assert r.status_code == 403
    r = cluster.api.post(
        "/api/v1/directory/groups", json={"group": "x", "tenant": "vision", "role": "king"}, headers=cluster.admin
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "role"
    r = cluster.api.post("/api/v1/directory/groups", json={"group": "x", "tenant": "nope"}, headers=cluster.admin)
    assert r.status_code == 400 and r.json()["error"]["field"] == "tenant"
    r = cluster.api.post("/api/v1/directory/groups", json={"group": "VISION", "tenant": "nlp"}, headers=cluster.admin)
    assert r.status_code == 409 and r.json()["error"]["field"] == "group"


def test_directory_down_is_a_clear_error_and_local_logins_still_work(tmp_path: Path, database_url: str) -> None:
    c, store = make_cluster(
        tmp_path,
        database_url,
        ldap_url=f"ldap://127.0.0.1:{free_port()}",
        ldap_user_dn_template=f"uid={{username}},{PEOPLE}",
        ldap_timeout_s=2,
    )
    try:
        r = c.api.post(
            "/api/v1/users", json={"name": "root2", "role": "admin", "password": "local-password"}, headers=c.admin
        )
        assert r.status_code == 201, r.text
        r = c.login("alice", SEED_USERS["alice"])
        assert r.status_code == 503 and "cannot be reached" in r.json()["error"]["message"], r.text
        assert whoami(c, c.token("root2", "local-password"))["role"] == "admin"
    finally:
        store.close()
