"""Operating the pool through the API: cordon, drain, GPU disable/enable, events and the audit trail."""

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
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        admin = {"Authorization": f"Bearer {creds.admin_token}"}
        agent = NodeAgents(client)("n1")
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)]
        assert (
            client.post(
                "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=agent
            ).status_code
            == 200
        )
        yield client, admin, agent


def state_of(client: TestClient, admin: dict[str, str], job_id: int) -> dict[str, Any]:
    return client.get(f"/api/v1/jobs/{job_id}", headers=admin).json()  # type: ignore[no-any-return]


def settle(client: TestClient, admin: dict[str, str], job_id: int, want: str, timeout_s: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = state_of(client, admin, job_id)
        if job["state"] == want:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never {want}: {state_of(client, admin, job_id)}")


def held_back(client: TestClient, admin: dict[str, str], job_id: int, timeout_s: float = 10) -> dict[str, Any]:
    """The job once a scheduling pass has considered it and left it PENDING (it then carries that pass's reason):
    "still PENDING" is only asserted after the scheduler has had its chance."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = state_of(client, admin, job_id)
        assert job["state"] == "PENDING", job
        if job["pending_reason"] != "waiting for the scheduler":
            return job
        time.sleep(0.05)
    raise AssertionError(f"no scheduling pass considered job {job_id}: {state_of(client, admin, job_id)}")


def submit(client: TestClient, admin: dict[str, str], gpus: int = 1) -> int:
    return int(client.post("/api/v1/jobs", json={"command": ["true"], "gpus": gpus}, headers=admin).json()["id"])


def test_cordoned_node_takes_no_new_work_until_uncordoned(api: Any) -> None:
    client, admin, _ = api
    assert client.post("/api/v1/nodes/n1/cordon", headers=admin).json()["cordoned"] is True
    job = submit(client, admin)
    held_back(client, admin, job)
    client.post("/api/v1/nodes/n1/uncordon", headers=admin)
    settle(client, admin, job, "RUNNING")
    kinds = [e["kind"] for e in client.get("/api/v1/nodes/n1/events", headers=admin).json()]
    assert kinds[:2] == ["uncordoned", "cordoned"]


def test_drain_requeues_running_jobs(api: Any) -> None:
    client, admin, _ = api
    job = submit(client, admin, gpus=2)
    settle(client, admin, job, "RUNNING")
    node = client.post("/api/v1/nodes/n1/drain", headers=admin).json()
    assert node["cordoned"] is True
    got = state_of(client, admin, job)
    assert got["state"] == "PENDING" and got["node"] is None


def test_disabled_gpu_leaves_the_pool_until_enabled(api: Any) -> None:
    client, admin, _ = api
    gpus = client.post("/api/v1/gpus/n1/0/disable", headers=admin).json()
    assert [(g["index"], g["health"], g["healthy"]) for g in gpus] == [(0, "DISABLED", False), (1, "HEALTHY", True)]
    job = submit(client, admin, gpus=2)
    held_back(client, admin, job)
    client.post("/api/v1/gpus/n1/0/enable", headers=admin)
    settle(client, admin, job, "RUNNING")
    events = client.get("/api/v1/gpus/n1/0/events", headers=admin).json()
    assert [e["kind"] for e in events] == ["enabled", "disabled"]


def test_admin_actions_are_audited_and_need_admin(api: Any) -> None:
    client, admin, _ = api
    client.post("/api/v1/tenants", json={"name": "vision"}, headers=admin)
    client.put("/api/v1/tenants/vision/quotas", json={"guaranteed_gpus": 2}, headers=admin)
    client.post("/api/v1/users", json={"name": "alice", "tenant": "vision", "password": "alice-pass-1"}, headers=admin)
    client.post("/api/v1/nodes/n1/cordon", headers=admin)
    trail = client.get("/api/v1/audit", headers=admin).json()
    assert [(a["actor"], a["action"], a["target"]) for a in trail] == [
        ("admin", "node.cordon", "n1"),
        ("admin", "user.create", "alice"),
        ("admin", "quota.set", "vision/*"),
        ("admin", "tenant.create", "vision"),
    ]
    token = client.post("/api/v1/login", json={"username": "alice", "password": "alice-pass-1"}).json()["token"]
    alice = {"Authorization": f"Bearer {token}"}
    for path in ("/api/v1/nodes/n1/uncordon", "/api/v1/gpus/n1/0/disable"):
        assert client.post(path, headers=alice).status_code == 403
    assert client.get("/api/v1/audit", headers=alice).status_code == 403


def test_unknown_node_or_gpu_is_404(api: Any) -> None:
    client, admin, _ = api
    assert client.post("/api/v1/nodes/ghost/cordon", headers=admin).status_code == 404
    assert client.post("/api/v1/gpus/n1/7/disable", headers=admin).status_code == 404
