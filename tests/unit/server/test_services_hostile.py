"""Hostile-tenant review of long-running services (issue 18): a member or viewer of tenant `nlp` (B) against tenant
`vision`'s (A) services, the gateway and the control plane. Each test asserts the safe behaviour; an attack that
works is kept as a strict xfail naming the hole (SQLite and PostgreSQL).

The gateway is served on the API port (Settings(gateway_port=0)) so the TestClient reaches /services/NAME/...; a
replica is a real toy HTTP server on a loopback port, its job made RUNNING by the scheduler on a simulated node
whose agent (this test) confirms the port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from corral.server.app import create_app
from corral.server.auth import hash_token, new_token
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

PASSWORD = "correct horse"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Callable[[], Any], timeout_s: float = 15.0, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class ToyReplica:
    """A replica's HTTP server: /healthz 200; /cookie answers with a Set-Cookie for the portal's session; anything
    else echoes what it received (path, headers)."""

    def __init__(self, port: int) -> None:
        self.port = port

        async def healthz(_: Request) -> Response:
            return PlainTextResponse("ok")

        async def cookie(_: Request) -> Response:
            r = PlainTextResponse("hello")
            r.raw_headers.append((b"set-cookie", b"corral_session=attacker-chosen; Path=/; HttpOnly"))
            r.raw_headers.append((b"set-cookie", b"corral_csrf=attacker-chosen; Path=/"))
            return r

        async def echo(request: Request) -> Response:
            body = await request.body()
            return JSONResponse(
                {
                    "path": request.url.path,
                    "raw_path": request.scope["raw_path"].decode(),
                    "headers": dict(request.headers),
                    "body_len": len(body),
                }
            )

        app = Starlette(
            routes=[
                Route("/healthz", healthz),
                Route("/cookie", cookie),
                Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _wait(lambda: self.server.started, what="the toy replica")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class Api:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str, join_token: str, port: int) -> None:
        self.client, self.store, self.port = client, store, port
        self.admin = {"Authorization": f"Bearer {admin_token}"}
        self.join_token = join_token
        self.agents = NodeAgents(client)

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call("POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": PASSWORD})
        assert r.status_code == 201, r.text
        r = self.call("POST", "/login", auth={}, json={"username": name, "password": PASSWORD})
        assert r.status_code == 200, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def service(self, auth: dict[str, str], name: str, **kw: Any) -> Any:
        body = {"name": name, "command": ["serve"], "port": self.port, "health_path": "/healthz", **kw}
        return self.call("POST", "/services", auth=auth, json=body)

    def gw(self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, path, headers=headers or {}, **kw)

    def sync(self, **body: Any) -> Any:
        r = self.client.post("/api/v1/agents/n1/sync", json=body, headers=self.agents("n1"))
        assert r.status_code == 200, r.text
        return r.json()

    def running_replica(self, service: str, auth: dict[str, str]) -> int:
        """The service's replica job once RUNNING on n1, its port confirmed by n1's agent (this test)."""

        def replica() -> int | None:
            s = self.call("GET", f"/services/{service}", auth=auth).json()
            running = [r for r in s["replicas"] if r["state"] == "RUNNING"]
            return running[0]["job_id"] if running else None

        job = int(_wait(replica, what=f"a running replica of {service}"))
        reply = self.sync()
        [a] = [a for a in reply["assignments"] if a["job_id"] == job]
        attempt = a["attempt"]
        assert a["env"]["PORT"] == str(self.port)
        report = {"job_id": job, "attempt": attempt, "rank": 0, "port": self.port, "listening": True}
        self.sync(running=[{"job_id": job, "attempt": attempt}], web_ports=[report])
        return job


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    port = _free_port()
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        gateway_port=0,
        job_ui_port=0,
        schedule_interval_s=0.1,
        job_ports=f"{port}-{port + 1}",
    )
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        a = Api(client, store, creds.admin_token, creds.join_token, port)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
        r = client.post(
            "/api/v1/agents/register",
            json={"name": "n1", "backend": "simulated", "address": "127.0.0.1", "gpus": gpus},
            headers=a.agents("n1"),
        )
        assert r.status_code == 200, r.text
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


@pytest.fixture
def replica(api: Api) -> Iterator[ToyReplica]:
    rep = ToyReplica(api.port)
    yield rep
    rep.stop()


def _missing_like(api: Api, auth: dict[str, str], method: str, path: str, name: str, **kw: Any) -> None:
    """`path` (naming service `name`) answers exactly as the same path naming a service that does not exist."""
    theirs = api.call(method, path, auth=auth, **kw)
    ghost = api.call(method, path.replace(name, "ghost-svc"), auth=auth, **kw)
    assert theirs.status_code == ghost.status_code == 404, (method, path, theirs.status_code, theirs.text)
    assert theirs.json() == {
        **ghost.json(),
        "error": {**ghost.json()["error"], "message": ghost.json()["error"]["message"].replace("ghost-svc", name)},
    }


# ---- the control plane: another tenant's service does not exist ----------------------------------------------------


def test_another_tenants_service_is_a_404_for_every_verb_and_absent_from_lists(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    vera = api.user("vera", "viewer", "nlp")
    assert api.service(alice, "secret-llm", command=["serve", "--key=hunter2"]).status_code == 201
    before = api.call("GET", "/services/secret-llm").json()
    for who in (bob, vera):
        for method, path, kw in (
            ("GET", "/services/secret-llm", {}),
            ("GET", "/services/secret-llm/metrics", {}),
            ("PATCH", "/services/secret-llm", {"json": {"command": ["evil"]}}),
            ("PATCH", "/services/secret-llm", {"json": {"public": True}}),
            ("POST", "/services/secret-llm/scale", {"json": {"replicas": 0}}),
            ("POST", "/services/secret-llm/rollback", {}),
            ("DELETE", "/services/secret-llm", {}),
        ):
            _missing_like(api, who, method, path, "secret-llm", **kw)
        listed = api.call("GET", "/services", auth=who)
        assert listed.status_code == 200 and listed.json() == []
        assert "secret-llm" not in listed.text and "hunter2" not in listed.text
    after = api.call("GET", "/services/secret-llm").json()
    assert (after["revision"], after["desired"], after["public"], after["deleting"], after["command"]) == (
        before["revision"],
        before["desired"],
        before["public"],
        before["deleting"],
        before["command"],
    )
    # admins see every tenant's
    assert [s["name"] for s in api.call("GET", "/services").json()] == ["secret-llm"]


def test_a_viewer_can_read_but_not_create_or_change_services(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    vic = api.user("vic", "viewer", "vision")
    assert api.service(alice, "web").status_code == 201
    assert api.call("GET", "/services/web", auth=vic).status_code == 200
    assert api.service(vic, "viewer-made").status_code == 403
    for method, path, kw in (
        ("PATCH", "/services/web", {"json": {"command": ["x"]}}),
        ("POST", "/services/web/scale", {"json": {"replicas": 3}}),
        ("POST", "/services/web/rollback", {}),
        ("DELETE", "/services/web", {}),
    ):
        r = api.call(method, path, auth=vic, **kw)
        assert r.status_code == 403, (method, path, r.text)
    s = api.call("GET", "/services/web").json()
    assert s["revision"] == 1 and s["desired"] == 1 and not s["deleting"]
    assert [x["name"] for x in api.call("GET", "/services").json()] == ["web"]


def test_a_taken_name_is_a_409_that_does_not_say_whose(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "chat").status_code == 201
    r = api.service(bob, "chat")
    assert r.status_code == 409 and r.json()["error"]["field"] == "name"
    assert "vision" not in r.text and "alice" not in r.text
    assert api.call("GET", "/services", auth=bob).json() == []


def test_the_service_paths_cannot_be_tricked_by_odd_names(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "chat").status_code == 201
    for path in ("/services/CHAT", "/services/chat%20", "/services/chat/", "/services/%63hat/metrics"):
        r = api.call("GET", path, auth=bob)
        assert r.status_code == 404, (path, r.status_code, r.text)


# ---- what a body may carry ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"tenant_id": 1},
        {"tenant": "vision"},
        {"user_id": 1},
        {"owner": "alice"},
        {"service_id": 1},
        {"service_revision": 1},
        {"schedule_id": 1},
        {"kind": "batch"},
        {"web_ui": False},
        {"container_port": 22},
        {"max_retries": 0},
        {"time_limit_s": 1},
        {"array": "0-99"},
        {"nodes": 4},
        {"revision": 7},
        {"state": {"rollout": {}}},
        {"deleting": True},
    ],
    ids=lambda e: next(iter(e)),
)
def test_fields_that_would_run_as_someone_else_are_refused(api: Api, extra: dict[str, Any]) -> None:
    bob = api.user("bob", "member", "nlp")
    r = api.service(bob, "squat", **extra)
    assert r.status_code == 422, (extra, r.status_code, r.text)
    assert r.json()["error"]["field"] == next(iter(extra)), r.text
    assert api.call("GET", "/services").json() == []
    assert api.service(bob, "mine").status_code == 201
    r = api.call("PATCH", "/services/mine", auth=bob, json=extra)
    assert r.status_code == 422, (extra, r.status_code, r.text)
    assert r.json()["error"]["field"] == next(iter(extra)), r.text
    assert api.call("GET", "/services/mine").json()["revision"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"replicas": -1}, "replicas"),
        ({"replicas": 65}, "replicas"),
        ({"replicas": 10**12}, "replicas"),
        ({"replicas": "3; rm -rf /"}, "replicas"),
        ({"queue_limit": 0}, "queue_limit"),
        ({"queue_limit": -5}, "queue_limit"),
        ({"queue_limit": 10**9}, "queue_limit"),
        ({"target_rps": 0}, "target_rps"),
        ({"target_rps": -1}, "target_rps"),
        ({"target_rps": 1e308}, "target_rps"),
        ({"min_replicas": -1, "target_rps": 1}, "min_replicas"),
        ({"max_replicas": 0, "target_rps": 1}, "max_replicas"),
        ({"max_replicas": 1000, "target_rps": 1}, "max_replicas"),
        ({"min_replicas": 5, "max_replicas": 2, "target_rps": 1}, "min_replicas"),
        ({"max_surge": 0, "max_unavailable": 0}, "max_surge"),
        ({"max_surge": -1}, "max_surge"),
        ({"max_unavailable": 10**6}, "max_unavailable"),
        ({"scale_down_delay_s": -1}, "scale_down_delay_s"),
        ({"idle_timeout_s": 0}, "idle_timeout_s"),
        ({"idle_timeout_s": 1e100}, "idle_timeout_s"),
        ({"progress_deadline_s": -1}, "progress_deadline_s"),
        ({"unhealthy_after_s": 0}, "unhealthy_after_s"),
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"health_path": "healthz"}, "health_path"),
        ({"health_path": "/a b"}, "health_path"),
        ({"health_path": "/\r\nHost: evil"}, "health_path"),
        ({"name": "Chat"}, "name"),
        ({"name": "../api"}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": "a" * 64}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x-"}, "name"),
        ({"gpus": 99}, "gpus"),
        ({"gpus": -1}, "gpus"),
        ({"gpu_milli": 0}, "gpu_milli"),
        ({"queue": "nope"}, "queue"),
        ({"command": []}, "command"),
        ({"secret_env": {"TOKEN": "no-such-secret"}}, "secret_env"),
        ({"registry_secret": "no-such-secret", "image": "registry.example/x:1"}, "registry_secret"),
        ({"mounts": ["/etc:/host-etc"], "image": "busybox"}, "mounts"),
        ({"public": "yes please"}, "public"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, dict) else v,
)
def test_bad_values_are_a_4xx_naming_the_field_and_store_nothing(api: Api, body: dict[str, Any], field: str) -> None:
    bob = api.user("bob", "member", "nlp")
    body = dict(body)  # the parameter is shared by the SQLite and PostgreSQL runs
    r = api.service(bob, body.pop("name", "svc"), **body)
    assert r.status_code in (400, 422), (body, r.status_code, r.text)
    got = r.json()["error"]["field"] or ""
    assert got == field or got.endswith("." + field) or got.startswith(field), (body, got, r.text)
    assert api.call("GET", "/services").json() == []


@pytest.mark.parametrize(
    "setting",
    ["min_replicas", "max_replicas", "max_surge", "max_unavailable", "scale_down_delay_s", "idle_timeout_s"],
)
def test_an_explicit_null_setting_in_a_patch_is_refused_not_a_500(api: Api, setting: str) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    r = api.call("PATCH", "/services/mine", auth=bob, json={setting: None})
    assert r.status_code in (200, 400, 422), (setting, r.status_code, r.text)
    if r.status_code != 200:
        assert r.json()["error"]["field"] == setting
    s = api.call("GET", "/services/mine").json()
    assert s["settings"][setting] is not None


@pytest.mark.parametrize("setting", ["queue_limit", "progress_deadline_s", "unhealthy_after_s"])
def test_an_explicit_null_setting_is_never_stored(api: Api, setting: str) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    r = api.call("PATCH", "/services/mine", auth=bob, json={setting: None})
    assert r.status_code in (200, 400, 422), (setting, r.status_code, r.text)
    assert api.call("GET", "/services/mine").json()["settings"][setting] is not None


def test_one_tenant_cannot_freeze_the_gateways_routes_for_everyone(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    api.call("PATCH", "/services/mine", auth=bob, json={"queue_limit": None})
    time.sleep(1.0)  # the gateway refreshes every 0.5 s
    assert api.service(alice, "after").status_code == 201
    time.sleep(1.0)
    r = api.gw("GET", "/services/after/x", headers=alice)
    # a route exists (no replica is ready yet: 503); a 404 means the gateway never learned of it
    assert r.status_code == 503, (r.status_code, r.text)


def test_a_pydantic_none_for_a_revision_field_keeps_the_revision(api: Api) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    for body in ({"port": None}, {"health_path": None}, {"command": None}):
        r = api.call("PATCH", "/services/mine", auth=bob, json=body)
        assert r.status_code in (200, 400, 422), (body, r.status_code, r.text)
    s = api.call("GET", "/services/mine").json()
    assert s["port"] == api.port and s["health_path"] == "/healthz" and s["command"] == ["serve"]


def test_secret_env_cannot_name_another_tenants_secret(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    r = api.call("PUT", "/secrets/hf-token", auth=alice, json={"value": "alice-secret"})
    if r.status_code == 405 or r.status_code == 404:
        r = api.call("POST", "/secrets", auth=alice, json={"name": "hf-token", "value": "alice-secret"})
    assert r.status_code in (200, 201), r.text
    r = api.service(bob, "thief", secret_env={"HF": "hf-token"})
    assert r.status_code in (400, 404, 422), r.text
    assert "alice-secret" not in r.text
    assert api.call("GET", "/services").json() == []


def test_replicas_are_held_to_the_tenants_quota(api: Api) -> None:
    bob = api.user("bob", "member", "nlp")
    r = api.call("PUT", "/tenants/nlp/quotas", json={"gpu_model": "", "guaranteed_gpus": 2, "max_gpus": 2})
    assert r.status_code in (200, 201), r.text
    assert api.service(bob, "big", gpus=1, replicas=6).status_code == 201

    def running() -> int:
        return sum(1 for x in api.call("GET", "/services/big").json()["replicas"] if x["state"] == "RUNNING")

    _wait(lambda: running() >= 2, what="two replicas running")
    time.sleep(1.0)
    assert running() == 2


def test_a_member_cannot_make_another_tenants_service_public_through_a_patch_of_their_own(api: Api) -> None:
    """A PATCH names the service by URL only: a body cannot retarget it (no `name` or `id` field)."""
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "private-a").status_code == 201
    assert api.service(bob, "mine").status_code == 201
    for body in ({"name": "private-a", "public": True}, {"id": 1, "public": True}):
        r = api.call("PATCH", "/services/mine", auth=bob, json=body)
        assert r.status_code == 422, r.text
    assert api.call("GET", "/services/private-a").json()["public"] is False


def test_another_member_cannot_run_code_as_the_services_owner(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    alan = api.user("alan", "member", "vision")
    assert api.call("PUT", "/users/alice/unix", json={"uid": 5001, "gid": 5001}).status_code == 200
    assert api.service(alice, "alices").status_code == 201
    r = api.call("PATCH", "/services/alices", auth=alan, json={"command": ["cat", "/home/alice/.ssh/id_rsa"]})
    # safe: refused, or the new revision runs as alan (the service changes hands)
    assert r.status_code in (403, 404) or r.json()["owner"] == "alan", (r.status_code, r.text)
    revision_2 = _wait(
        lambda: [j for j in api.call("GET", "/jobs").json() if j.get("service_revision") == 2],
        what="revision 2's replica",
    )
    users = {u["id"]: u["name"] for u in api.call("GET", "/users").json()}
    for job in revision_2:
        assert api.store.get_job(job["id"]).spec.user_id != next(k for k, v in users.items() if v == "alice")


# ---- the gateway ---------------------------------------------------------------------------------------------------


def test_the_gateway_serves_a_private_service_only_to_its_tenants_bearer_tokens(api: Api, replica: ToyReplica) -> None:
    alice = api.user("alice", "member", "vision")
    vic = api.user("vic", "viewer", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "llm").status_code == 201
    job = api.running_replica("llm", alice)
    _wait(lambda: api.gw("GET", "/services/llm/hello", headers=alice).status_code == 200, what="llm to serve")
    ok = api.gw("GET", "/services/llm/hello", headers={**alice, "Cookie": "corral_session=x"})
    assert ok.status_code == 200 and ok.headers["x-corral-replica"] == str(job)
    seen = ok.json()["headers"]
    assert "authorization" not in seen and "cookie" not in seen
    assert api.gw("GET", "/services/llm/hello", headers=vic).status_code == 200  # viewers may call it
    assert api.gw("GET", "/services/llm/hello", headers=api.admin).status_code == 200  # admins may

    # another tenant: exactly a missing service
    theirs = api.gw("GET", "/services/llm/hello", headers=bob)
    ghost = api.gw("GET", "/services/ghost-svc/hello", headers=bob)
    assert theirs.status_code == ghost.status_code == 404
    assert theirs.json()["error"]["message"] == ghost.json()["error"]["message"].replace("ghost-svc", "llm")
    assert "x-corral-replica" not in theirs.headers

    # no credential, a bad one, a cookie session, other kinds of token
    assert api.gw("GET", "/services/llm/hello").status_code == 401
    assert api.gw("GET", "/services/llm/hello", headers={"Authorization": "Bearer crl_nope"}).status_code == 401
    assert api.gw("GET", "/services/llm/hello", headers={"Authorization": "Basic YWxpY2U6eA=="}).status_code == 401
    login = api.client.post("/web/login", json={"username": "alice", "password": PASSWORD})
    assert login.status_code == 200, login.text
    session = login.cookies.get("corral_session") or api.client.cookies.get("corral_session")
    assert session
    r = api.client.get("/services/llm/hello", headers={"Cookie": f"corral_session={session}"})
    assert r.status_code == 401, r.text
    api.client.cookies.clear()
    metrics = new_token("metrics")
    api.store.create_token(hash_token(metrics), "metrics", "scraper", None, datetime.now(UTC))
    assert api.gw("GET", "/services/llm/hello", headers={"Authorization": f"Bearer {metrics}"}).status_code == 403
    if api.join_token:
        r = api.gw("GET", "/services/llm/hello", headers={"Authorization": f"Bearer {api.join_token}"})
        assert r.status_code in (401, 403)
    # a disabled user, a revoked session
    r = api.call("PATCH", "/users/vic", json={"disabled": True})
    if r.status_code == 200:
        assert api.gw("GET", "/services/llm/hello", headers=vic).status_code == 401


def test_paths_and_headers_cannot_escape_the_replica(api: Api, replica: ToyReplica) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "llm").status_code == 201
    assert api.service(bob, "pub", public=True, replicas=0).status_code == 201
    api.running_replica("llm", alice)
    _wait(lambda: api.gw("GET", "/services/llm/x", headers=alice).status_code == 200, what="llm to serve")
    # traversal out of the service: the replica gets it (its own business), never the API or another service
    for raw in ("/services/pub/..%2F..%2Fapi/v1/services/llm", "/services/pub/%2e%2e/llm/x", "/services/pub%2Fllm/x"):
        r = api.gw("GET", raw, headers=bob)
        assert r.status_code in (404, 503), (raw, r.status_code, r.text)
        assert "x-corral-replica" not in r.headers, raw
    # credentials and forwarded headers
    r = api.gw(
        "GET",
        "/services/llm/x",
        headers={
            **alice,
            "Cookie": "corral_session=s; corral_csrf=c",
            "Proxy-Authorization": "Basic x",
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Prefix": "/services/other",
            "Connection": "close, X-Secret",
            "X-Secret": "hop",
        },
    )
    assert r.status_code == 200, r.text
    h = r.json()["headers"]
    for gone in ("authorization", "cookie", "proxy-authorization", "x-secret"):
        assert gone not in h, gone
    assert h["x-forwarded-prefix"] == "/services/llm"
    assert h["x-forwarded-host"] != "evil.example" and h["x-forwarded-proto"] == "http"


def test_the_gateway_bounds_bodies_and_header_floods(api: Api, replica: ToyReplica) -> None:
    alice = api.user("alice", "member", "vision")
    assert api.service(alice, "llm").status_code == 201
    api.running_replica("llm", alice)
    _wait(lambda: api.gw("GET", "/services/llm/x", headers=alice).status_code == 200, what="llm to serve")
    r = api.gw("POST", "/services/llm/x", headers={**alice, "Content-Length": str(65 * 1024 * 1024)}, content=b"x")
    assert r.status_code in (400, 413), r.status_code
    many = {f"x-h{i}": "v" * 100 for i in range(2000)}
    r = api.gw("GET", "/services/llm/x", headers={**alice, **many})
    assert r.status_code in (200, 400, 413, 431), r.status_code
    # a body without a token is never read (nor buffered) first
    r = api.gw("POST", "/services/llm/x", content=b"y" * (1 << 20))
    assert r.status_code == 401


def test_a_replica_cannot_set_cookies_on_the_portals_host(api: Api, replica: ToyReplica) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "phish", public=True).status_code == 201
    api.running_replica("phish", bob)
    _wait(lambda: api.gw("GET", "/services/phish/x").status_code == 200, what="phish to serve")
    r = api.gw("GET", "/services/phish/cookie")
    assert r.status_code == 200
    assert "set-cookie" not in r.headers, r.headers.get("set-cookie")


def test_a_stopped_or_draining_replica_gets_no_traffic(api: Api, replica: ToyReplica) -> None:
    alice = api.user("alice", "member", "vision")
    assert api.service(alice, "llm").status_code == 201
    job = api.running_replica("llm", alice)
    _wait(lambda: api.gw("GET", "/services/llm/x", headers=alice).status_code == 200, what="llm to serve")
    assert api.call("POST", f"/jobs/{job}/cancel", auth=alice).status_code in (200, 202, 204)
    _wait(
        lambda: api.gw("GET", "/services/llm/x", headers=alice).headers.get("x-corral-replica") != str(job),
        timeout_s=5,
        what="the cancelled replica to leave the routes",
    )


def test_a_non_replica_job_is_never_routed(api: Api, replica: ToyReplica) -> None:
    """B's ordinary job listening on a web port, even named like B's service, is not one of its endpoints."""
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine", replicas=0).status_code == 201
    r = api.call("POST", "/jobs", auth=bob, json={"command": ["serve"], "name": "mine", "web_ui": True})
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    _wait(lambda: api.call("GET", f"/jobs/{job}", auth=bob).json()["state"] == "RUNNING", what="the job to run")
    reply = api.sync()
    [a] = [a for a in reply["assignments"] if a["job_id"] == job]
    port = int(a["env"]["PORT"])
    report = {"job_id": job, "attempt": a["attempt"], "rank": 0, "port": port, "listening": True}
    api.sync(running=[{"job_id": job, "attempt": a["attempt"]}], web_ports=[report])
    time.sleep(1.5)
    r = api.gw("GET", "/services/mine/x", headers=bob)
    assert r.status_code == 503 and "x-corral-replica" not in r.headers, (r.status_code, r.text)


def test_the_traffic_and_samples_cannot_be_written_from_outside(api: Api) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    for method, path in (
        ("POST", "/services/mine/metrics"),
        ("PUT", "/services/mine/metrics"),
        ("POST", "/services/mine/traffic"),
        ("POST", "/services/traffic"),
        ("POST", "/services/samples"),
        ("PUT", "/services/mine/samples"),
    ):
        for who in (bob, api.admin):
            r = api.call(method, path, auth=who, json={"rps": 1e9, "requests": 10**9})
            assert r.status_code in (404, 405), (method, path, r.status_code)
    # the agent port's paths neither
    for path in ("/api/v1/agents/n1/services/traffic", "/api/v1/agents/n1/service-traffic"):
        r = api.client.post(path, json={}, headers=api.agents("n1"))
        assert r.status_code in (404, 405), (path, r.status_code)
    assert api.store.load_service_traffic() == {} or all(
        d.get("requests", 0) < 10**9 for rows in api.store.load_service_traffic().values() for d in rows.values()
    )


def test_metrics_query_bounds(api: Api) -> None:
    bob = api.user("bob", "member", "nlp")
    assert api.service(bob, "mine").status_code == 201
    for since in ("0", "-1", "1e309", "nan", "999999999"):
        r = api.call("GET", f"/services/mine/metrics?since_s={since}", auth=bob)
        assert r.status_code in (400, 422), (since, r.status_code)
        assert r.json()["error"]["field"] == "since_s"


def test_a_new_service_never_inherits_a_deleted_services_traffic_or_graphs(api: Api) -> None:
    """On SQLite a deleted row's id can be handed out again: whatever is kept by service id (the gateways' counts,
    the graphs' points, the controller's memory) must be gone with it, or the next tenant reads it."""
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    first = api.service(alice, "a-busy", replicas=0).json()
    for _ in range(30):  # no replica: 503s, counted (requests and errors) by the gateway
        assert api.gw("GET", "/services/a-busy/x", headers=alice).status_code == 503
    _wait(lambda: api.call("GET", "/services/a-busy").json()["traffic"], what="the controller to count a-busy")
    _wait(lambda: api.call("GET", "/services/a-busy/metrics").json(), what="a graph point of a-busy")
    assert api.call("DELETE", "/services/a-busy", auth=alice).status_code == 204
    _wait(lambda: api.call("GET", "/services/a-busy").status_code == 404, what="a-busy to be removed")
    time.sleep(1.5)  # a controller pass and a flush after the removal
    mine = api.service(bob, "b-new", replicas=0).json()
    time.sleep(1.5)
    shown = api.call("GET", "/services/b-new", auth=bob).json()
    points = api.call("GET", "/services/b-new/metrics", auth=bob).json()
    leaked = (shown["traffic"] or {}).get("rps", 0) > 0 or any(p["rps"] > 0 or p["error_rate"] > 0 for p in points)
    assert not leaked, (first["id"], mine["id"], shown["traffic"], points)


def test_a_websocket_to_another_tenants_service_is_refused_before_the_handshake(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.service(alice, "llm", replicas=0).status_code == 201
    login = api.client.post("/web/login", json={"username": "alice", "password": PASSWORD})
    session = login.cookies.get("corral_session") or api.client.cookies.get("corral_session")
    api.client.cookies.clear()
    for headers in (bob, {}, {"Cookie": f"corral_session={session}", "Origin": "http://testserver"}):
        accepted = False
        try:
            with api.client.websocket_connect("/services/llm/ws", headers=headers):
                accepted = True
        except Exception as e:  # a denial (HTTP answer) or a close before accept
            status = getattr(e, "status_code", None) or getattr(e, "code", None)
            assert status in (401, 404, 1008, None), (headers, status, e)
        assert not accepted, headers


def test_the_api_ports_input_guard_leaves_service_bodies_to_the_gateways_bounds(api: Api) -> None:
    """With the gateway on the API port, a body for /services is the gateway's to read and bound (its own limits, a
    budget in all): the API's input guard (8 MiB, read whole before any route) must not read it first, outside any
    budget. Corral's own routes stay guarded."""
    big = b'{"x": "' + b"a" * (9 * 1024 * 1024) + b'"}'  # over the guard's 8 MiB, under the gateway's 64 MiB
    headers = {**api.admin, "content-type": "application/json"}
    r = api.client.post("/services/nope/upload", content=big, headers=headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"  # the gateway's answer, not the guard's
    r = api.client.post("/api/v1/jobs", content=big, headers=headers)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
