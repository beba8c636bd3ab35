"""Attacks on login and sessions, each automated: the login timing (code path) for unknown users, guessing
passwords per user and per address, a session that outlives its token or a password change, the only admin
demoting itself, a disabled user's tokens, /metrics without a token."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.core.login_backoff import BackoffPolicy
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store

PASSWORD = "correct horse"


@dataclasses.dataclass
class Cluster:
    client: TestClient
    admin: dict[str, str]

    @property
    def app(self) -> Any:
        return self.client.app

    def verifications(self) -> int:
        return int(self.app.state.ctx.passwords.verifications)

    def backoff(self, free_failures: int) -> None:
        """Lockouts long enough (60 s) that no slow test machine sees one run out between two requests."""
        ctx = self.app.state.ctx
        policy = BackoffPolicy(free_failures=free_failures, base_s=60.0, max_s=600.0)
        self.app.state.ctx = dataclasses.replace(ctx, logins=dataclasses.replace(ctx.logins, policy=policy))

    def token_of(self, user: str) -> tuple[int, dict[str, str]]:
        r = self.client.post("/api/v1/tokens", headers=self.admin, json={"name": "api", "user": user})
        assert r.status_code == 201, r.text
        return int(r.json()["id"]), {"Authorization": f"Bearer {r.json()['token']}"}

    def api_login(self, user: str, password: str = PASSWORD, client: TestClient | None = None) -> Any:
        return (client or self.client).post("/api/v1/login", json={"username": user, "password": password})


def _make(tmp_path: Path, address: str = "testclient", **settings: Any) -> Iterator[Cluster]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    app = create_app(Settings(data_dir=tmp_path, database_url=url, **settings), store)
    with TestClient(app, client=(address, 50000)) as client:
        admin = {"Authorization": f"Bearer {creds.admin_token}"}
        assert client.post("/api/v1/tenants", headers=admin, json={"name": "vision"}).status_code == 201
        for name, pw in (("alice", PASSWORD), ("bob", PASSWORD), ("nopass", None)):
            r = client.post(
                "/api/v1/users",
                headers=admin,
                json={"name": name, "role": "member", "tenant": "vision", "password": pw},
            )
            assert r.status_code == 201, r.text
        yield Cluster(client, admin)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from _make(tmp_path)


# ---- the same work for users that exist and users that do not -------------------------------------------
@pytest.mark.parametrize("path", ["/api/v1/login", "/web/login"])
@pytest.mark.parametrize(
    "username,password",
    [
        ("alice", "wrong password"),  # a real user, a wrong password
        ("nobody", "wrong password"),  # no such user: must cost the same argon2 verification
        ("nopass", "wrong password"),  # a user without a password
        ("alice", PASSWORD),  # the right one
    ],
)
def test_every_password_login_runs_exactly_one_argon2_verification(
    cluster: Cluster, path: str, username: str, password: str
) -> None:
    before = cluster.verifications()
    r = cluster.client.post(path, json={"username": username, "password": password})
    assert cluster.verifications() - before == 1
    assert r.status_code == (200 if password == PASSWORD else 401)
    if r.status_code == 401:
        assert r.json()["error"]["message"] == "wrong user name or password"


def test_a_disabled_user_costs_the_same_and_gets_the_same_answer(cluster: Cluster) -> None:
    assert (
        cluster.client.patch("/api/v1/users/alice", headers=cluster.admin, json={"disabled": True}).status_code == 200
    )
    before = cluster.verifications()
    r = cluster.api_login("alice")
    assert r.status_code == 401 and r.json()["error"]["message"] == "wrong user name or password"
    assert cluster.verifications() - before == 1


# ---- guessing passwords -------------------------------------------------------------------------------------
def test_a_user_name_backs_off_after_failures_even_for_the_right_password(cluster: Cluster) -> None:
    cluster.backoff(free_failures=3)
    for _ in range(3):
        assert cluster.api_login("alice", "guess").status_code == 401
    before = cluster.verifications()
    for path, body in (
        ("/api/v1/login", {"username": "alice", "password": PASSWORD}),
        ("/web/login", {"username": "alice", "password": "guess"}),
    ):
        r = cluster.client.post(path, json=body)
        assert r.status_code == 429, r.text
        assert 0 < int(r.headers["retry-after"]) <= 60
        assert r.json()["error"]["code"] == "rate_limited" and "too many failed logins" in r.json()["error"]["message"]
    assert cluster.verifications() == before  # a locked name costs no argon2 at all
    assert cluster.api_login("bob").status_code == 200  # other users are not locked out


def test_unknown_names_back_off_like_known_ones(cluster: Cluster) -> None:
    """Otherwise the 429 itself would tell which names exist."""
    cluster.backoff(free_failures=2)
    for name in ("alice", "nobody"):
        for _ in range(2):
            assert cluster.api_login(name, "guess").status_code == 401
        assert cluster.api_login(name, "guess").status_code == 429


def test_a_success_resets_the_users_count(cluster: Cluster) -> None:
    cluster.backoff(free_failures=3)
    for _ in range(2):
        assert cluster.api_login("alice", "guess").status_code == 401
    assert cluster.api_login("alice").status_code == 200
    for _ in range(2):
        assert cluster.api_login("alice", "guess").status_code == 401  # would be 429 without the reset
    assert cluster.api_login("alice").status_code == 200


def test_an_address_backs_off_across_user_names(cluster: Cluster) -> None:
    """Spraying one password over many names: each name fails once, the address is what locks."""
    cluster.backoff(free_failures=2)  # an address may fail 4 times as often: 8
    for i in range(8):
        assert cluster.api_login(f"spray{i}", "Summer2026!").status_code == 401
    assert cluster.api_login("alice").status_code == 429  # from this address, even a right password waits
    assert cluster.client.post("/web/login", json={"token": "crl_guessed"}).status_code == 429


def test_the_lockout_is_per_address(tmp_path: Path) -> None:
    gen = _make(tmp_path, address="10.0.0.1")
    cluster = next(gen)
    try:
        cluster.backoff(free_failures=2)
        for i in range(8):
            assert cluster.api_login(f"spray{i}", "x" * 8).status_code == 401
        assert cluster.api_login("alice").status_code == 429
        elsewhere = TestClient(cluster.app, client=("10.0.0.2", 50000))  # no `with`: the app has started already
        assert cluster.api_login("alice", client=elsewhere).status_code == 200
    finally:
        gen.close()


def test_bad_tokens_at_web_login_count_against_the_address(cluster: Cluster) -> None:
    cluster.backoff(free_failures=1)  # 4 for an address
    for _ in range(4):
        assert cluster.client.post("/web/login", json={"token": "crl_guessed"}).status_code == 401
    assert cluster.client.post("/web/login", json={"token": "crl_guessed"}).status_code == 429


# ---- sessions end with their token, a password change, a disabled user --------------------------------------
def _web_session(cluster: Cluster, client: TestClient, **body: str) -> None:
    r = client.post("/web/login", json=body)
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/jobs").status_code == 200


def test_a_session_opened_with_a_token_dies_with_it(cluster: Cluster) -> None:
    token_id, headers = cluster.token_of("alice")
    secret = headers["Authorization"].removeprefix("Bearer ")
    _web_session(cluster, cluster.client, token=secret)
    assert cluster.client.delete(f"/api/v1/tokens/{token_id}", headers=cluster.admin).status_code == 204
    r = cluster.client.get("/api/v1/jobs")
    assert r.status_code == 401, "the web session outlived the revocation of the token it was opened with"
    assert cluster.client.get("/web/session").json()["authenticated"] is False


def test_a_session_opened_with_a_cli_login_dies_with_that_login(cluster: Cluster) -> None:
    cli = cluster.api_login("alice").json()
    assert cli["kind"] == "session"
    _web_session(cluster, cluster.client, token=cli["token"])
    alice = {"Authorization": f"Bearer {cli['token']}"}
    assert cluster.client.delete(f"/api/v1/tokens/{cli['id']}", headers=alice).status_code == 204
    assert cluster.client.get("/api/v1/jobs").status_code == 401


def test_a_password_change_ends_every_session_of_the_user(cluster: Cluster) -> None:
    _web_session(cluster, cluster.client, username="alice", password=PASSWORD)
    cli = {"Authorization": f"Bearer {cluster.api_login('alice').json()['token']}"}
    _, api = cluster.token_of("alice")
    r = cluster.client.patch("/api/v1/users/alice", headers=cluster.admin, json={"password": "a new one, long"})
    assert r.status_code == 200, r.text
    assert cluster.client.get("/api/v1/jobs").status_code == 401, "the web session outlived the password change"
    assert cluster.client.get("/api/v1/jobs", headers=cli).status_code == 401, "the CLI login outlived it"
    assert cluster.client.get("/api/v1/jobs", headers=api).status_code == 200  # API tokens are not sessions
    assert cluster.api_login("alice", "a new one, long").status_code == 200


def test_changing_ones_own_password_keeps_only_the_session_that_did_it(cluster: Cluster) -> None:
    _web_session(cluster, cluster.client, username="alice", password=PASSWORD)
    mine = {"Authorization": f"Bearer {cluster.api_login('alice').json()['token']}"}
    r = cluster.client.patch(
        "/api/v1/users/alice", headers=mine, json={"password": "a new one, long", "current_password": PASSWORD}
    )
    assert r.status_code == 200, r.text
    assert cluster.client.get("/api/v1/jobs", headers=mine).status_code == 200
    assert cluster.client.get("/api/v1/jobs").status_code == 401  # the other session (the cookie) ended


def test_a_disabled_users_tokens_and_sessions_stop_working(cluster: Cluster) -> None:
    _web_session(cluster, cluster.client, username="alice", password=PASSWORD)
    _, api = cluster.token_of("alice")
    r = cluster.client.patch("/api/v1/users/alice", headers=cluster.admin, json={"disabled": True})
    assert r.status_code == 200 and r.json()["disabled"] is True
    assert cluster.client.get("/api/v1/jobs").status_code == 401
    assert cluster.client.get("/api/v1/jobs", headers=api).status_code == 401
    assert (
        cluster.client.patch("/api/v1/users/alice", headers=cluster.admin, json={"disabled": False}).status_code == 200
    )
    assert cluster.client.get("/api/v1/jobs", headers=api).status_code == 200  # its API token works again
    assert cluster.client.get("/api/v1/jobs").status_code == 401  # sessions ended for good


def test_a_member_cannot_disable_anyone(cluster: Cluster) -> None:
    _, alice = cluster.token_of("alice")
    r = cluster.client.patch("/api/v1/users/bob", headers=alice, json={"disabled": True})
    assert r.status_code == 403
    r = cluster.client.patch("/api/v1/users/alice", headers=alice, json={"disabled": True})
    assert r.status_code == 403


# ---- the last admin ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change", [{"role": "member"}, {"role": "tenant-admin"}, {"disabled": True}])
def test_the_only_admin_cannot_demote_or_disable_itself(cluster: Cluster, change: dict[str, Any]) -> None:
    r = cluster.client.patch("/api/v1/users/admin", headers=cluster.admin, json=change)
    assert r.status_code == 409, r.text
    assert "last admin" in r.json()["error"]["message"] and r.json()["error"]["field"] == next(iter(change))
    assert cluster.client.get("/api/v1/whoami", headers=cluster.admin).json()["role"] == "admin"


def test_with_a_second_admin_the_first_may_step_down(cluster: Cluster) -> None:
    assert cluster.client.patch("/api/v1/users/bob", headers=cluster.admin, json={"role": "admin"}).status_code == 200
    assert (
        cluster.client.patch("/api/v1/users/admin", headers=cluster.admin, json={"role": "member"}).status_code == 200
    )


# ---- /metrics -----------------------------------------------------------------------------------------------
def test_metrics_need_a_metrics_or_admin_token(cluster: Cluster) -> None:
    assert cluster.client.get("/metrics").status_code == 401, "/metrics answered without a token"
    _, alice = cluster.token_of("alice")
    assert cluster.client.get("/metrics", headers=alice).status_code == 403  # cluster-wide: not a member's
    assert cluster.client.get("/metrics", headers=cluster.admin).status_code == 200
    r = cluster.client.post("/api/v1/tokens", headers=cluster.admin, json={"name": "prometheus", "metrics": True})
    assert r.status_code == 201, r.text
    scrape = {"Authorization": f"Bearer {r.json()['token']}"}
    assert r.json()["token"].startswith("crm_") and r.json()["user"] is None and r.json()["kind"] == "metrics"
    body = cluster.client.get("/metrics", headers=scrape)
    assert body.status_code == 200 and "corral_" in body.text
    assert cluster.client.get("/api/v1/jobs", headers=scrape).status_code == 403  # it can do nothing else
    assert cluster.client.post("/api/v1/tokens", headers=alice, json={"metrics": True}).status_code == 403
    assert cluster.client.delete(f"/api/v1/tokens/{r.json()['id']}", headers=cluster.admin).status_code == 204
    assert cluster.client.get("/metrics", headers=scrape).status_code == 401


def test_metrics_may_be_made_public(tmp_path: Path) -> None:
    gen = _make(tmp_path, metrics_public=True)
    cluster = next(gen)
    try:
        assert cluster.client.get("/metrics").status_code == 200
    finally:
        gen.close()


def test_ones_own_new_password_takes_the_current_one(cluster: Cluster) -> None:
    """A stolen session must not be able to set a new password and so end the owner's sessions."""
    mine = {"Authorization": f"Bearer {cluster.api_login('alice').json()['token']}"}
    r = cluster.client.patch("/api/v1/users/alice", headers=mine, json={"password": "taken over!"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "current_password"
    r = cluster.client.patch(
        "/api/v1/users/alice", headers=mine, json={"password": "taken over!", "current_password": "a guess"}
    )
    assert r.status_code == 400 and r.json()["error"]["message"] == "current_password: wrong password"
    assert cluster.api_login("alice").status_code == 200  # the old password still works
    r = cluster.client.patch(
        "/api/v1/users/alice", headers=mine, json={"password": "a new one, long", "current_password": PASSWORD}
    )
    assert r.status_code == 200, r.text
