"""A job's log is capped per run (CORRAL_JOB_LOG_MAX_MB): the server tells each agent the limit with the run, and
stores no more than it (plus a little for the agent's notices) whatever an agent sends - an older agent, or a
hostile one - answering as if it had written the rest, so the agent's shipper moves on to the run's exit report."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeCertApp, cert_headers

from corral.agent.identity import new_key_and_csr
from corral.server.app import create_agent_app, create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.logs import LOG_SLACK_BYTES, LogStore
from corral.server.settings import Settings
from corral.store.sql import open_store

MB = 1 << 20
NOTICE = b"corral: this run's log reached the server's limit of 1 MB; the server dropped the rest\n"


class Cluster:
    def __init__(self, api: TestClient, agents: TestClient, admin: dict[str, str], data_dir: Path) -> None:
        self.api, self.agents, self.admin, self.data_dir = api, agents, admin, data_dir
        token = api.post("/api/v1/join-tokens", json={"ttl_s": 3600, "uses": 1}, headers=admin).json()["token"]
        _, csr = new_key_and_csr("n1")
        joined = agents.post("/api/v1/join", json={"token": token, "node": "n1", "csr": csr})
        assert joined.status_code == 200, joined.text
        self.n1 = cert_headers(joined.json()["cert"])
        gpus = [{"index": 0, "uuid": "GPU-n1-0", "model": "H100-80GB", "memory_mib": 81920}]
        body = {"name": "n1", "backend": "simulated", "address": "10.0.0.1", "gpus": gpus}
        assert agents.post("/api/v1/agents/register", json=body, headers=self.n1).status_code == 200

    def running_job(self) -> int:
        job = int(self.api.post("/api/v1/jobs", json={"command": ["yes"], "gpus": 1}, headers=self.admin).json()["id"])
        deadline = time.monotonic() + 10
        while self.api.get(f"/api/v1/jobs/{job}", headers=self.admin).json()["state"] != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        return job

    def upload(self, job: int, offset: int, data: bytes, **params: int) -> Any:
        return self.agents.post(
            f"/api/v1/agents/n1/jobs/{job}/logs", params={"offset": offset, **params}, content=data, headers=self.n1
        )


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1, job_log_max_mb=1)
    app = create_app(settings, store)
    with TestClient(NodeCertApp(app)) as api, TestClient(NodeCertApp(create_agent_app(app))) as agents:
        yield Cluster(api, agents, {"Authorization": f"Bearer {creds.admin_token}"}, tmp_path)


def test_the_setting_defaults_to_1_gib_and_is_bounded() -> None:
    assert Settings().job_log_max_mb == 1024 and Settings().job_log_max_bytes == 1 << 30
    for bad in (0, 1_048_577):
        with pytest.raises(ValueError):
            Settings(job_log_max_mb=bad)


def test_each_assignment_carries_the_servers_log_limit(cluster: Cluster) -> None:
    job = cluster.running_job()
    reply = cluster.agents.post("/api/v1/agents/n1/sync", json={"exits": [], "running": []}, headers=cluster.n1)
    assert reply.status_code == 200, reply.text
    [assignment] = [a for a in reply.json()["assignments"] if a["job_id"] == job]
    assert assignment["log_max_bytes"] == MB


def test_a_hostile_agent_cannot_fill_the_servers_disk_with_a_jobs_log(cluster: Cluster) -> None:
    job = cluster.running_job()
    stored = cluster.data_dir / "logs" / f"{job}.1.log"
    offset = 0
    for _ in range(8):  # 8 MB in 1 MB chunks, as an agent ships them: every one answered as written
        r = cluster.upload(job, offset, b"x" * MB)
        assert r.status_code == 200, r.text
        assert r.json() == {"size": offset + MB}
        offset += MB
    # past the cap, any offset is taken (the sender moves on), a probe learns what is stored
    assert cluster.upload(job, 50 * MB, b"y" * MB).json() == {"size": 51 * MB}
    assert cluster.upload(job, 0, b"").json() == {"size": stored.stat().st_size}
    assert stored.stat().st_size <= MB + LOG_SLACK_BYTES
    log = stored.read_bytes()
    assert log.startswith(b"x" * MB) and log.endswith(b"\n" + NOTICE) and log.count(NOTICE) == 1
    assert set(log[: -len(NOTICE) - 1]) == {ord("x")}  # the agent's own notices fit in the slack


def test_a_log_under_the_limit_and_its_gaps_are_as_before(tmp_path: Path) -> None:
    logs = LogStore(tmp_path / "logs", max_run_bytes=MB)
    assert logs.append(1, 0, b"a" * 1000) == 1000
    assert logs.append(1, 500, b"a" * 1000) == 1500  # a retried upload: what we hold is skipped
    with pytest.raises(Exception, match="offset mismatch"):
        logs.append(1, 2000, b"gap")
    assert logs.read(1, 0) == b"a" * 1500


def test_the_agents_notices_past_the_limit_are_kept_within_the_slack(tmp_path: Path) -> None:
    logs = LogStore(tmp_path / "logs", max_run_bytes=MB)
    agent_log = b"z" * MB + b"\ncorral: this job's log reached its limit of 1 MB; further output is dropped\n"
    assert logs.append(1, 0, agent_log) == len(agent_log)
    assert logs.read(1, 0, limit=2 * MB) == agent_log  # all kept: no server notice
