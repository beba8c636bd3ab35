"""Cookie sessions for the portal: login by password or token, CSRF on unsafe methods, logout, bearer unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store

JOB = {"command": ["true"]}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=url), store)) as client:
        admin = {"Authorization": f"Bearer {creds.admin_token}"}
        client.post("/api/v1/tenants", headers=admin, json={"name": "vision"})
        r = client.post(
            "/api/v1/users",
            headers=admin,
            json={"name": "alice", "role": "member", "tenant": "vision", "password": "correct horse"},
        )
        assert r.status_code == 201, r.text
        yield client, creds.admin_token


def _login(client: TestClient, **body: str) -> str:
    r = client.post("/web/login", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["csrf"] == client.cookies.get("corral_csrf")
    return str(r.json()["csrf"])


def test_password_login_sets_httponly_strict_cookie(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    r = client.post("/web/login", json={"username": "alice", "password": "correct horse"})
    assert r.status_code == 200
    assert r.json()["user"] == "alice" and r.json()["tenant"] == "vision" and r.json()["role"] == "member"
    cookies = r.headers.get_list("set-cookie")
    session = next(c for c in cookies if c.startswith("corral_session="))
    csrf = next(c for c in cookies if c.startswith("corral_csrf="))
    assert "HttpOnly" in session and "SameSite=strict" in session
    assert "HttpOnly" not in csrf and "SameSite=strict" in csrf


@pytest.mark.parametrize(
    "body,message",
    [
        ({"username": "alice", "password": "wrong"}, "wrong user name or password"),
        ({"username": "nobody", "password": "correct horse"}, "wrong user name or password"),
        ({"token": "crl_not-a-token"}, "invalid or revoked token"),
    ],
)
def test_bad_credentials_are_401(setup: tuple[TestClient, str], body: dict[str, str], message: str) -> None:
    client, _ = setup
    r = client.post("/web/login", json=body)
    assert r.status_code == 401 and r.json()["error"]["message"] == message
    assert "corral_session" not in client.cookies


def test_login_needs_password_or_token(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    r = client.post("/web/login", json={"username": "alice"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid"


def test_join_token_cannot_open_a_session(setup: tuple[TestClient, str], tmp_path: Path) -> None:
    client, _ = setup
    join = (tmp_path / "join-token").read_text().strip()
    assert client.post("/web/login", json={"token": join}).status_code == 401


def test_cookie_reads_without_csrf_but_writes_need_it(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    csrf = _login(client, username="alice", password="correct horse")
    assert client.get("/api/v1/whoami").json()["user"] == "alice"
    no_csrf = client.post("/api/v1/jobs", json=JOB)
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.json()["error"]["message"]
    wrong = client.post("/api/v1/jobs", json=JOB, headers={"X-CSRF-Token": "0" * 64})
    assert wrong.status_code == 403
    ok = client.post("/api/v1/jobs", json=JOB, headers={"X-CSRF-Token": csrf})
    assert ok.status_code == 201 and ok.json()["tenant"] == "vision"


def test_csrf_of_one_session_does_not_fit_another(setup: tuple[TestClient, str]) -> None:
    client, admin_token = setup
    first = _login(client, username="alice", password="correct horse")
    _login(client, token=admin_token)
    assert client.post("/api/v1/jobs", json=JOB, headers={"X-CSRF-Token": first}).status_code == 403


def test_token_login_acts_as_the_tokens_user(setup: tuple[TestClient, str]) -> None:
    client, admin_token = setup
    _login(client, token=admin_token)
    assert client.get("/api/v1/whoami").json()["role"] == "admin"
    assert client.get("/web/session").json()["user"] == "admin"


def test_bearer_header_wins_over_cookie_and_needs_no_csrf(setup: tuple[TestClient, str]) -> None:
    client, admin_token = setup
    _login(client, username="alice", password="correct horse")
    r = client.post("/api/v1/jobs", json=JOB, headers={"Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 201 and r.json()["tenant"] == "default"
    bad = client.get("/api/v1/whoami", headers={"Authorization": "Bearer crl_nope"})
    assert bad.status_code == 401  # a wrong header is not rescued by the cookie


def test_logout_needs_csrf_then_revokes_the_session(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    csrf = _login(client, username="alice", password="correct horse")
    session = client.cookies.get("corral_session")
    assert client.post("/web/logout").status_code == 403
    assert client.post("/web/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert "corral_session" not in client.cookies
    assert client.get("/web/session").json() == {
        "authenticated": False,
        "user": None,
        "role": None,
        "tenant": None,
        "csrf": None,
        "expires_at": None,
    }
    client.cookies.set("corral_session", str(session))
    stolen = client.get("/api/v1/whoami")
    assert stolen.status_code == 401  # the login token is revoked, not just forgotten by the browser


def test_session_endpoint_answers_200_when_logged_out(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    r = client.get("/web/session")
    assert r.status_code == 200 and r.json()["authenticated"] is False


def test_pages_serve_the_shell_and_foreign_job_is_404(setup: tuple[TestClient, str]) -> None:
    client, admin_token = setup
    admin = {"Authorization": f"Bearer {admin_token}"}
    theirs = client.post("/api/v1/jobs", headers=admin, json=JOB).json()["id"]
    for path in (
        "/",
        "/login",
        "/nodes",
        "/nodes/n1",
        "/gpus/n1/0",
        "/jobs",
        "/submit",
        "/alerts",
        "/admin",
        "/reports",
    ):
        r = client.get(path)
        assert r.status_code == 200 and 'id="app"' in r.text, path
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp  # own scripts only, no framing
    _login(client, username="alice", password="correct horse")
    assert client.get(f"/jobs/{theirs}").status_code == 404
    assert client.get("/jobs/999999").status_code == 404
    mine = client.post("/api/v1/jobs", json=JOB, headers={"X-CSRF-Token": client.cookies["corral_csrf"]}).json()
    assert client.get(f"/jobs/{mine['id']}").status_code == 200


def test_static_files_only_by_safe_names(setup: tuple[TestClient, str]) -> None:
    client, _ = setup
    r = client.get("/static/app.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../routers/web.py").status_code == 404
    assert client.get("/static/nope.js").status_code == 404
