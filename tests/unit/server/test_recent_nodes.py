"""Submissions check a job's fit against a node list read at most every second (RecentNodes): a job is never refused
on that copy. One that fits only a node that joined a moment ago is accepted; one that fits no node is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_certs import NodeAgents
from pool_api import TenantApi, open_api

from corral.core.resources import GpuInfo
from corral.server.services.jobs import RecentNodes
from corral.store.sql import open_store


def register(api: TenantApi, name: str, gpus: int) -> None:
    body = [{"index": i, "uuid": f"{name}-GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(gpus)]
    r = api.client.post(
        "/api/v1/agents/register",
        json={"name": name, "backend": "simulated", "gpus": body},
        headers=NodeAgents(api.client)(name),
    )
    assert r.status_code == 200, r.text


def test_a_job_that_fits_only_a_node_that_just_joined_is_accepted(tmp_path: Path) -> None:
    with open_api(TenantApi, f"sqlite:///{tmp_path / 'c.db'}", tmp_path) as api:
        user = api.user("ada", "member", "vision")
        assert api.submit(user, gpus=1).status_code == 201  # reads the nodes: n1 with 2 GPUs
        register(api, "big", 8)  # joins within the second the copy is kept
        r = api.submit(user, gpus=8)
        assert r.status_code == 201, r.text
        refused = api.submit(user, gpus=9)
        assert refused.status_code == 400
        assert refused.json()["error"]["field"] == "gpus" and "8" in refused.json()["error"]["message"]


class CountingNodes:
    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        self.reads = 0

    def list_nodes(self) -> Any:
        self.reads += 1
        return self.store.list_nodes()


def test_the_copy_is_read_again_once_it_is_older_than_its_age(tmp_path: Path) -> None:
    nodes = CountingNodes(f"sqlite:///{tmp_path / 'c.db'}")
    now = [100.0]
    recent = RecentNodes(nodes, max_age_s=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert recent.get() == ([], True)
    nodes.store.upsert_node("n1", "n1", "simulated", 1000, 1024, {}, [GpuInfo(0, "u0", "H100", 1)], _t())
    now[0] += 0.5
    assert recent.get() == ([], False) and nodes.reads == 1  # within its age: the copy
    now[0] += 0.6
    listed, fresh = recent.get()
    assert fresh and [n.name for n in listed] == ["n1"] and nodes.reads == 2
    assert [n.name for n in recent.fresh()] == ["n1"] and nodes.reads == 3
    nodes.store.close()


def _t() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)
