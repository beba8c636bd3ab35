"""Tenant secrets through the API, as hostile tenants would try them: another tenant's secret can be neither
listed, changed, deleted nor used; a value leaves the server only in the job's hand-over to its agent, and is
in no response, event, audit entry, server log line or database file in plain text."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.agents import compute_assignments
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

VALUE = "wandb-Zq7-SECRET-VALUE-3141592653"  # distinctive, so any leak of it is found by a plain search


class Api:
    def __init__(self, client: TestClient, admin_token: str) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    @property
    def app(self) -> Any:
        return self.client.app

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call(
            "POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text
        r = self.call("POST", "/login", auth={}, json={"username": name, "password": "correct horse"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def hand_over(self, job_id: int) -> dict[str, str]:
        """What the agent of node n1 receives for this job (the one place a value may appear): its secret_env."""
        store: SqlStore = self.app.state.ctx.store
        store.touch_node("n1", datetime.now(UTC))  # a heartbeat: n1 is never LOST however slow the test runs
        store.assign_job(job_id, "n1", [], datetime.now(UTC))  # or the scheduler thread did already
        node = store.get_node("n1")
        assert node is not None
        assignments, _ = compute_assignments(store, node, set(), keyring=self.app.state.ctx.keyring)
        return next((dict(a.secret_env) for a in assignments if a.job_id == job_id), {})


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    store.upsert_node(
        "n1",
        "n1",
        "simulated",
        8000,
        65536,
        {},
        [GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920)],
        datetime.now(UTC),
    )
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        a = Api(client, creds.admin_token)
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


def test_a_member_uses_its_tenants_secret_and_only_the_agent_sees_the_value(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    made = api.call("POST", "/secrets", auth=alice, json={"name": "wandb", "value": VALUE})
    assert made.status_code == 201, made.text
    assert made.json()["tenant"] == "vision" and made.json()["created_by"] == "alice" and "value" not in made.json()
    job = api.call("POST", "/jobs", auth=alice, json={"command": ["train"], "secret_env": {"WANDB_API_KEY": "wandb"}})
    assert job.status_code == 201, job.text
    assert job.json()["secret_env"] == {"WANDB_API_KEY": "wandb"}
    assert api.hand_over(job.json()["id"]) == {"WANDB_API_KEY": VALUE}


def test_another_tenant_can_neither_see_change_delete_nor_use_a_secret(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    mallory = api.user("mallory", "member", "nlp")
    assert api.call("POST", "/secrets", auth=alice, json={"name": "wandb", "value": VALUE}).status_code == 201
    assert api.call("GET", "/secrets", auth=mallory).json() == []
    for method, path, body in (
        ("GET", "/secrets?tenant=vision", None),
        ("POST", "/secrets?tenant=vision", {"name": "x", "value": "y"}),
        ("PUT", "/secrets/wandb?tenant=vision", {"value": "mine now"}),
        ("DELETE", "/secrets/wandb?tenant=vision", None),
        ("PUT", "/secrets/wandb", {"value": "mine now"}),
        ("DELETE", "/secrets/wandb", None),
    ):
        r = api.call(method, path, auth=mallory, json=body)
        assert r.status_code == 404, (method, path, r.text)  # not 403: another tenant's existence is private
    used = api.call("POST", "/jobs", auth=mallory, json={"command": ["env"], "secret_env": {"K": "wandb"}})
    assert used.status_code in (400, 422) and used.json()["error"]["field"] == "secret_env", used.text
    schedule = api.call(
        "POST",
        "/schedules",
        auth=mallory,
        json={"schedule": "@daily", "job": {"command": ["env"], "secret_env": {"K": "wandb"}}},
    )
    assert schedule.status_code in (400, 422) and schedule.json()["error"]["field"] == "job.secret_env", schedule.text
    assert [s["name"] for s in api.call("GET", "/secrets", auth=alice).json()] == ["wandb"]  # still there, unchanged
    job = api.call("POST", "/jobs", auth=alice, json={"command": ["x"], "secret_env": {"K": "wandb"}}).json()
    assert api.hand_over(job["id"]) == {"K": VALUE}


@pytest.mark.parametrize(
    ("role", "can_write"),
    [
        pytest.param("viewer", False, id="viewer-only-lists"),
        pytest.param("member", True, id="member-writes"),
        pytest.param("tenant-admin", True, id="tenant-admin-writes"),
    ],
)
def test_roles(api: Api, role: str, can_write: bool) -> None:
    who = api.user("carol", role, "vision")
    assert (api.call("POST", "/secrets", auth=who, json={"name": "s", "value": "v"}).status_code == 201) is can_write
    assert api.call("GET", "/secrets", auth=who).status_code == 200
    assert api.call("POST", "/secrets/rotate-key", auth=who).status_code == 403  # admins only


def test_admins_choose_the_tenant(api: Api) -> None:
    assert api.call("POST", "/secrets?tenant=nlp", json={"name": "db", "value": "v"}).status_code == 201
    assert api.call("POST", "/secrets", json={"name": "db", "value": "v"}).json()["tenant"] == "default"
    assert {(s["tenant"], s["name"]) for s in api.call("GET", "/secrets").json()} == {("nlp", "db"), ("default", "db")}
    assert [s["tenant"] for s in api.call("GET", "/secrets?tenant=nlp").json()] == ["nlp"]
    assert api.call("POST", "/secrets?tenant=nope", json={"name": "db", "value": "v"}).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"name": "bad name", "value": "v"}, "name", id="name-with-space"),
        pytest.param({"name": "x" * 65, "value": "v"}, "name", id="name-too-long"),
        pytest.param({"name": "s", "value": ""}, "value", id="empty-value"),
        pytest.param({"name": "s", "value": "v" * (64 * 1024 + 1)}, "value", id="value-over-64KiB"),
        pytest.param({"name": "s", "value": "a\x00b"}, "value", id="nul-byte"),
        pytest.param({"name": "s", "value": "v", "kind": "registry"}, None, id="registry-without-host"),
        pytest.param({"name": "s", "value": "v", "kind": "vault"}, "kind", id="unknown-kind"),
    ],
)
def test_bad_secrets_are_refused_naming_the_field_and_never_echoing_the_value(
    api: Api, body: dict[str, Any], field: str | None
) -> None:
    r = api.call("POST", "/secrets", json=body)
    assert r.status_code == 422, r.text
    if field:
        assert r.json()["error"]["field"] == field
    if len(body["value"]) > 1:
        assert body["value"] not in r.text


@pytest.mark.parametrize(
    ("secret_env", "problem"),
    [
        pytest.param({"CORRAL_JOB_ID": "s"}, "reserved", id="reserved-variable"),
        pytest.param({"1BAD": "s"}, "invalid environment variable", id="bad-variable"),
        pytest.param({"V": "no such"}, "not a secret name", id="bad-secret-name"),
        pytest.param({f"V{i}": "s" for i in range(65)}, "at most 64", id="too-many"),
    ],
)
def test_bad_secret_env_is_refused(api: Api, secret_env: dict[str, str], problem: str) -> None:
    r = api.call("POST", "/jobs", json={"command": ["x"], "secret_env": secret_env})
    assert r.status_code == 422 and problem in r.json()["error"]["message"], r.text


def test_a_variable_is_plain_or_secret_not_both(api: Api) -> None:
    api.call("POST", "/secrets", json={"name": "s", "value": VALUE})
    r = api.call("POST", "/jobs", json={"command": ["x"], "env": {"K": "plain"}, "secret_env": {"K": "s"}})
    assert r.json()["error"]["field"] == "secret_env", r.text


def test_a_secret_deleted_after_submit_fails_the_job_at_start_naming_it(api: Api) -> None:
    api.call("POST", "/secrets", json={"name": "db", "value": VALUE})
    job = api.call("POST", "/jobs", json={"command": ["x"], "secret_env": {"DB_PASSWORD": "db"}}).json()
    assert api.call("DELETE", "/secrets/db").status_code == 204
    assert api.call("DELETE", "/secrets/db").status_code == 404
    assert api.hand_over(job["id"]) == {}
    shown = api.call("GET", f"/jobs/{job['id']}").json()
    assert shown["state"] == JobState.FAILED.value
    assert "secret 'db' (for DB_PASSWORD) no longer exists" in shown["reason"]


def test_an_updated_secret_reaches_jobs_started_after(api: Api) -> None:
    api.call("POST", "/secrets", json={"name": "db", "value": "old"})
    assert api.call("PUT", "/secrets/db", json={"value": VALUE}).status_code == 200
    job = api.call("POST", "/jobs", json={"command": ["x"], "secret_env": {"P": "db"}}).json()
    assert api.hand_over(job["id"]) == {"P": VALUE}


def test_rotation_keeps_every_secret_usable_and_retires_the_old_key(api: Api, tmp_path: Path) -> None:
    for name in ("a", "b"):
        api.call("POST", "/secrets?tenant=nlp", json={"name": name, "value": f"{VALUE}-{name}"})
    old_file = (tmp_path / "secrets.key").read_text()
    r = api.call("POST", "/secrets/rotate-key")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["resealed"] == 2 and len(out["retired_keys"]) == 1
    assert (tmp_path / "secrets.key").read_text() != old_file
    assert api.app.state.ctx.store.secret_key_ids() == {out["key_id"]}
    bob = api.user("bob", "member", "nlp")
    job = api.call("POST", "/jobs", auth=bob, json={"command": ["x"], "secret_env": {"A": "a", "B": "b"}}).json()
    assert api.hand_over(job["id"]) == {"A": f"{VALUE}-a", "B": f"{VALUE}-b"}


def _database_bytes(database_url: str, data_dir: Path) -> bytes:
    """Everything the database holds on disk: the SQLite files (with the WAL), or a pg_dump of PostgreSQL."""
    if database_url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in data_dir.glob("corral.db*"))
    dump = subprocess.run(["pg_dump", "--no-owner", database_url], capture_output=True, check=True, timeout=120)
    return dump.stdout


def test_a_value_is_in_no_response_event_log_line_or_database_file(
    api: Api, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = api.user("alice", "member", "vision")
    seen: list[str] = [
        api.call("POST", "/secrets", auth=alice, json={"name": "wandb", "value": VALUE}).text,
        api.call("PUT", "/secrets/wandb", auth=alice, json={"value": VALUE}).text,
    ]
    job = api.call("POST", "/jobs", auth=alice, json={"command": ["x"], "secret_env": {"W": "wandb"}})
    sched = api.call(
        "POST",
        "/schedules",
        auth=alice,
        json={"schedule": "@daily", "job": {"command": ["x"], "secret_env": {"W": "wandb"}}},
    )
    assert job.status_code == 201 and sched.status_code == 201, (job.text, sched.text)
    assert api.hand_over(job.json()["id"]) == {"W": VALUE}
    job_id = job.json()["id"]
    seen += [job.text, sched.text]
    for path in (
        "/secrets",
        "/secrets?tenant=vision",
        f"/jobs/{job_id}",
        f"/jobs/{job_id}/events",
        "/jobs?all=true",
        "/schedules",
        f"/schedules/{sched.json()['id']}",
        "/audit",
    ):
        r = api.call("GET", path)
        assert r.status_code == 200, (path, r.text)
        seen.append(r.text)
    seen.append(api.client.get("/", headers=api.admin).text)  # the portal's page
    assert all(VALUE not in text for text in seen)
    assert VALUE not in caplog.text
    data = _database_bytes(database_url, tmp_path)
    assert b"wandb" in data  # the name is stored in plain text: the search does reach the rows
    assert VALUE.encode() not in data
