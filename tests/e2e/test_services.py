"""Long-running services with real processes: `corral up` and a second agent on simulated GPUs, a toy HTTP service
(tests/e2e/toy_service.py, standard library only) with 2 replicas behind the gateway, and a bounded load generator
that counts every failed request. Zero failed requests through a rolling update and through a GPU fault on one
replica's GPU; a new version that never becomes ready stalls the rollout while the old replicas keep serving; a
service scaled to zero answers the first request once a replica started."""

from __future__ import annotations

import io
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import JOB_PYTHON, Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # timing: replicas start and drain under a load generator

TOY = Path(__file__).with_name("toy_service.py")


class Api:
    def __init__(self, c: Corral) -> None:
        self.c = c
        token = (c.data_dir / "admin-token").read_text().strip()
        self.auth = {"Authorization": f"Bearer {token}"}
        self.http = httpx.Client(base_url=c.url, headers=self.auth, timeout=10)

    def create(self, **body: Any) -> dict[str, Any]:
        r = self.http.post("/api/v1/services", json=body)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def show(self, name: str) -> dict[str, Any]:
        r = self.http.get(f"/api/v1/services/{name}")
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def patch(self, name: str, **body: Any) -> dict[str, Any]:
        r = self.http.patch(f"/api/v1/services/{name}", json=body)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def ready(self, name: str, n: int, revision: int | None = None) -> dict[str, Any] | None:
        s = self.show(name)
        reps = [r for r in s["replicas"] if r["ready"] and (revision is None or r["revision"] == revision)]
        return s if len(reps) == n and s["ready"] == n else None


class Load:
    """Worker threads sending GETs through the gateway until stopped (at most `limit` requests in all)."""

    def __init__(self, url: str, auth: dict[str, str], workers: int = 4, path: str = "/work?ms=20") -> None:
        self.url, self.auth, self.path = url, auth, path
        self.ok = 0
        self.failures: list[str] = []
        self.versions: Counter[str] = Counter()
        self.replicas: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.limit = 20_000
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self) -> None:
        with httpx.Client(headers=self.auth, timeout=30) as http:
            while not self._stop.is_set() and self.ok + len(self.failures) < self.limit:
                try:
                    r = http.get(self.url + self.path)
                    if r.status_code == 200:
                        body = r.json()
                        with self._lock:
                            self.ok += 1
                            self.versions[body["version"]] += 1
                            self.replicas[r.headers.get("x-corral-replica", "?")] += 1
                    else:
                        with self._lock:
                            self.failures.append(f"{r.status_code} {r.text[:200]}")
                except httpx.HTTPError as e:
                    with self._lock:
                        self.failures.append(repr(e))
                time.sleep(0.01)


@pytest.fixture
def cluster(corral_factory: Any) -> tuple[Corral, Api, str]:
    c: Corral = corral_factory(gpus="sim:4xH100-80GB", node="node-a")
    c.start()
    c.start_agent("node-b", "sim:4xH100-80GB")
    wait_for(lambda: len(c.cli_json("nodes")) == 2, 30, "two nodes")
    script = c.shared / "toy_service.py"
    shutil.copy(TOY, script)
    script.chmod(0o644)
    return c, Api(c), str(script)


def _toy(script: str, **env: str) -> dict[str, Any]:
    return {"command": [JOB_PYTHON, script], "env": {"VERSION": "1", **env}, "health_path": "/healthz"}


def test_rolling_update_and_a_gpu_fault_lose_no_request(cluster: tuple[Corral, Api, str]) -> None:
    c, api, script = cluster
    api.create(name="echo", port=8000, replicas=2, gpus=1, **_toy(script))
    wait_for(lambda: api.ready("echo", 2), 60, "2 replicas ready")
    gw = f"{c.gateway_url}/services/echo"
    assert httpx.get(f"{gw}/").status_code == 401  # a token is needed (not --public)

    # (1) a rolling update under load
    with Load(gw, api.auth) as load:
        wait_for(lambda: load.ok >= 20, 30, "traffic flowing")
        api.patch("echo", env={"VERSION": "2"})
        done = wait_for(
            lambda: (s := api.show("echo"))["rollout"]["state"] == "complete" and s["stable_revision"] == 2 and s,
            120,
            "rollout of revision 2 complete",
        )
        wait_for(lambda: load.versions["2"] >= 20, 30, "traffic on the new version")
    assert load.failures == [], load.failures[:5]
    assert {r["revision"] for r in done["replicas"]} == {2} and len(done["replicas"]) == 2
    assert load.versions["1"] > 0 and load.versions["2"] > 0
    kinds = [e["kind"] for e in api.show("echo")["events"]]
    assert "rollout" in kinds and "draining" in kinds and "rollout-complete" in kinds

    # (2) a GPU fault on one replica's GPU: that replica is rescheduled, the other serves meanwhile
    victim = api.show("echo")["replicas"][0]
    with Load(gw, api.auth) as load:
        wait_for(lambda: load.ok >= 20, 30, "traffic flowing")
        assert c.cli("sim", "fault", victim["node"], str(victim["gpus"][0]), "--xid", "79").returncode == 0
        again = wait_for(
            lambda: (
                (s := api.ready("echo", 2))
                and any(r["job_id"] == victim["job_id"] and r["attempt"] > victim["attempt"] for r in s["replicas"])
                and s
            ),
            90,
            "the replica running again elsewhere, 2 ready",
        )
        wait_for(lambda: load.ok >= 40, 30, "more traffic")
    assert load.failures == [], load.failures[:5]
    moved = next(r for r in again["replicas"] if r["job_id"] == victim["job_id"])
    assert (moved["node"], moved["gpus"]) != (victim["node"], victim["gpus"])

    # streaming: server-sent events come through as the replica sends them
    with (
        httpx.Client(headers=api.auth, timeout=10) as http,
        http.stream("GET", f"{gw}/sse") as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line.startswith("data:")]
    assert events == [f"data: token {i}" for i in range(5)]


def test_an_unready_version_stalls_the_rollout_and_rollback_restores_it(cluster: tuple[Corral, Api, str]) -> None:
    c, api, script = cluster
    api.create(name="stall", port=8000, replicas=2, progress_deadline_s=6, **_toy(script))
    wait_for(lambda: api.ready("stall", 2), 60, "2 replicas ready")
    gw = f"{c.gateway_url}/services/stall"
    with Load(gw, api.auth) as load:
        api.patch("stall", env={"VERSION": "2", "TOY_UNHEALTHY": "1"})
        stalled = wait_for(
            lambda: (s := api.show("stall"))["rollout"]["state"] == "stalled" and s, 60, "rollout stalled"
        )
        wait_for(lambda: not [r for r in api.show("stall")["replicas"] if r["revision"] == 2], 30, "new replicas gone")
        time.sleep(1)
    assert load.failures == [], load.failures[:5]
    assert set(load.versions) == {"1"}
    assert "not ready after" in stalled["rollout"]["message"] and "/healthz" in stalled["rollout"]["message"]
    assert stalled["stable_revision"] == 1 and api.ready("stall", 2, revision=1)
    r = api.http.post("/api/v1/services/stall/rollback")
    assert r.status_code == 200, r.text
    wait_for(lambda: api.show("stall")["rollout"]["state"] == "complete", 30, "rollback complete")
    assert api.show("stall")["revision"] == 1


def test_scale_from_zero_answers_the_first_request(cluster: tuple[Corral, Api, str]) -> None:
    c, api, script = cluster
    api.create(
        name="lazy",
        port=8000,
        min_replicas=0,
        max_replicas=2,
        target_rps=5,
        idle_timeout_s=2,
        scale_down_delay_s=0,
        public=True,
        **_toy(script),
    )
    wait_for(lambda: (s := api.show("lazy"))["desired"] == 0 and not s["replicas"] and s, 60, "scaled to zero")
    started = time.monotonic()
    r = httpx.get(f"{c.gateway_url}/services/lazy/hello", timeout=120)  # public: no token
    cold_s = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/hello"
    s = api.show("lazy")
    assert s["desired"] >= 1
    assert any(e["kind"] == "autoscaled" and "a request waits" in e["message"] for e in s["events"])
    print(f"cold start through the gateway: {cold_s:.1f} s")


OWN_IMAGE = "corral-test/own-httpd:1"  # built in the test from the test image, with a CMD that serves
OWN_SERVE = "mkdir -p /tmp/w && echo own=$PORT > /tmp/w/index.html && exec busybox httpd -f -p 8000 -h /tmp/w"
CONTAINER_SERVE = "mkdir -p /tmp/w && echo v=$VERSION > /tmp/w/index.html && exec busybox httpd -f -p 8000 -h /tmp/w"


@pytest.mark.xdist_group("container-engine")
@pytest.mark.timeout(300)
def test_a_service_of_container_replicas_updates_without_a_failed_request(corral_factory: Any) -> None:
    """The replicas run in containers of an image (the real engine): each listens on --port 8000 inside, published on
    a node port of its own; the gateway balances them and a rolling update loses no request."""
    from container_engine import DOCKER_HOST, TEST_IMAGE, engine_node, remove_node_containers, require_engine

    engine = require_engine()
    node = engine_node("e2e-svc")
    remove_node_containers(engine, node)
    c: Corral = corral_factory(gpus="none", node=node)
    c.env.update(CORRAL_DOCKER_HOST=DOCKER_HOST, CORRAL_LONG_POLL_S="1")
    c.start()
    try:
        api = Api(c)
        api.create(
            name="boxed",
            image=TEST_IMAGE,
            command=["sh", "-c", CONTAINER_SERVE],
            env={"VERSION": "1"},
            port=8000,
            replicas=2,
            health_path="/index.html",
        )
        first = wait_for(lambda: api.ready("boxed", 2), 120, "2 container replicas ready")
        assert len({r["port"] for r in first["replicas"]}) == 2  # a node port each, both published from 8000
        gw = f"{c.gateway_url}/services/boxed"
        seen: Counter[str] = Counter()
        failures: list[str] = []
        stop = threading.Event()

        def load() -> None:
            with httpx.Client(headers=api.auth, timeout=30) as http:
                while not stop.is_set():
                    try:
                        r = http.get(f"{gw}/index.html")
                        if r.status_code == 200:
                            seen[r.text.strip()] += 1
                        else:
                            failures.append(f"{r.status_code} {r.text[:200]}")
                    except httpx.HTTPError as e:
                        failures.append(repr(e))
                    time.sleep(0.02)

        workers = [threading.Thread(target=load, daemon=True) for _ in range(3)]
        for w in workers:
            w.start()
        try:
            wait_for(lambda: seen["v=1"] >= 20, 30, "traffic on version 1")
            api.patch("boxed", env={"VERSION": "2"})
            wait_for(
                lambda: (s := api.show("boxed"))["rollout"]["state"] == "complete" and s["stable_revision"] == 2,
                180,
                "rollout of revision 2 complete",
            )
            wait_for(lambda: seen["v=2"] >= 20, 30, "traffic on version 2")
        finally:
            stop.set()
            for w in workers:
                w.join(30)
        assert failures == [], failures[:5]
        assert set(seen) == {"v=1", "v=2"}

        # an image that serves by its own command: `--image IMAGE` alone
        dockerfile = f'FROM {TEST_IMAGE}\nCMD ["sh", "-c", "{OWN_SERVE}"]\n'
        engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=OWN_IMAGE, rm=True)
        api.create(name="own", image=OWN_IMAGE, port=8000, replicas=1, health_path="/index.html")
        shown = wait_for(lambda: api.ready("own", 1), 120, "the image's own command serving")
        assert shown["command"] == []
        r = httpx.get(f"{c.gateway_url}/services/own/index.html", headers=api.auth, timeout=10)
        assert r.status_code == 200 and r.text.strip() == "own=8000", r.text
    finally:
        remove_node_containers(engine, node)


@pytest.mark.postgres
@pytest.mark.timeout(300)
def test_every_server_replica_serves_the_gateway_and_a_leader_kill_loses_no_request(
    corral_factory: Any, postgres_url: str
) -> None:
    """Two `corral server` replicas on PostgreSQL: a service created through one answers through both gateways;
    kill -9 of the leader (which runs the controller) loses no request through the other's gateway, and the other
    takes the controller over (a scale it is then asked for happens)."""
    import os
    import signal

    from .test_replicas import Replica, join_agent

    c: Corral = corral_factory(gpus="none", database_url=postgres_url)
    a = Replica(c, "a")  # leads
    token = (c.data_dir / "admin-token").read_text().strip()
    b = Replica(c, "b")
    env = dict(c.env, CORRAL_URL=f"{b.url},{a.url}", CORRAL_TOKEN=token)
    join_agent(c, env, [b, a])
    auth = {"Authorization": f"Bearer {token}"}
    http = httpx.Client(base_url=b.url, headers=auth, timeout=10)
    wait_for(lambda: http.get("/api/v1/nodes").json(), 60, "the agent registered")
    script = c.shared / "toy_service.py"
    shutil.copy(TOY, script)
    script.chmod(0o644)
    r = http.post("/api/v1/services", json={"name": "both", "port": 8000, "replicas": 2, **_toy(str(script))})
    assert r.status_code == 201, r.text
    gateways = [f"http://127.0.0.1:{x.gateway_port}/services/both" for x in (a, b)]
    for gw in gateways:
        wait_for(lambda gw=gw: httpx.get(f"{gw}/", headers=auth).status_code == 200, 60, f"{gw} serving")
    with Load(gateways[1], auth) as load:
        wait_for(lambda: load.ok >= 20, 30, "traffic through b's gateway")
        os.killpg(a.proc.pid, signal.SIGKILL)
        a.proc.wait(10)
        wait_for(lambda: http.get("/api/v1/status").json()["leader"], 30, "b leads")
        assert http.post("/api/v1/services/both/scale", json={"replicas": 3}).status_code == 200
        wait_for(lambda: http.get("/api/v1/services/both").json()["ready"] == 3, 60, "3 ready, scaled by b")
        wait_for(lambda: load.ok >= 200, 60, "more traffic")
    assert load.failures == [], load.failures[:5]
