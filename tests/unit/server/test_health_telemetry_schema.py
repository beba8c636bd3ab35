"""The telemetry route's typed schema (corral.api.telemetry): the agent's real batch validates unchanged, a bad field
is refused with 422 naming it, and a GPU failure posted there wakes the node's agent out of its long poll."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.agent.gpu.simulated import SimFault, SimulatedGpuBackend
from corral.agent.metrics import Collector, collect_host_sample
from corral.api.telemetry import MAX_BATCH_GPUS, MAX_EVENT_DETAIL_CHARS, TelemetryBatchIn
from corral.core.telemetry import TelemetryBatch, batch_from_dict, batch_to_dict
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.context import context_of
from corral.server.settings import Settings
from corral.store.sql import open_store


def agent_batch(node: str = "n1", xid_on: int | None = 1) -> TelemetryBatch:
    """A batch as the agent builds it: simulated GPUs (busy, one faulted) and this host's real vitals."""
    backend = SimulatedGpuBackend("sim:2xH100-80GB", node)
    backend.set_load({0: 0.7})
    if xid_on is not None:
        backend.inject_fault(xid_on, SimFault(xid=79, ecc=True))
    collector = Collector(backend, lambda _: None, node=node, host_reader=collect_host_sample)
    return collector.collect_once(time.time())  # the fault's events ride along with the samples


def wire(batch: TelemetryBatch) -> dict[str, Any]:
    """What goes over the network: the agent's dict through JSON."""
    return json.loads(json.dumps(batch_to_dict(batch)))  # type: ignore[no-any-return]


def test_the_agents_real_batch_validates_to_the_same_batch() -> None:
    batch = agent_batch()
    assert batch.events and batch.host is not None and len(batch.gpus) == 2  # the case worth checking
    parsed = TelemetryBatchIn.model_validate(wire(batch)).to_core()
    assert parsed == batch
    assert parsed == batch_from_dict(wire(batch))  # what the server parsed before the schema


def test_unknown_keys_are_ignored_and_long_details_cut() -> None:
    data = wire(agent_batch()) | {"from_a_newer_agent": 1}
    data["events"][0]["detail"] = "x" * 5000
    parsed = TelemetryBatchIn.model_validate(data).to_core()
    assert len(parsed.events[0].detail) == MAX_EVENT_DETAIL_CHARS


def _set(path: str, value: Any) -> Any:
    """A change to the agent's batch at `path` (dots; list indices as numbers); value DELETE removes the key."""

    def change(data: dict[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(data)
        *parents, last = path.split(".")
        target: Any = data
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
        return data

    return change


DELETE = object()
BAD_FIELDS = [  # (case, change to the agent's batch, the field the 422 names)
    ("ts not a number", _set("ts", "soon"), "ts"),
    ("ts a boolean", _set("ts", True), "ts"),
    ("ts in milliseconds", _set("ts", time.time() * 1000), "ts"),
    ("no node", _set("node", DELETE), "node"),
    ("empty node", _set("node", ""), "node"),
    ("negative GPU index", _set("gpus.1.index", -1), "gpus.1.index"),
    ("GPU without uuid", _set("gpus.0.uuid", ""), "gpus.0.uuid"),
    ("power as text", _set("gpus.0.power_w", "300"), "gpus.0.power_w"),
    ("unknown event kind", _set("events.0.kind", "meltdown"), "events.0.kind"),
    ("host without cpu_count", _set("host.cpu_count", DELETE), "host.cpu_count"),
    ("negative byte counter", _set("host.net_rx_bytes", -5), "host.net_rx_bytes"),
    ("negative gpu_count", _set("gpu_count", -1), "gpu_count"),
    ("too many GPU samples", lambda d: d | {"gpus": d["gpus"] * (MAX_BATCH_GPUS // 2 + 1)}, "gpus"),
    ("gpus not a list", _set("gpus", {"0": {}}), "gpus"),
]


Api = tuple[TestClient, dict[str, str], dict[str, str]]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(
        data_dir=tmp_path,
        database_url=url,
        schedule_interval_s=0.05,
        alert_interval_s=3600,
        retry_backoff_s=0,
        long_poll_s=30,
    )
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        agent = NodeAgents(client)("n1")
        gpus = [{"index": i, "uuid": f"GPU-n1-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)]
        assert (
            client.post(
                "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=agent
            ).status_code
            == 200
        )
        yield client, agent, {"Authorization": f"Bearer {creds.admin_token}"}


@pytest.mark.parametrize(("change", "field"), [pytest.param(c, f, id=name) for name, c, f in BAD_FIELDS])
def test_a_bad_field_is_refused_with_422_naming_it(api: Api, change: Any, field: str) -> None:
    client, agent, _ = api
    r = client.post("/api/v1/agents/n1/telemetry", json=change(wire(agent_batch())), headers=agent)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid" and error["field"] == field


def test_not_json_is_refused(api: Api) -> None:
    client, agent, _ = api
    r = client.post(
        "/api/v1/agents/n1/telemetry", content=b"{not json", headers=agent | {"Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid"


def test_the_agents_real_batch_is_accepted(api: Api) -> None:
    client, agent, _ = api
    r = client.post("/api/v1/agents/n1/telemetry", json=wire(agent_batch(xid_on=None)), headers=agent)
    assert r.status_code == 200 and r.json()["stored"] > 0 and r.json()["transitions"] == 0


def test_a_failed_gpu_wakes_the_agents_long_poll_with_the_cancel(api: Api) -> None:
    client, agent, admin = api
    job = client.post("/api/v1/jobs", json={"command": ["x"], "gpus": 2}, headers=admin).json()["id"]
    deadline = time.monotonic() + 10
    while client.get(f"/api/v1/jobs/{job}", headers=admin).json()["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.02)
    gpus_of_job = client.get(f"/api/v1/jobs/{job}", headers=admin).json()["gpus"]
    reply: dict[str, Any] = {}

    def long_poll() -> None:  # the agent runs the job and waits for news (30 s unless woken)
        r = client.post(
            "/api/v1/agents/n1/sync", json={"running": [{"job_id": job, "attempt": 1}], "wait_s": 30}, headers=agent
        )
        reply.update(r.json())

    poll = threading.Thread(target=long_poll, daemon=True)
    poll.start()
    notifier = context_of(client.app).notifier
    while not any(node == "n1" for node, _ in notifier._events):  # the poll is waiting (nothing was due at once)
        assert time.monotonic() < deadline + 10, "the long poll never started waiting"
        time.sleep(0.01)
    failed = wire(agent_batch(xid_on=gpus_of_job[0]))
    assert client.post("/api/v1/agents/n1/telemetry", json=failed, headers=agent).json()["transitions"] >= 1
    poll.join(10)  # the poll holds 30 s unless woken
    assert not poll.is_alive(), "the agent was not woken: it would hear of the failure only when its poll ran out"
    assert [(c["job_id"], c["attempt"]) for c in reply["cancels"]] == [(job, 1)]
