"""GET /api/v1/nodes keeps each node's JSON while the node is the same (services/inventory.NodePages): the list must
read exactly as the NodeOut models of its nodes serialise (what the API answered before it), also after a node's
heartbeat, state, GPUs in use or cached images changed, and a member must never get the images an admin's list
showed (an image's name may be a tenant's secret)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from corral.api.schemas import NodeOut
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.inventory import node_out
from corral.server.settings import Settings
from corral.store.records import JobSpec
from corral.store.snapshot import compute_usage_from_holders
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Setup = tuple[TestClient, SqlStore, dict[str, str], dict[str, str]]


@pytest.fixture
def setup(database_url: str, tmp_path: Path) -> Iterator[Setup]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        admin = {"Authorization": f"Bearer {creds.admin_token}"}
        tenant = client.post("/api/v1/tenants", json={"name": "vision"}, headers=admin)
        assert tenant.status_code < 300, tenant.text
        body = {"name": "ann", "role": "member", "tenant": "vision", "password": "correct horse"}
        made = client.post("/api/v1/users", json=body, headers=admin)
        assert made.status_code == 201, made.text
        login = client.post("/api/v1/login", json={"username": "ann", "password": "correct horse"})
        assert login.status_code == 200, login.text
        yield client, store, admin, {"Authorization": f"Bearer {login.json()['token']}"}
    store.close()


def _list(client: TestClient, store: SqlStore, headers: dict[str, str], admin: bool) -> list[dict[str, Any]]:
    r = client.get("/api/v1/nodes", headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    usage = compute_usage_from_holders(store.list_gpu_holders())
    models = [node_out(n, usage, admin) for n in store.list_nodes()]
    assert r.json() == json.loads(TypeAdapter(list[NodeOut]).dump_json(models, by_alias=True))
    return list(r.json())


def test_a_node_list_reads_as_its_nodes_models_whatever_changed(setup: Setup) -> None:
    client, store, admin, member = setup
    for name in ("n1", "n2"):
        gpus = [GpuInfo(i, f"{name}-{i}", "H100-80GB", 81920) for i in range(2)]
        store.upsert_node(name, name, "simulated", 8000, 65536, {}, gpus, T0)
    store.set_node_images("n1", ["vision/secret-model:3"])
    first = _list(client, store, admin, True)
    assert first[0]["images"] == ["vision/secret-model:3"] and _list(client, store, admin, True) == first
    assert [n["images"] for n in _list(client, store, member, False)] == [None, None]  # after the admin's

    store.touch_node("n2", T0 + timedelta(seconds=5))  # a heartbeat
    job = store.create_job(JobSpec(command=("x",), gpus=1), T0).id
    assert store.assign_job(job, "n1", [0], T0)  # a GPU in use
    after = {n["name"]: n for n in _list(client, store, admin, True)}
    assert after["n1"]["gpus_free"] == 1 and after["n2"]["last_heartbeat_at"] != first[1]["last_heartbeat_at"]
    assert store.finish_job(job, JobState.SUCCEEDED, 0, "", T0)  # the GPU free again, the node itself unchanged
    assert _list(client, store, admin, True)[0]["gpus_free"] == 2
    store.set_node_images("n1", [])
    assert _list(client, store, admin, True)[0]["images"] == []
    assert [n["images"] for n in _list(client, store, member, False)] == [None, None]
