"""The REST API in-process (ASGI): validation errors name the field, nothing is half-created,
placement never gives one GPU to two jobs. Runs on SQLite and PostgreSQL."""

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


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], dict[str, str]]]:
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.2)
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        yield client, {"Authorization": f"Bearer {creds.admin_token}"}, NodeAgents(client)


def register(client: TestClient, agent: NodeAgents, name: str, n: int, model: str = "H100-80GB") -> None:
    gpus = [{"index": i, "uuid": f"GPU-{name}-{i}", "model": model, "memory_mib": 81920} for i in range(n)]
    r = client.post(
        "/api/v1/agents/register", json={"name": name, "backend": "simulated", "gpus": gpus}, headers=agent(name)
    )
    assert r.status_code == 200, r.text


def wait_for(pred: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"command": []}, "command", id="empty-command"),
        pytest.param({"command": ["x"], "gpus": -1}, "gpus", id="negative-gpus"),
        pytest.param({"command": ["x"], "env": {"1BAD": "v"}}, "env", id="bad-env-name"),
        pytest.param({"command": ["x"], "workdir": "relative"}, "workdir", id="relative-workdir"),
        pytest.param({"command": ["x"], "gpu_milli": 0}, "gpu_milli", id="zero-share"),
        pytest.param({"command": ["x"], "bogus": 1}, "bogus", id="unknown-field"),
        pytest.param({"command": ["x"], "gpus": 16}, "gpus", id="more-gpus-than-any-node"),
        pytest.param({"command": ["x"], "gpus": 1, "gpu_model": "B200"}, "gpu_model", id="model-nowhere"),
    ],
)
def test_bad_submission_names_the_field_and_creates_nothing(api: Any, body: dict[str, Any], field: str) -> None:
    client, user, agent = api
    register(client, agent, "n1", 8)
    r = client.post("/api/v1/jobs", json=body, headers=user)
    assert 400 <= r.status_code < 500
    assert r.json()["error"]["field"] == field
    assert client.get("/api/v1/jobs", params={"all": "true"}, headers=user).json() == []


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-token"),
        pytest.param({"Authorization": "Bearer crl_wrong"}, 401, id="bad-token"),
    ],
)
def test_bad_tokens_are_refused(api: Any, headers: dict[str, str], status: int) -> None:
    client, _, _ = api
    r = client.get("/api/v1/jobs", headers=headers)
    assert r.status_code == status and r.json()["error"]["code"] == "unauthorized"


def test_node_certificate_and_join_token_cannot_use_user_api(api: Any, tmp_path: Path) -> None:
    client, _, agent = api
    assert client.get("/api/v1/jobs", headers=agent("n1")).status_code == 401
    join = (tmp_path / "join-token").read_text().strip()
    assert client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {join}"}).status_code == 401


def test_unknown_job_is_404(api: Any) -> None:
    client, user, _ = api
    for path in ("/api/v1/jobs/999", "/api/v1/jobs/999/logs"):
        r = client.get(path, headers=user)
        assert r.status_code == 404 and "999" in r.json()["error"]["message"]
    assert client.post("/api/v1/jobs/999/cancel", headers=user).status_code == 404


def test_jobs_get_disjoint_gpus_and_the_rest_waits(api: Any) -> None:
    client, user, agent = api
    register(client, agent, "n1", 8)
    ids = [
        client.post("/api/v1/jobs", json={"command": ["sleep", "1"], "gpus": 4}, headers=user).json()["id"]
        for _ in range(3)
    ]

    def states() -> list[dict[str, Any]]:
        return [client.get(f"/api/v1/jobs/{i}", headers=user).json() for i in ids]

    def considered(j: dict[str, Any]) -> bool:  # a pass has seen it (its reason, not the placeholder)
        return j["state"] != "PENDING" or j["pending_reason"] != "waiting for the scheduler"

    jobs = wait_for(
        lambda: (s := states()) and sum(j["state"] == "RUNNING" for j in s) == 2 and all(map(considered, s)) and s
    )
    running = [j for j in jobs if j["state"] == "RUNNING"]
    assert set(running[0]["gpus"]).isdisjoint(running[1]["gpus"])
    waiting = next(j for j in jobs if j["state"] == "PENDING")
    assert waiting["pending_code"] == "capacity", waiting
    assert waiting["pending_reason"].startswith("waiting for 4 free GPUs; none is free"), waiting["pending_reason"]
    # the agent hears about both assignments; the first one's exit frees GPUs for the third job
    reply = client.post("/api/v1/agents/n1/sync", json={"running": [], "exits": []}, headers=agent("n1")).json()
    assert sorted(a["job_id"] for a in reply["assignments"]) == sorted(j["id"] for j in running)
    first = running[0]["id"]
    reply = client.post(
        "/api/v1/agents/n1/sync",
        json={
            "running": [{"job_id": running[1]["id"], "attempt": 1}],
            "exits": [{"job_id": first, "attempt": 1, "exit_code": 0}],
        },
        headers=agent("n1"),
    ).json()
    assert reply["acked_exits"] == [{"job_id": first, "attempt": 1, "rank": 0}]
    third = wait_for(
        lambda: (j := client.get(f"/api/v1/jobs/{waiting['id']}", headers=user).json())["state"] == "RUNNING" and j
    )
    assert sorted(third["gpus"]) == sorted(running[0]["gpus"])
    assert client.get(f"/api/v1/jobs/{first}", headers=user).json()["state"] == "SUCCEEDED"


def test_agent_is_told_to_stop_a_job_the_store_no_longer_runs(api: Any) -> None:
    client, user, agent = api
    register(client, agent, "n1", 1)
    reply = client.post(
        "/api/v1/agents/n1/sync", json={"running": [{"job_id": 4242, "attempt": 1}]}, headers=agent("n1")
    ).json()
    assert reply["cancels"] == [{"job_id": 4242, "attempt": 1, "rank": 0}]


def test_an_old_attempt_never_ends_the_new_one(api: Any) -> None:
    """A job requeued (drain) and placed again on the same node: the first attempt's exit is stale."""
    client, user, agent = api
    register(client, agent, "n1", 2)
    job = client.post("/api/v1/jobs", json={"command": ["sleep", "9"], "gpus": 1}, headers=user).json()["id"]
    wait_for(lambda: client.get(f"/api/v1/jobs/{job}", headers=user).json()["state"] == "RUNNING")
    client.post("/api/v1/agents/n1/sync", json={"running": [{"job_id": job, "attempt": 1}]}, headers=agent("n1"))
    client.post("/api/v1/nodes/n1/drain", headers=user)
    client.post("/api/v1/nodes/n1/uncordon", headers=user)
    second = wait_for(lambda: (j := client.get(f"/api/v1/jobs/{job}", headers=user).json())["attempt"] == 2 and j)
    assert second["state"] == "RUNNING"
    reply = client.post(
        "/api/v1/agents/n1/sync", json={"running": [{"job_id": job, "attempt": 1}]}, headers=agent("n1")
    ).json()
    assert reply["cancels"] == [{"job_id": job, "attempt": 1, "rank": 0}]
    assert [a["attempt"] for a in reply["assignments"]] == [2]
    assert reply["assignments"][0]["env"]["CORRAL_PREEMPTED"] == "1"
    reply = client.post(
        "/api/v1/agents/n1/sync",
        json={"running": [{"job_id": job, "attempt": 2}], "exits": [{"job_id": job, "attempt": 1, "exit_code": 143}]},
        headers=agent("n1"),
    ).json()
    assert reply["acked_exits"] == [{"job_id": job, "attempt": 1, "rank": 0}]
    assert client.get(f"/api/v1/jobs/{job}", headers=user).json()["state"] == "RUNNING"


def test_healthz_and_openapi(api: Any) -> None:
    client, _, _ = api
    assert client.get("/healthz").json()["status"] == "ok"
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/jobs" in paths and "/api/v1/nodes" in paths


def test_a_gang_starts_all_parts_at_once_and_ends_when_all_parts_do(api: Any) -> None:
    client, user, agent = api
    for name in ("n1", "n2", "n3"):
        register(client, agent, name, 2)
    hog = client.post("/api/v1/jobs", json={"command": ["sleep", "9"], "gpus": 2}, headers=user).json()["id"]
    wait_for(lambda: client.get(f"/api/v1/jobs/{hog}", headers=user).json()["state"] == "RUNNING")
    gang = client.post("/api/v1/jobs", json={"command": ["train"], "gpus": 2, "nodes": 3}, headers=user).json()["id"]
    # A pass has considered the gang (it carries that pass's reason): only 2 of the 3 nodes are free, so no part starts.
    got = wait_for(
        lambda: (
            (j := client.get(f"/api/v1/jobs/{gang}", headers=user).json())["pending_reason"]
            != "waiting for the scheduler"
            and j
        )
    )
    assert got["state"] == "PENDING" and got["parts"] == []
    hog_node = client.get(f"/api/v1/jobs/{hog}", headers=user).json()["node"]
    client.post(
        f"/api/v1/agents/{hog_node}/sync",
        json={"exits": [{"job_id": hog, "attempt": 1, "exit_code": 0}]},
        headers=agent(hog_node),
    )
    placed = wait_for(
        lambda: (j := client.get(f"/api/v1/jobs/{gang}", headers=user).json())["state"] == "RUNNING" and j
    )
    assert sorted(p["node"] for p in placed["parts"]) == ["n1", "n2", "n3"]
    envs = {}
    for rank, part in enumerate(placed["parts"]):
        reply = client.post(f"/api/v1/agents/{part['node']}/sync", json={}, headers=agent(part["node"])).json()
        (a,) = reply["assignments"]
        assert (a["rank"], a["gpu_indices"]) == (rank, part["gpus"])
        envs[rank] = a["env"]
    assert {e["CORRAL_NODE_RANK"] for e in envs.values()} == {"0", "1", "2"}
    assert {e["CORRAL_NUM_NODES"] for e in envs.values()} == {"3"}
    assert len({e["CORRAL_MASTER_ADDR"] for e in envs.values()}) == 1
    for rank, part in enumerate(placed["parts"][:2]):  # two parts finish; the job still runs
        client.post(
            f"/api/v1/agents/{part['node']}/sync",
            json={"exits": [{"job_id": gang, "attempt": 1, "rank": rank, "exit_code": 0}]},
            headers=agent(part["node"]),
        )
        assert client.get(f"/api/v1/jobs/{gang}", headers=user).json()["state"] == "RUNNING"
    last = placed["parts"][2]["node"]
    client.post(
        f"/api/v1/agents/{last}/sync",
        json={"running": [{"job_id": gang, "attempt": 1, "rank": 2}]},
        headers=agent(last),
    )
    client.post(
        f"/api/v1/agents/{last}/sync",
        json={"exits": [{"job_id": gang, "attempt": 1, "rank": 2, "exit_code": 0}]},
        headers=agent(last),
    )
    assert client.get(f"/api/v1/jobs/{gang}", headers=user).json()["state"] == "SUCCEEDED"


def test_a_failing_part_fails_the_gang_and_stops_the_others(api: Any) -> None:
    client, user, agent = api
    for name in ("n1", "n2"):
        register(client, agent, name, 1)
    gang = client.post("/api/v1/jobs", json={"command": ["train"], "gpus": 1, "nodes": 2}, headers=user).json()["id"]
    placed = wait_for(
        lambda: (j := client.get(f"/api/v1/jobs/{gang}", headers=user).json())["state"] == "RUNNING" and j
    )
    (n0, n1) = (p["node"] for p in placed["parts"])
    client.post(
        f"/api/v1/agents/{n0}/sync",
        json={"exits": [{"job_id": gang, "attempt": 1, "rank": 0, "exit_code": 3}]},
        headers=agent(n0),
    )
    job = client.get(f"/api/v1/jobs/{gang}", headers=user).json()
    assert job["state"] == "FAILED" and "rank 0" in job["reason"]
    reply = client.post(
        f"/api/v1/agents/{n1}/sync", json={"running": [{"job_id": gang, "attempt": 1, "rank": 1}]}, headers=agent(n1)
    ).json()
    assert reply["cancels"] == [{"job_id": gang, "attempt": 1, "rank": 1}]


def test_gang_larger_than_the_pool_is_refused(api: Any) -> None:
    client, user, agent = api
    register(client, agent, "n1", 8)
    r = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 4, "nodes": 2}, headers=user)
    assert r.status_code == 400 and r.json()["error"]["field"] == "nodes"
