"""Telemetry through the API in-process: batches stored as series, health taking GPUs out and requeueing
their jobs, job usage summaries, rollups and retention, alert rules, bad batches refused. Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, HostSample, TelemetryBatch, batch_to_dict
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store


class Cluster:
    def __init__(self, client: TestClient, admin: str, join: dict[str, str]) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin}"}
        self.agent = join  # headers presenting node n1's certificate

    def get(self, path: str, **kw: Any) -> Any:
        return self.client.get(path, headers=self.admin, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return self.client.post(path, headers=self.admin, **kw)

    def send(
        self, node: str, ts: float, util: dict[int, float], events: tuple[GpuEvent, ...] = (), net_rx: int = 0
    ) -> Any:
        host = HostSample(
            ts=ts,
            cpu_percent=12.5,
            cpu_count=8,
            load_1m=1.0,
            load_5m=1.0,
            load_15m=1.0,
            memory_used_mib=1024,
            memory_total_mib=4096,
            disk_used_bytes=10,
            disk_total_bytes=100,
            disk_read_bytes=0,
            disk_write_bytes=0,
            net_rx_bytes=net_rx,
            net_tx_bytes=0,
        )
        gpus = tuple(
            GpuSample(
                ts=ts,
                index=i,
                uuid=f"GPU-{node}-{i}",
                utilization_percent=u,
                memory_used_mib=100,
                memory_total_mib=81920,
                power_w=100 + u,
                temperature_c=40,
            )
            for i, u in util.items()
        )
        batch = TelemetryBatch(node=node, ts=ts, host=host, gpus=gpus, events=events, gpu_count=len(util))
        return self.client.post(f"/api/v1/agents/{node}/telemetry", json=batch_to_dict(batch), headers=self.agent)


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        schedule_interval_s=0.1,
        alert_interval_s=3600,
        retry_backoff_s=0,
        health_recovery_checks=2,
    )
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        c = Cluster(client, creds.admin_token, NodeAgents(client)("n1"))
        gpus = [{"index": i, "uuid": f"GPU-n1-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)]
        assert (
            client.post(
                "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=c.agent
            ).status_code
            == 200
        )
        yield c


def wait_state(c: Cluster, job: int, state: str, attempt: int | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        j = c.get(f"/api/v1/jobs/{job}").json()
        if j["state"] == state and (attempt is None or j["attempt"] == attempt):
            return j  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(c.get(f"/api/v1/jobs/{job}").json())


def test_series_by_node_gpu_and_job(cluster: Cluster) -> None:
    job = cluster.post("/api/v1/jobs", json={"command": ["x"], "gpus": 1}).json()["id"]
    held = wait_state(cluster, job, "RUNNING")["gpus"][0]
    t0 = time.time() - 30
    for k in range(3):
        assert cluster.send("n1", t0 + k, {0: 10.0 * k, 1: 50.0}, net_rx=1000 * k).status_code == 200
    r = cluster.get(
        "/api/v1/metrics/series", params={"metric": "gpu_utilization_percent", "node": "n1", "start": t0 - 1}
    ).json()
    assert [s["labels"] for s in r["series"]] == [{"node": "n1", "gpu": 0}, {"node": "n1", "gpu": 1}]
    assert [v for _, v in r["series"][0]["points"]] == [0.0, 10.0, 20.0]
    by_job = cluster.get(
        "/api/v1/metrics/series", params={"metric": "gpu_util_pct", "job": job, "start": t0 - 1}
    ).json()
    assert [s["labels"]["gpu"] for s in by_job["series"]] == [held]
    rate = cluster.get("/api/v1/metrics/series", params={"metric": "net_rx_bps", "start": t0 - 1}).json()
    assert [v for _, v in rate["series"][0]["points"]] == [1000.0, 1000.0]
    latest = cluster.get("/api/v1/metrics/latest", params={"node": "n1"}).json()
    assert [g["util_pct"] for g in latest["gpus"]] == [20.0, 50.0] and latest["host"]["host_cpu_percent"] == 12.5
    usage = cluster.get(f"/api/v1/jobs/{job}/usage").json()
    assert usage["samples"] == 3 and usage["utilization_max_pct"] == (20.0 if held == 0 else 50.0)
    for group in ("tenant", "gpu_model"):  # the report reads the same summary (JSON in the database)
        (row,) = cluster.get("/api/v1/reports/usage", params={"group_by": group}).json()
        assert row["avg_util_pct"] == round(usage["utilization_avg_pct"], 2) and row["jobs"] == 1


def test_unknown_metric_and_bad_batches_are_refused(cluster: Cluster) -> None:
    r = cluster.get("/api/v1/metrics/series", params={"metric": "bogus"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "metric"
    r = cluster.client.post("/api/v1/agents/n1/telemetry", json={"node": "n1", "ts": "soon"}, headers=cluster.agent)
    assert r.status_code == 422 and r.json()["error"]["field"] == "ts"  # the typed schema (api/telemetry.py)
    r = cluster.send("n2", time.time(), {0: 1.0})
    assert r.status_code == 403  # n1's certificate cannot speak for another node (known or not)


def test_fatal_xid_takes_gpu_out_and_requeues_its_job(cluster: Cluster) -> None:
    job = cluster.post("/api/v1/jobs", json={"command": ["x"], "gpus": 2}).json()["id"]
    wait_state(cluster, job, "RUNNING")
    now = time.time()
    xid = GpuEvent(ts=now, kind=GpuEventKind.XID, gpu_index=1, detail="fell off the bus", xid=79)
    assert cluster.send("n1", now, {0: 90.0, 1: 90.0}, events=(xid,)).json()["transitions"] == 1
    gpus = cluster.get("/api/v1/gpus").json()
    assert [(g["index"], g["health"]) for g in gpus] == [(0, "HEALTHY"), (1, "UNHEALTHY")]
    requeued = wait_state(cluster, job, "PENDING")
    assert "GPU 1 on n1 failed" in requeued["pending_reason"] or "GPU 1 on n1 failed" in requeued["reason"]
    # two clean checks bring the GPU back; the job runs again as its second attempt
    for k in (1, 2):
        cluster.send("n1", now + k, {0: 0.0, 1: 0.0})
    assert wait_state(cluster, job, "RUNNING", attempt=2)["attempt"] == 2
    kinds = [e["kind"] for e in cluster.get("/api/v1/gpus/n1/1/events").json()]
    assert kinds == ["gpu_healthy", "gpu_unhealthy"]


def test_non_fatal_xid_keeps_gpu(cluster: Cluster) -> None:
    now = time.time()
    event = GpuEvent(ts=now, kind=GpuEventKind.XID, gpu_index=0, detail="app error", xid=13)
    assert cluster.send("n1", now, {0: 1.0, 1: 1.0}, events=(event,)).json()["transitions"] == 0
    assert all(g["health"] == "HEALTHY" for g in cluster.get("/api/v1/gpus").json())


def test_retries_run_out(database_url: str, tmp_path: Path) -> None:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        schedule_interval_s=0.1,
        alert_interval_s=3600,
        retry_backoff_s=0,
        health_recovery_checks=1,
    )
    from corral.store.records import JobSpec

    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        c = Cluster(client, creds.admin_token, NodeAgents(client)("n1"))
        client.post(
            "/api/v1/agents/register",
            json={
                "name": "n1",
                "backend": "simulated",
                "gpus": [{"index": 0, "uuid": "GPU-n1-0", "model": "H100-80GB", "memory_mib": 81920}],
            },
            headers=c.agent,
        )
        tenant = store.find_tenant("default")
        job = store.create_job(
            JobSpec(command=("x",), gpus=1, max_retries=1, tenant_id=tenant.id if tenant else None),
            __import__("datetime").datetime.now(__import__("datetime").UTC),
        ).id
        t = time.time()
        for attempt in (1, 2):
            wait_state(c, job, "RUNNING", attempt=attempt)
            xid = GpuEvent(ts=t, kind=GpuEventKind.XID, gpu_index=0, xid=48)
            c.send("n1", t, {0: 5.0}, events=(xid,))
            c.send("n1", t + 1, {0: 5.0})  # recovers (1 clean check)
            t += 2
        final = wait_state(c, job, "FAILED")
        assert "no retries left" in final["reason"]


def test_retention_rolls_up_then_prunes(cluster: Cluster) -> None:
    store = cluster.client.app.state.ctx.store  # type: ignore[attr-defined]
    alerting = cluster.client.app.state.ctx.alerting  # type: ignore[attr-defined]
    old = time.time() - 2 * 86400  # two days ago: past raw retention, inside rollup retention
    old -= old % 60  # the three points share one 1-minute bucket
    for k in range(3):
        cluster.send("n1", old + 10 * k, {0: 10.0 * (k + 1), 1: 0.0})
    alerting.apply_retention(time.time())
    assert store.query_points("gpu_utilization_percent", old - 60, old + 60) == {}
    rolled = store.query_rollups("gpu_utilization_percent", old - 120, old + 120, node="n1", gpu=0)
    assert [v for _, v in rolled[("n1", 0)]] == [20.0]
    r = cluster.get(
        "/api/v1/metrics/series",
        params={"metric": "gpu_utilization_percent", "gpu": 0, "start": old - 120, "end": old + 120},
    ).json()
    assert r["resolution"] == "rollup" and r["series"][0]["points"][0][1] == 20.0


def test_alert_rules_api_and_evaluation(cluster: Cluster) -> None:
    bad = cluster.post("/api/v1/alert-rules", json={"name": "hot", "metric": "nope", "threshold": 1})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "metric"
    rule = cluster.post(
        "/api/v1/alert-rules",
        json={
            "name": "busy",
            "metric": "gpu_utilization_percent",
            "op": ">",
            "threshold": 80,
            "selector": {"node": "n1"},
            "severity": "info",
        },
    )
    assert rule.status_code == 201, rule.text
    assert (
        cluster.post("/api/v1/alert-rules", json={"name": "busy", "metric": "gpu_power_w", "threshold": 1}).status_code
        == 409
    )
    cluster.send("n1", time.time(), {0: 95.0, 1: 10.0})
    cluster.client.app.state.ctx.alerting.evaluate(time.time())  # type: ignore[attr-defined]
    firing = cluster.get("/api/v1/alerts", params={"state": "firing"}).json()
    assert [(a["rule"], a["labels"]["gpu"]) for a in firing] == [("busy", "0")]
    silence = cluster.post("/api/v1/silences", json={"matchers": {"alertname": "busy"}, "duration_s": 600})
    assert silence.status_code == 201
    assert [s["id"] for s in cluster.get("/api/v1/silences").json()] == [silence.json()["id"]]
    assert cluster.client.delete(f"/api/v1/alert-rules/{rule.json()['id']}", headers=cluster.admin).status_code == 204
    assert "busy" not in {r["name"] for r in cluster.get("/api/v1/alert-rules").json()}


def test_fleet_aggregate_is_one_series(cluster: Cluster) -> None:
    t0 = time.time() - 120
    t0 -= t0 % 60
    cluster.send("n1", t0 + 1, {0: 10.0, 1: 30.0})
    cluster.send("n1", t0 + 2, {0: 20.0, 1: 40.0})
    r = cluster.get(
        "/api/v1/metrics/series", params={"metric": "gpu_utilization_percent", "agg": "avg", "step_s": 60, "start": t0}
    ).json()
    assert r["series"] == [{"labels": {"agg": "avg"}, "points": [[t0, 25.0]]}]
    top = cluster.get(
        "/api/v1/metrics/series", params={"metric": "gpu_utilization_percent", "agg": "max", "step_s": 60, "start": t0}
    ).json()
    assert top["series"][0]["points"] == [[t0, 40.0]]
    bad = cluster.get("/api/v1/metrics/series", params={"metric": "gpu_utilization_percent", "agg": "median"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "agg"


def test_a_time_without_a_zone_means_utc_whatever_the_servers_zone(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = time.time() - 30
    assert cluster.send("n1", t0, {0: 10.0, 1: 50.0}).status_code == 200
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive = datetime.fromtimestamp(t0 - 1, UTC).replace(tzinfo=None).isoformat()
        r = cluster.get("/api/v1/metrics/series", params={"metric": "gpu_util_pct", "node": "n1", "start": naive})
        assert [[v for _, v in s["points"]] for s in r.json()["series"]] == [[10.0], [50.0]]
        until = datetime.fromtimestamp(t0 + 3600, UTC).replace(tzinfo=None).isoformat()
        silence = cluster.post("/api/v1/silences", json={"matchers": {"alertname": "busy"}, "until": until})
        assert silence.status_code == 201, silence.text
        assert abs(silence.json()["ends_at"] - (t0 + 3600)) < 1  # Unix seconds
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
