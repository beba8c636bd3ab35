"""An agent's sync is the request a fleet sends most (every agent, every few seconds): it reads the node, its jobs
and what to stage in two transactions (each is a pool checkout and, on PostgreSQL, a BEGIN and a COMMIT, each a
round trip) when it has nothing new to hand over, idle or running jobs, plus on PostgreSQL (where several replicas
may share the database) the write of the report's order; its telemetry batch in one plus the write. A count, not a
time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp
from sqlalchemy import event

import corral.server.services.agents as agents
from corral.core.telemetry import GpuSample, TelemetryBatch, batch_to_dict
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store


class Counted:
    def __init__(self, client: TestClient, store: SqlStore, admin: dict[str, str], headers: dict[str, str]) -> None:
        self.c, self.store, self.admin, self.headers = client, store, admin, headers
        self.checkouts: list[str] = []
        # the request's own work runs on anyio's worker threads; the background loops on theirs
        event.listen(store.engine.pool, "checkout", lambda *_: self.checkouts.append(threading.current_thread().name))

    def requests_transactions(self, send: object) -> int:
        self.checkouts.clear()
        send()  # type: ignore[operator]
        return sum(1 for name in self.checkouts if name.startswith("AnyIO worker thread"))


@pytest.fixture
def counted(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counted]:
    # the heartbeat is written once a while (a write, counted apart): not during this test
    monkeypatch.setattr(agents, "HEARTBEAT_WRITE_EVERY", timedelta(hours=1))
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1, alert_interval_s=3600)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        headers = NodeAgents(client)("n1")
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)]
        body = {"name": "n1", "backend": "simulated", "gpus": gpus}
        assert client.post("/api/v1/agents/register", json=body, headers=headers).status_code == 200
        sync = {"running": [], "boot": "b", "seq": 0}  # its first heartbeat written
        assert client.post("/api/v1/agents/n1/sync", json=sync, headers=headers).status_code == 200
        yield Counted(client, store, {"Authorization": f"Bearer {creds.admin_token}"}, headers)
    store.close()


def test_a_sync_with_nothing_new_reads_in_two_transactions_idle_or_busy(counted: Counted) -> None:
    c = counted
    each = 2 if c.store.is_sqlite else 3  # PostgreSQL: advance_report_order too
    replies: list[dict[str, object]] = []

    def sync(seq: int, running: list[int]) -> None:
        body = {"running": [{"job_id": j, "attempt": 1} for j in running], "boot": "b", "seq": seq}
        r = c.c.post("/api/v1/agents/n1/sync", json=body, headers=c.headers)
        assert r.status_code == 200, r.text
        replies.append(r.json())

    assert c.requests_transactions(lambda: sync(1, [])) == each  # an idle node
    job = int(c.c.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1}, headers=c.admin).json()["id"])
    deadline = time.monotonic() + 10
    while c.c.get(f"/api/v1/jobs/{job}", headers=c.admin).json()["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    sync(2, [])  # handed a run (which reads its owner's identity too)
    assert [a["job_id"] for a in replies[-1]["assignments"]] == [job]  # type: ignore[index, union-attr]
    sync(3, [job])  # it runs: delivered (a write)
    assert c.requests_transactions(lambda: sync(4, [job])) == each  # steady: nothing new
    assert replies[-1]["assignments"] == [] and replies[-1]["cancels"] == []


def test_a_telemetry_batch_reads_in_one_transaction_and_writes_in_one(counted: Counted) -> None:
    c = counted
    now = time.time()
    gpus = tuple(
        GpuSample(
            ts=now,
            index=i,
            uuid=f"GPU-{i}",
            utilization_percent=50.0,
            memory_used_mib=1,
            memory_total_mib=81920,
            power_w=100,
            temperature_c=40,
        )
        for i in range(2)
    )
    batch = batch_to_dict(TelemetryBatch(node="n1", ts=now, host=None, gpus=gpus, events=(), gpu_count=2))

    def send() -> None:
        r = c.c.post("/api/v1/agents/n1/telemetry", json=batch, headers=c.headers)
        assert r.status_code == 200, r.text
        assert r.json()["stored"] > 0

    assert c.requests_transactions(send) == 2


def test_the_sync_that_hands_a_web_ui_run_over_asks_its_agent_to_watch_the_port(counted: Counted) -> None:
    """The checks come from the node's jobs as they are after the hand-over, which gave the run its port."""
    c = counted
    r = c.c.post("/api/v1/jobs", json={"command": ["serve"], "gpus": 1, "web_ui": True}, headers=c.admin)
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    deadline = time.monotonic() + 10
    while c.c.get(f"/api/v1/jobs/{job}", headers=c.admin).json()["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    body = {"running": [], "boot": "b", "seq": 1}
    reply = c.c.post("/api/v1/agents/n1/sync", json=body, headers=c.headers).json()
    [handed] = [a for a in reply["assignments"] if a["job_id"] == job]
    port = int(handed["env"]["PORT"])
    assert [(w["job_id"], w["port"]) for w in reply["web_ports"]] == [(job, port)]
