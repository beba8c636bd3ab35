"""Job arrays and batch submission through the real server and API (issue 13): one call makes many jobs, the
`%N` limit holds while GPUs are free, each task gets its index, nothing is half-made, lists come in pages, and
another tenant sees none of it. Runs on SQLite and PostgreSQL; the agent is played by the test."""

from __future__ import annotations

import time
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


class World:
    def __init__(self, client: TestClient, admin: str, agent: dict[str, str]) -> None:
        self.c = client
        self.admin = {"Authorization": f"Bearer {admin}"}
        self.agent = agent

    def tenant(self, name: str) -> dict[str, str]:
        assert self.c.post("/api/v1/tenants", json={"name": name}, headers=self.admin).status_code == 201
        r = self.c.post(
            "/api/v1/users",
            json={"name": f"{name}-user", "tenant": name, "password": "password-123"},
            headers=self.admin,
        )
        assert r.status_code == 201, r.text
        token = self.c.post("/api/v1/login", json={"username": f"{name}-user", "password": "password-123"}).json()
        return {"Authorization": f"Bearer {token['token']}"}

    def jobs(self, who: dict[str, str], **params: Any) -> list[dict[str, Any]]:
        r = self.c.get("/api/v1/jobs", params={"all": "true", **params}, headers=who)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def sync(self, running: list[tuple[int, int]], exits: list[tuple[int, int]] = ()) -> dict[str, Any]:
        body = {
            "running": [{"job_id": j, "attempt": a} for j, a in running],
            "exits": [{"job_id": j, "attempt": a, "exit_code": 0} for j, a in exits],
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
def world(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    limit = getattr(request, "param", 50_000)
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        schedule_interval_s=0.1,
        alert_interval_s=3600,
        max_active_jobs_per_tenant=limit,
    )
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        w = World(client, creds.admin_token, NodeAgents(client)("n1"))
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
        r = client.post(
            "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=w.agent
        )
        assert r.status_code == 200, r.text
        yield w


def test_an_array_runs_at_most_its_limit_at_once_and_each_task_knows_its_index(world: World) -> None:
    alice = world.tenant("vision")
    r = world.c.post("/api/v1/jobs", json={"command": ["train"], "gpus": 1, "array": "0-5%2"}, headers=alice)
    assert r.status_code == 201, r.text
    first = r.json()
    array_id = first["id"]
    assert (first["array_id"], first["array_index"], first["array_limit"]) == (array_id, 0, 2)
    tasks = world.jobs(alice, array_id=array_id)
    assert [t["array_index"] for t in tasks] == [0, 1, 2, 3, 4, 5] and {t["array_id"] for t in tasks} == {array_id}
    assert len(world.jobs(alice)) == 6  # one call made six jobs, nothing else
    # Eight GPUs are free, yet only two tasks run: the limit, not capacity, holds the others back.
    running = world.settle(
        lambda: (rs := [t for t in world.jobs(alice, array_id=array_id) if t["state"] == "RUNNING"]) and rs, "2 start"
    )
    time.sleep(0.5)  # several more cycles
    tasks = world.jobs(alice, array_id=array_id)
    assert [t["array_index"] for t in tasks if t["state"] == "RUNNING"] == [0, 1]
    waiting = [t for t in tasks if t["state"] == "PENDING"]
    assert len(waiting) == 4 and all(t["pending_code"] == "array-limit" for t in waiting), waiting
    assert waiting[0]["pending_reason"] == "its array already runs 2 tasks at once, its limit (%2)"
    reply = world.sync([])
    env = {a["job_id"]: a["env"] for a in reply["assignments"]}
    assert {e["CORRAL_ARRAY_INDEX"] for e in env.values()} == {"0", "1"}
    assert {e["CORRAL_ARRAY_JOB_ID"] for e in env.values()} == {str(array_id)}
    # One task ends: the next one (by index) starts in its place, and still only two run.
    done = running[0]["id"]
    world.sync([(t["id"], 1) for t in running[1:]], exits=[(done, 1)])
    world.settle(
        lambda: [t["array_index"] for t in world.jobs(alice, array_id=array_id) if t["state"] == "RUNNING"] == [1, 2],
        "task 2 takes task 0's place",
    )
    assert len(world.jobs(alice, state="RUNNING")) == 2


@pytest.mark.parametrize(
    ("array", "words"),
    [
        ("5-1", "low to high"),
        ("0-20000", "at most 10000 tasks"),
        ("1,1", "given twice"),
        ("0-3%0", "limit after %"),
        ("x", "not an index"),
        ("", "no indices"),
        ("0-9:0", "step"),
    ],
)
def test_a_bad_array_names_the_field_and_makes_nothing(world: World, array: str, words: str) -> None:
    alice = world.tenant("vision")
    r = world.c.post("/api/v1/jobs", json={"command": ["x"], "array": array}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == "array" and words in r.json()["error"]["message"]
    assert world.jobs(alice) == []


def test_a_batch_is_stored_whole_or_not_at_all(world: World) -> None:
    alice = world.tenant("vision")
    good = {"command": ["a"], "gpus": 1}
    batch = {"jobs": [good, {"command": ["b"], "array": "0-1"}, {"command": ["c"], "queue": "nope"}]}
    r = world.c.post("/api/v1/jobs/batch", json=batch, headers=alice)
    assert r.status_code == 400 and r.json()["error"]["field"] == "jobs.2.queue", r.text
    r = world.c.post("/api/v1/jobs/batch", json={"jobs": [good, {"command": ["b"], "gpus": -1}]}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == "jobs.1.gpus", r.text
    assert world.jobs(alice) == []  # neither call left a job behind
    batch["jobs"] = batch["jobs"][:2]
    r = world.c.post("/api/v1/jobs/batch", json=batch, headers=alice)
    assert r.status_code == 201, r.text
    made = r.json()
    assert [(j["command"], j["array_index"]) for j in made] == [(["a"], None), (["b"], 0), (["b"], 1)]
    assert [j["array_id"] for j in made] == [None, made[1]["id"], made[1]["id"]]  # the array after a plain job
    assert sorted(j["id"] for j in world.jobs(alice)) == sorted(j["id"] for j in made)
    too_many = {"jobs": [{"command": ["x"], "array": "0-9999"}, good]}
    r = world.c.post("/api/v1/jobs/batch", json=too_many, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == "jobs" and "at most 10000" in r.text


def test_a_retried_array_or_batch_makes_its_jobs_once(world: World) -> None:
    alice = world.tenant("vision")
    key = {"Idempotency-Key": "sweep-1", **alice}
    body = {"command": ["x"], "array": "0-9%3"}
    first = world.c.post("/api/v1/jobs", json=body, headers=key)
    again = world.c.post("/api/v1/jobs", json=body, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    other = world.c.post("/api/v1/jobs", json={**body, "array": "0-8"}, headers=key)
    assert other.status_code == 422  # the same key with another request
    batch = {"jobs": [{"command": ["y"]}, {"command": ["z"], "array": "0-2"}]}
    key2 = {"Idempotency-Key": "batch-1", **alice}
    one = world.c.post("/api/v1/jobs/batch", json=batch, headers=key2)
    two = world.c.post("/api/v1/jobs/batch", json=batch, headers=key2)
    assert [j["id"] for j in one.json()] == [j["id"] for j in two.json()] and len(one.json()) == 4
    assert two.headers["Idempotent-Replayed"] == "true"
    assert len(world.jobs(alice)) == 10 + 4


def test_another_tenant_sees_and_stops_none_of_an_array(world: World) -> None:
    alice, mallory = world.tenant("vision"), world.tenant("rival")
    array_id = world.c.post("/api/v1/jobs", json={"command": ["x"], "array": "0-3"}, headers=alice).json()["id"]
    assert world.jobs(mallory, array_id=array_id) == []
    tasks = world.jobs(alice, array_id=array_id)
    for t in tasks:
        assert world.c.get(f"/api/v1/jobs/{t['id']}", headers=mallory).status_code == 404
        assert world.c.post(f"/api/v1/jobs/{t['id']}/cancel", headers=mallory).status_code == 404
    assert all(t["state"] == "PENDING" or t["state"] == "RUNNING" for t in world.jobs(alice, array_id=array_id))
    # Mallory's own array is hers: its tasks carry her array's id, never Alice's.
    own = world.c.post("/api/v1/jobs", json={"command": ["x"], "array": "0-1"}, headers=mallory).json()
    assert own["array_id"] != array_id and {t["array_id"] for t in world.jobs(mallory)} == {own["id"]}


def test_a_repeating_job_cannot_be_an_array(world: World) -> None:
    alice = world.tenant("vision")
    body = {"schedule": "@daily", "job": {"command": ["x"], "array": "0-3"}}
    r = world.c.post("/api/v1/schedules", json=body, headers=alice)
    assert r.status_code == 422 and "array" in r.json()["error"]["message"]


def test_lists_come_in_pages_that_the_link_header_walks(world: World) -> None:
    alice = world.tenant("vision")
    world.c.post("/api/v1/jobs", json={"command": ["x"], "array": "0-6"}, headers=alice)
    ids = sorted(j["id"] for j in world.jobs(alice))
    for params in ({"all": "true", "limit": 3}, {"all": "true", "limit": 3, "newest_first": "true"}):
        seen: list[int] = []
        r = world.c.get("/api/v1/jobs", params=params, headers=alice)
        pages = 0
        while True:
            pages += 1
            assert r.status_code == 200 and r.headers["X-Total-Count"] == "7"
            seen += [j["id"] for j in r.json()]
            link = r.headers.get("Link")
            if link is None:
                break
            assert link.endswith('; rel="next"')
            r = world.c.get(link[1 : link.index(">")], headers=alice)
        assert seen == (ids if "newest_first" not in params else ids[::-1]) and pages == 3
    r = world.c.get("/api/v1/jobs", params={"all": "true"}, headers=alice)
    assert "Link" not in r.headers and len(r.json()) == 7  # under the default page of 500


@pytest.mark.parametrize("world", [5], indirect=True)
def test_a_tenant_cannot_fill_the_queue_past_its_limit(world: World) -> None:
    mallory, alice = world.tenant("rival"), world.tenant("vision")
    r = world.c.post("/api/v1/jobs", json={"command": ["x"], "array": "0-5"}, headers=mallory)
    assert r.status_code == 429 and "limit of 5" in r.json()["error"]["message"] and r.headers["Retry-After"]
    assert world.jobs(mallory) == []  # all or nothing
    made = world.c.post("/api/v1/jobs", json={"command": ["x"], "gpus": 8, "array": "0-4"}, headers=mallory)
    assert made.status_code == 201
    assert world.c.post("/api/v1/jobs", json={"command": ["x"]}, headers=mallory).status_code == 429
    batch = {"jobs": [{"command": ["x"]}]}
    assert world.c.post("/api/v1/jobs/batch", json=batch, headers=mallory).status_code == 429
    # Another tenant's room is its own.
    assert world.c.post("/api/v1/jobs", json={"command": ["x"], "array": "0-4"}, headers=alice).status_code == 201
    # Finished jobs do not count: one of Mallory's ends, and she may submit one more.
    one = world.jobs(mallory)[-1]["id"]  # pending: eight GPUs hold one of her 8-GPU tasks at a time
    assert world.c.post(f"/api/v1/jobs/{one}/cancel", headers=mallory).status_code == 200
    world.settle(
        lambda: world.c.post("/api/v1/jobs", json={"command": ["x"]}, headers=mallory).status_code == 201,
        "room for one more once a job ended",
    )
