"""Tenants competing through the real server and API: quotas, borrowing, reclaim by preemption (the victim
requeues keeping its place), maximums, and why-pending with position. The agent is played by the test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store


class World:
    def __init__(self, client: TestClient, admin: str, join: dict[str, str]) -> None:
        self.c = client
        self.admin = {"Authorization": f"Bearer {admin}"}
        self.agent = join  # headers presenting node n1's certificate
        self.users: dict[str, dict[str, str]] = {}

    def tenant(self, name: str, guaranteed: int, maximum: int | None = None) -> dict[str, str]:
        assert self.c.post("/api/v1/tenants", json={"name": name}, headers=self.admin).status_code == 201
        r = self.c.put(
            f"/api/v1/tenants/{name}/quotas",
            json={"guaranteed_gpus": guaranteed, "max_gpus": maximum},
            headers=self.admin,
        )
        assert r.status_code == 200, r.text
        self.c.post(
            "/api/v1/users",
            json={"name": f"{name}-user", "tenant": name, "password": "password-123"},
            headers=self.admin,
        )
        token = self.c.post("/api/v1/login", json={"username": f"{name}-user", "password": "password-123"}).json()
        return {"Authorization": f"Bearer {token['token']}"}

    def submit(self, who: dict[str, str], **kw: Any) -> int:
        r = self.c.post("/api/v1/jobs", json={"command": ["sleep", "600"], "gpus": 1, **kw}, headers=who)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return self.c.get(f"/api/v1/jobs/{job_id}", headers=self.admin).json()  # type: ignore[no-any-return]

    def sync(self, running: list[tuple[int, int]], exits: list[tuple[int, int]] = ()) -> dict[str, Any]:
        body = {
            "running": [{"job_id": j, "attempt": a} for j, a in running],
            "exits": [{"job_id": j, "attempt": a, "exit_code": 143} for j, a in exits],
        }
        return self.c.post("/api/v1/agents/n1/sync", json=body, headers=self.agent).json()  # type: ignore[no-any-return]

    def settle(self, pred: Any, what: str) -> Any:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if v := pred():
                return v
            time.sleep(0.05)
        raise AssertionError(what)


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1, alert_interval_s=3600, cancel_grace_s=1
    )
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        w = World(client, creds.admin_token, NodeAgents(client)("n1"))
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(4)]
        client.post(
            "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=w.agent
        )
        yield w


def test_borrowed_gpus_are_reclaimed_for_the_owner(world: World) -> None:
    a = world.tenant("team-a", guaranteed=2)
    b = world.tenant("team-b", guaranteed=2)
    b_jobs = [world.submit(b) for _ in range(2)]
    world.settle(lambda: all(world.job(j)["state"] == "RUNNING" for j in b_jobs), "team-b runs its guarantee")
    # the borrowed two must start later (they are the most recent): wait for the clock to pass the first starts
    first_started = max(datetime.fromisoformat(world.job(j)["started_at"]) for j in b_jobs)
    world.settle(lambda: datetime.now(UTC) > first_started, "the clock moved past the first starts")
    b_jobs += [world.submit(b) for _ in range(2)]  # team-b borrows team-a's idle half
    world.settle(lambda: all(world.job(j)["state"] == "RUNNING" for j in b_jobs), "team-b runs 4")
    world.sync([(j, 1) for j in b_jobs])
    a_jobs = [world.submit(a) for _ in range(2)]
    # the owner needs its guarantee back: two of team-b's borrowed jobs are preempted, most recent first
    seen: set[int] = set()

    def two_victims() -> bool:
        seen.update(c["job_id"] for c in world.sync([(j, 1) for j in b_jobs])["cancels"])
        return len(seen) >= 2

    world.settle(two_victims, "two preemptions")
    victims = sorted(seen)
    assert victims == sorted(b_jobs[2:])
    assert all(world.job(v)["state"] == "RUNNING" for v in victims)  # they hold their GPUs until they exit
    assert all(world.job(j)["state"] == "PENDING" for j in a_jobs)
    world.sync([(j, 1) for j in b_jobs[:2]], exits=[(v, 1) for v in victims])
    world.settle(lambda: all(world.job(j)["state"] == "RUNNING" for j in a_jobs), "team-a runs its guarantee")
    for v in victims:  # requeued, keeping their place, marked as preempted
        job = world.job(v)
        assert job["state"] == "PENDING" and job["preemptions"] == 1
    assert sum(world.job(j)["state"] == "RUNNING" for j in b_jobs) == 2  # team-b keeps its guarantee
    events = world.c.get(f"/api/v1/jobs/{victims[0]}/events", headers=world.admin).json()
    assert [e["kind"] for e in events][-2:] == ["preempting", "preempted"]


def test_maximum_is_never_exceeded_and_pending_says_why(world: World) -> None:
    capped = world.tenant("capped", guaranteed=0, maximum=1)
    first, second = world.submit(capped), world.submit(capped)
    world.settle(lambda: world.job(first)["state"] == "RUNNING", "first runs")
    job = world.settle(
        lambda: (j := world.job(second))["pending_code"] == "quota" and j,
        "second waits on quota",
    )
    assert job["pending_reason"] == (
        "waiting for tenant capped's own jobs to free GPUs: this one would bring it to 2 GPUs, above its maximum of 1"
    ), job["pending_reason"]
    assert job["queue_position"] == 0
    assert world.job(second)["state"] == "PENDING"


def test_higher_priority_goes_first_and_positions_follow(world: World) -> None:
    t = world.tenant("solo", guaranteed=4)
    hog = world.submit(t, gpus=4)
    world.settle(lambda: world.job(hog)["state"] == "RUNNING", "hog runs")
    low = world.submit(t, priority=0)
    high = world.submit(t, priority=10)

    def positions() -> tuple[int, int] | None:
        got = (world.job(high)["queue_position"], world.job(low)["queue_position"])
        return None if None in got else got

    assert world.settle(positions, "positions of both computed") == (0, 1)


def test_time_limits_give_an_eta(world: World) -> None:
    t = world.tenant("timed", guaranteed=4)
    running = world.submit(t, gpus=4, time_limit_s=600)
    world.settle(lambda: world.job(running)["state"] == "RUNNING", "running")
    waiting = world.submit(t, gpus=2)
    job = world.settle(lambda: (j := world.job(waiting))["eta"] and j, "eta computed")
    started = world.job(running)["started_at"]
    from datetime import datetime

    delta = datetime.fromisoformat(job["eta"]) - datetime.fromisoformat(started)
    assert abs(delta.total_seconds() - 600) < 5


def test_a_job_naming_no_model_runs_on_a_model_its_tenant_has_quota_for(world: World) -> None:
    # The README's walkthrough: a quota for H100 only, then a job that names no model (issue 14).
    assert world.c.post("/api/v1/tenants", json={"name": "vision"}, headers=world.admin).status_code == 201
    r = world.c.put(
        "/api/v1/tenants/vision/quotas",
        json={"gpu_model": "H100", "guaranteed_gpus": 2, "max_gpus": 4},
        headers=world.admin,
    )
    assert r.status_code == 200, r.text
    user = {"name": "alice", "tenant": "vision", "password": "password-123"}
    assert world.c.post("/api/v1/users", json=user, headers=world.admin).status_code == 201
    token = world.c.post("/api/v1/login", json={"username": "alice", "password": "password-123"}).json()["token"]
    vision = {"Authorization": f"Bearer {token}"}
    quotas = world.c.get("/api/v1/quotas", headers=world.admin).json()
    assert [q["gpu_model"] for q in quotas if q["tenant"] == "vision"] == ["H100"]  # only a model quota
    r = world.c.post("/api/v1/jobs", json={"command": ["train"], "gpus": 2, "time_limit_s": 3600}, headers=vision)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["gpu_model"] == "H100"  # pinned to what its quota covers
    world.settle(lambda: world.job(job["id"])["state"] == "RUNNING", "it runs on the node's H100s")
    # A model the quota does not cover is still refused, naming the models it covers.
    gpus = [{"index": i, "uuid": f"GPU-a{i}", "model": "A100-40GB", "memory_mib": 40960} for i in range(2)]
    agent2 = NodeAgents(world.c)("n2")
    r = world.c.post(
        "/api/v1/agents/register", json={"name": "n2", "backend": "simulated", "gpus": gpus}, headers=agent2
    )
    assert r.status_code == 200, r.text
    r = world.c.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1, "gpu_model": "A100"}, headers=vision)
    assert r.status_code == 400 and r.json()["error"]["field"] == "gpu_model"
    assert "no quota for A100; its quotas cover H100 (ask for one of those)" in r.json()["error"]["message"]
