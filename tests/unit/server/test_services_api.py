"""/api/v1/services (issue 18) through the app (SQLite and PostgreSQL): create, list, show, update, scale, rollback
and delete; refusals name the field and store nothing; a change of settings is no new revision, a change of what
replicas run is; tenants see only theirs (another tenant's service is a 404), viewers only look; the audit log;
the graphs; replicas are jobs of kind `replica`.

The app's own controller runs here too (there is no agent: replicas stay PENDING or RUNNING, never ready), so only
what the API writes is asserted, never a replica count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.background.services import ServiceController
from corral.server.bootstrap import ensure_credentials
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store


class Api:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call(
            "POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text
        token = self.call("POST", "/login", auth={}, json={"username": name, "password": "correct horse"}).json()[
            "token"
        ]
        return {"Authorization": f"Bearer {token}"}

    def create(self, auth: dict[str, str], **kw: Any) -> Any:
        body = {"name": "web", "command": ["python", "-m", "http.server"], "port": 8000, **kw}
        return self.call("POST", "/services", auth=auth, json=body)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, gateway_port=0)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        a = Api(client, store, creds.admin_token)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
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


@pytest.fixture
def alice(api: Api) -> dict[str, str]:
    return api.user("alice", "member", "vision")


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        pytest.param({"name": "Web_1"}, 422, "name", id="bad-name"),
        pytest.param({"name": "-web"}, 422, "name", id="name-starts-with-dash"),
        pytest.param({"port": None}, 422, "port", id="no-port"),
        pytest.param({"command": None}, 422, "command", id="no-command"),
        pytest.param({"command": []}, 422, "command", id="empty-command"),
        pytest.param({"port": 70000}, 422, "port", id="port-out-of-range"),
        pytest.param({"target_rps": 10, "min_replicas": 5, "max_replicas": 2}, 400, "min_replicas", id="min-above-max"),
        pytest.param({"max_surge": 0, "max_unavailable": 0}, 400, "max_surge", id="rollout-cannot-move"),
        pytest.param({"gpus": 16}, 400, "gpus", id="too-big-for-any-node"),
        pytest.param({"queue": "nope"}, 400, "queue", id="unknown-queue"),
        pytest.param({"bogus": 1}, 422, "bogus", id="extra-field"),
        pytest.param({"health_path": "healthz"}, 422, "health_path", id="health-path-relative"),
        pytest.param({"health_path": "/a b"}, 422, "health_path", id="health-path-space"),
        pytest.param({"replicas": 65}, 422, "replicas", id="too-many-replicas"),
    ],
)
def test_bad_services_name_the_field_and_store_nothing(
    api: Api, alice: dict[str, str], body: dict[str, Any], status: int, field: str
) -> None:
    full = {"name": "web", "command": ["serve"], "port": 8000, **body}
    r = api.call("POST", "/services", auth=alice, json={k: v for k, v in full.items() if v is not None})
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field, r.text
    assert api.call("GET", "/services", auth=alice).json() == []
    assert api.store.list_services() == []


def test_create_list_and_show(api: Api, alice: dict[str, str]) -> None:
    r = api.create(alice, replicas=2, health_path="/healthz", env={"A": "1"})
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["name"] == "web" and s["tenant"] == "vision" and s["owner"] == "alice"
    assert s["url"] == "/services/web/" and s["endpoint"].endswith("/services/web/")
    assert (s["revision"], s["stable_revision"], s["desired"]) == (1, 0, 2)
    assert s["port"] == 8000 and s["health_path"] == "/healthz" and s["command"] == ["python", "-m", "http.server"]
    assert not s["autoscaled"] and not s["public"] and not s["deleting"]
    assert s["rollout"]["state"] == "progressing"
    assert [e["kind"] for e in s["events"]][:1] == ["created"]
    assert [r["revision"] for r in s["revisions"]] == [1]
    assert s["revisions"][0]["template"]["env"] == {"A": "1"}
    listed = api.call("GET", "/services", auth=alice).json()
    assert [x["name"] for x in listed] == ["web"] and listed[0]["events"] == [] and listed[0]["revisions"] == []
    shown = api.call("GET", "/services/web", auth=alice).json()
    assert shown["id"] == s["id"] and shown["revisions"]
    assert api.call("GET", "/services/nope", auth=alice).status_code == 404
    taken = api.create(api.user("bob", "member", "nlp"))
    assert taken.status_code == 409 and taken.json()["error"]["field"] == "name"  # names are the cluster's


def test_autoscaled_create_starts_at_min_and_defaults_max(api: Api, alice: dict[str, str]) -> None:
    s = api.create(alice, target_rps=10, min_replicas=2, replicas=3).json()
    assert s["autoscaled"] and s["desired"] == 2 and s["settings"]["max_replicas"] == 3
    z = api.create(alice, name="zero", target_rps=10, min_replicas=0, max_replicas=4).json()
    assert z["desired"] == 1  # it shows at once that it comes up; the idle period takes it to zero


def test_an_update_of_settings_is_no_new_revision(api: Api, alice: dict[str, str]) -> None:
    api.create(alice)
    r = api.call("PATCH", "/services/web", auth=alice, json={"public": True, "queue_limit": 7})
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["revision"] == 1 and len(s["revisions"]) == 1
    assert s["public"] and s["settings"]["queue_limit"] == 7
    assert any(e["kind"] == "updated" and "queue_limit=7" in e["message"] for e in s["events"])
    # the same values again change nothing
    again = api.call("PATCH", "/services/web", auth=alice, json={"public": True}).json()
    updated = [e for e in again["events"] if e["kind"] == "updated"]
    assert again["revision"] == 1 and len(updated) == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"env": {"MODEL": "v2"}}, id="env"),
        pytest.param({"command": ["serve", "--v2"]}, id="command"),
        pytest.param({"port": 9000}, id="port"),
        pytest.param({"health_path": "/ready"}, id="health"),
    ],
)
def test_an_update_of_what_replicas_run_is_a_new_revision(
    api: Api, alice: dict[str, str], change: dict[str, Any]
) -> None:
    api.create(alice)
    r = api.call("PATCH", "/services/web", auth=alice, json=change)
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["revision"] == 2 and [x["revision"] for x in s["revisions"]] == [1, 2]
    assert s["rollout"]["state"] == "progressing" and s["rollout"]["revision"] == 2
    key = next(iter(change))
    rollout = [e for e in s["events"] if e["kind"] == "rollout"]
    assert rollout and key in rollout[-1]["message"] and "revision 2" in rollout[-1]["message"]
    new = s["revisions"][-1]
    if key in ("port", "health_path"):
        assert new[key] == change[key]
    else:
        assert new["template"][key] == change[key]
    assert s["revisions"][0]["template"]["command"] == ["python", "-m", "http.server"]  # the old one kept


def test_a_bad_update_changes_nothing(api: Api, alice: dict[str, str]) -> None:
    before = api.create(alice).json()
    for body, status, field in (
        ({"gpus": 16}, 400, "gpus"),
        ({"queue": "nope"}, 400, "queue"),
        ({"max_surge": 0, "max_unavailable": 0}, 400, "max_surge"),
        ({"health_path": "x"}, 422, "health_path"),
        ({"name": "other"}, 422, "name"),
    ):
        r = api.call("PATCH", "/services/web", auth=alice, json=body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["field"] == field
    after = api.call("GET", "/services/web", auth=alice).json()
    assert after["revision"] == 1 and after["settings"] == before["settings"]


def test_scale_by_hand_and_not_when_autoscaled(api: Api, alice: dict[str, str]) -> None:
    api.create(alice)
    s = api.call("POST", "/services/web/scale", auth=alice, json={"replicas": 4}).json()
    assert s["desired"] == 4 and any(e["kind"] == "scaled" for e in s["events"])
    assert api.call("POST", "/services/web/scale", auth=alice, json={"replicas": 65}).status_code == 422
    api.create(alice, name="auto", target_rps=5, min_replicas=1, max_replicas=3)
    r = api.call("POST", "/services/auto/scale", auth=alice, json={"replicas": 2})
    assert r.status_code == 409 and r.json()["error"]["field"] == "replicas"
    assert api.call("GET", "/services/auto", auth=alice).json()["desired"] == 1


def test_rollback(api: Api, alice: dict[str, str]) -> None:
    api.create(alice)
    r = api.call("POST", "/services/web/rollback", auth=alice)
    assert r.status_code == 409 and r.json()["error"]["field"] == "revision"  # no earlier revision
    api.call("PATCH", "/services/web", auth=alice, json={"env": {"V": "2"}})
    back = api.call("POST", "/services/web/rollback", auth=alice)
    assert back.status_code == 200, back.text
    s = back.json()
    assert s["revision"] == 1 and [x["revision"] for x in s["revisions"]] == [1, 2]
    assert s["rollout"]["state"] == "progressing" and s["rollout"]["revision"] == 1
    assert any(e["kind"] == "rollback" for e in s["events"])


def test_delete_marks_it_deleting(api: Api, alice: dict[str, str]) -> None:
    api.create(alice)
    assert api.call("DELETE", "/services/web", auth=alice).status_code == 204
    s = api.store.get_service_by_name("web")
    if s is not None:  # the controller has not removed it yet
        assert s.deleting and s.replicas == 0
    deadline = time.monotonic() + 20
    while api.store.get_service_by_name("web") is not None:  # the app's controller stops its replicas
        assert time.monotonic() < deadline, "the controller never removed the service"
        for j in api.store.live_replicas():  # no agent here: the stops are confirmed as an agent would
            if j.cancel_requested:
                api.store.finish_job(j.id, JobState.CANCELLED, None, "cancelled", datetime.now(UTC))
        time.sleep(0.1)
    assert api.call("GET", "/services/web", auth=alice).status_code == 404
    assert api.create(alice).status_code == 201  # the name is free again


def test_tenants_see_only_theirs_and_viewers_only_look(api: Api, alice: dict[str, str]) -> None:
    bob = api.user("bob", "member", "nlp")
    viewer = api.user("vic", "viewer", "vision")
    assert api.create(alice).status_code == 201
    assert api.create(bob, name="theirs").status_code == 201
    assert [s["name"] for s in api.call("GET", "/services", auth=alice).json()] == ["web"]
    for method, path, body in (
        ("GET", "", None),
        ("PATCH", "", {"public": True}),
        ("POST", "/scale", {"replicas": 2}),
        ("POST", "/rollback", None),
        ("DELETE", "", None),
        ("GET", "/metrics", None),
    ):
        kw = {"json": body} if body is not None else {}
        r = api.call(method, f"/services/theirs{path}", auth=alice, **kw)
        assert r.status_code == 404, (method, path, r.text)
    theirs = api.store.get_service_by_name("theirs")
    assert theirs is not None and not theirs.deleting and not theirs.settings["public"]
    assert api.create(viewer, name="v").status_code == 403
    assert [s["name"] for s in api.call("GET", "/services", auth=viewer).json()] == ["web"]
    assert api.call("GET", "/services/web", auth=viewer).status_code == 200
    for method, path, body in (
        ("PATCH", "", {"public": True}),
        ("POST", "/scale", {"replicas": 2}),
        ("DELETE", "", None),
    ):
        kw = {"json": body} if body is not None else {}
        assert api.call(method, f"/services/web{path}", auth=viewer, **kw).status_code == 403, (method, path)
    assert {s["tenant"] for s in api.call("GET", "/services").json()} == {"vision", "nlp"}  # admins see all


def test_the_audit_log_has_every_change(api: Api, alice: dict[str, str]) -> None:
    api.create(alice)
    api.call("PATCH", "/services/web", auth=alice, json={"env": {"V": "2"}})
    api.call("POST", "/services/web/scale", auth=alice, json={"replicas": 2})
    api.call("POST", "/services/web/rollback", auth=alice)
    api.call("DELETE", "/services/web", auth=alice)
    audit = api.call("GET", "/audit").json()
    mine = [(a["action"], a["actor"], a["target"]) for a in audit if a["action"].startswith("service.")]
    assert sorted(mine) == sorted(
        (f"service.{x}", "alice", "web") for x in ("create", "update", "scale", "rollback", "delete")
    )


class _NeverReady:
    def ready(self, job_id: int, attempt: int) -> bool:
        return False

    def detail(self, job_id: int) -> str:
        return ""


def test_metrics_are_the_samples_the_controller_wrote(api: Api, alice: dict[str, str]) -> None:
    s = api.create(alice).json()
    now = time.time()
    api.store.save_service_traffic("elsewhere", {s["id"]: {"requests": 0}}, datetime.fromtimestamp(now, UTC))
    ctl = ServiceController(api.store, Trigger(), NodeNotifier(), _NeverReady(), [10.0, 100.0], clock=lambda: now)
    ctl.run_pass()
    r = api.call("GET", "/services/web/metrics", auth=alice)
    assert r.status_code == 200, r.text
    points = r.json()
    assert points, "no graph point"
    assert {"at", "rps", "error_rate", "p50_ms", "p99_ms", "desired", "ready"} <= set(points[-1])
    assert points[-1]["desired"] == 1 and points[-1]["ready"] == 0
    assert api.call("GET", "/services/web/metrics?since_s=0", auth=alice).status_code == 422


def test_replicas_are_jobs_of_kind_replica(api: Api, alice: dict[str, str]) -> None:
    s = api.create(alice, replicas=2).json()
    deadline = time.monotonic() + 20
    while True:  # the app's controller submits them
        jobs = [j for j in api.call("GET", "/jobs", auth=alice).json() if j.get("service_id") == s["id"]]
        if len(jobs) >= 2:
            break
        assert time.monotonic() < deadline, "no replica job submitted"
        time.sleep(0.1)
    assert all(j["kind"] == "replica" and j["service_revision"] == 1 and j["name"] == "web" for j in jobs)
    shown = api.call("GET", "/services/web", auth=alice).json()
    assert {r["job_id"] for r in shown["replicas"]} >= {j["id"] for j in jobs[:2]}


def test_an_image_service_may_leave_the_command_to_the_image(api: Api, alice: dict[str, str]) -> None:
    r = api.call("POST", "/services", auth=alice, json={"name": "own", "image": "registry.example/srv:1", "port": 8000})
    assert r.status_code == 201, r.text
    assert r.json()["command"] == [] and r.json()["image"] == "registry.example/srv:1"
    deadline = time.monotonic() + 15
    while not (
        mine := [j for j in api.call("GET", "/jobs", auth=alice).json() if j.get("service_id") == r.json()["id"]]
    ):
        assert time.monotonic() < deadline, "no replica job within 15 s"
        time.sleep(0.05)
    replica = mine[0]
    assert replica["command"] == [] and replica["image"] == "registry.example/srv:1"  # the engine runs its CMD
    # a command service still needs its command, and a null one is refused as missing
    bad = api.call("POST", "/services", auth=alice, json={"name": "nocmd", "command": None, "port": 8000})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "command"
