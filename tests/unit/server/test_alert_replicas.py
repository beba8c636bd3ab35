"""Alerts with several server replicas on one database: the leader's rules see every node's latest telemetry, also
a node whose agent sends to another replica (read from the stored samples), and a replica that does not lead
answers GET /alerts with the alerts the leader saved at its last round, filtered by the caller's tenant as the
leader would. One server (SQLite, `corral up`) reads memory only and saves nothing. Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.alerts.evaluator import AlertState
from corral.alerts.rules import parse_rule, rule_to_dict
from corral.core.models import JobSpec
from corral.core.resources import GpuInfo
from corral.core.telemetry import GpuSample, TelemetryBatch
from corral.server.app import create_app
from corral.server.auth import Principal
from corral.server.bootstrap import ensure_credentials
from corral.server.health import TelemetryService
from corral.server.services.alerting import OTHERS_MARGIN_S, STALE_AFTER_S, AlertService, alert_out, is_same_server
from corral.server.settings import Settings
from corral.store.records import Replica as ReplicaRow
from corral.store.records import TokenRecord
from corral.store.sql import SqlStore, open_store
from corral.store.telemetry import HOST_GPU, Point

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _batch(node: str, temperature: float, ts: float, gpus: int = 2) -> TelemetryBatch:
    samples = tuple(
        GpuSample(
            ts=ts,
            index=i,
            uuid=f"GPU-{node}-{i}",
            utilization_percent=50.0,
            memory_used_mib=1,
            memory_total_mib=81920,
            power_w=100,
            temperature_c=temperature,
        )
        for i in range(gpus)
    )
    return TelemetryBatch(node=node, ts=ts, host=None, gpus=samples, events=(), gpu_count=gpus)


class Replica:
    """One server replica's alerting: its own connection, its own telemetry memory, leading or not."""

    def __init__(self, url: str, tmp: Path, *, leads: bool, shared: bool = True) -> None:
        self.store = open_store(url)
        self.telemetry = TelemetryService(self.store)
        self.leads = leads
        self.alerting = AlertService(
            self.store,
            self.telemetry,
            Settings(data_dir=tmp, database_url=url),
            shared=shared,
            leading=lambda: self.leads,
            replica_id="leader" if leads else "follower",
        )
        # its heartbeat, as Leadership writes it: what tells the others that a replica may store samples
        now = datetime.now(UTC)
        self.store.touch_replica(ReplicaRow(self.alerting.replica_id, "host", "https://x", "0", now, now))

    def close(self) -> None:
        self.store.close()


class Cluster:
    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.leader = Replica(url, tmp, leads=True)
        self.follower = Replica(url, tmp, leads=False)
        s = self.leader.store
        for node in ("a", "b"):
            gpus = [GpuInfo(index=i, uuid=f"GPU-{node}-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
            s.upsert_node(node, node, "simulated", 8000, 65536, {}, gpus, T0)
        self.tenants = {name: s.create_tenant(name, T0).id for name in ("vision", "nlp")}
        for tid in self.tenants.values():  # a queued job each: queue_length{tenant=...} = 1
            s.create_job(JobSpec(command=("x",), gpus=1, tenant_id=tid), T0)
        for spec in (
            {"name": "hot", "metric": "gpu_temperature_c", "comparison": ">", "threshold": 80},
            {"name": "queued", "metric": "queue_length", "comparison": ">", "threshold": 0},
        ):
            s.create_alert_rule(spec["name"], rule_to_dict(parse_rule(spec)), None, T0)  # type: ignore[arg-type]
        for r in (self.leader, self.follower):
            r.alerting.reload()
        admin = s.create_user("root", "admin", T0)
        self.admin = Principal(TokenRecord(1, admin.id, "user", "t", T0, False), admin)
        member = s.create_user("vmember", "member", T0, tenant_id=self.tenants["vision"])
        self.vision = Principal(TokenRecord(2, member.id, "user", "t", T0, False), member)

    def close(self) -> None:
        self.leader.close()
        self.follower.close()


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(database_url, tmp_path)
    yield c
    c.close()


def _firing(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(rule, node or tenant label) of every firing alert."""
    return {
        (a["rule"], a["labels"].get("node") or a["labels"].get("tenant", ""))
        for a in rows
        if a["state"] == AlertState.FIRING.value
    }


def test_telemetry_only_a_follower_received_fires_the_leaders_rule(cluster: Cluster) -> None:
    now = time.time()
    cluster.leader.telemetry.receive("a", _batch("a", 40.0, now))  # a's agent talks to the leader: cool
    cluster.follower.telemetry.receive("b", _batch("b", 85.0, now))  # b's to the follower: hot
    assert "b" not in cluster.leader.telemetry.latest()
    cluster.leader.alerting.evaluate(now)
    alerts = cluster.leader.alerting.list_alerts(cluster.admin, [AlertState.FIRING])
    hot = [a for a in alerts if a["rule"] == "hot"]
    assert {(a["labels"]["node"], a["labels"]["gpu"]) for a in hot} == {("b", "0"), ("b", "1")}
    assert {a["labels"]["uuid"] for a in hot} == {"GPU-b-0", "GPU-b-1"}  # labelled as a batch would be
    assert all(a["value"] == 85.0 for a in hot)


def test_a_leader_that_reads_memory_only_misses_the_followers_node(cluster: Cluster, tmp_path: Path) -> None:
    """What the shared read fixes (and what one server keeps doing): only the batches this replica received."""
    solo = Replica(cluster.url, tmp_path, leads=True, shared=False)
    try:
        solo.alerting.reload()
        now = time.time()
        cluster.follower.telemetry.receive("b", _batch("b", 85.0, now))
        solo.alerting.evaluate(now)
        assert ("hot", "b") not in _firing(solo.alerting.list_alerts(cluster.admin, None))
    finally:
        solo.close()


def test_a_replica_alone_reads_no_samples_back_but_reads_those_of_one_heard_from_lately(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading every node's latest samples back each round is for samples another replica stored: a server alone on
    PostgreSQL holds them all in memory and skips it. One heard from within the stale window (the follower, or this
    server's own process before a restart: another replica id) may have stored some, and they are read."""
    now = time.time()
    for node in ("a", "b"):  # the leader holds a batch of each node
        cluster.leader.telemetry.receive(node, _batch(node, 40.0, now - 10))
    cluster.follower.telemetry.receive("b", _batch("b", 85.0, now))
    reads: list[object] = []
    real = cluster.leader.store.latest_points
    monkeypatch.setattr(cluster.leader.store, "latest_points", lambda *a, **k: reads.append(a) or real(*a, **k))
    silent = datetime.fromtimestamp(now - STALE_AFTER_S - OTHERS_MARGIN_S - 5, UTC)
    cluster.leader.store.touch_replica(ReplicaRow("follower", "host", "https://x", "0", silent, silent))
    cluster.leader.alerting.evaluate(now)
    assert reads == []  # only the leader's own heartbeat is young: nothing read back
    heard = datetime.now(UTC)
    cluster.leader.store.touch_replica(ReplicaRow("follower", "host", "https://x", "0", heard, heard))
    cluster.leader.alerting.evaluate(now + 1)
    assert len(reads) == 1
    assert ("hot", "b") in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))


def test_the_servers_own_workers_are_not_replicas_to_read_back_from(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CORRAL_WORKERS: a worker serves the agents' port and forwards every batch to its starter, so the starter's
    round reads nothing back for its own workers (a fifth of its interpreter with 1,000 nodes); a worker of another
    server, or another process that merely shares the prefix, still counts."""
    now = time.time()
    reads: list[object] = []
    real = cluster.leader.store.latest_points
    monkeypatch.setattr(cluster.leader.store, "latest_points", lambda *a, **k: reads.append(a) or real(*a, **k))
    silent = datetime.fromtimestamp(now - STALE_AFTER_S - OTHERS_MARGIN_S - 5, UTC)
    cluster.leader.store.touch_replica(ReplicaRow("follower", "host", "https://x", "0", silent, silent))
    for node in ("a", "b"):  # every batch reaches the leader's memory
        cluster.leader.telemetry.receive(node, _batch(node, 40.0, now))
    heard = datetime.now(UTC)
    for worker in ("leader/worker-41", "leader/worker-42"):
        cluster.leader.store.touch_replica(ReplicaRow(worker, "host", "https://x", "0", heard, heard))
    cluster.leader.alerting.evaluate(now)
    assert reads == []
    cluster.leader.store.touch_replica(ReplicaRow("leader2/worker-43", "host", "https://x", "0", heard, heard))
    cluster.leader.alerting.evaluate(now + 1)
    assert len(reads) == 1


def test_same_server_is_a_starter_and_its_workers() -> None:
    assert is_same_server("s/worker-1", "s") and is_same_server("s", "s/worker-1") and is_same_server("s", "s")
    assert is_same_server("s/worker-2", "s/worker-1")  # the agents' worker's batches reach the loops' one's memory
    assert not is_same_server("s2", "s") and not is_same_server("s", "s2") and not is_same_server("s2/worker-1", "s")


def test_a_newer_stored_sample_wins_over_an_older_batch_in_memory(cluster: Cluster) -> None:
    """b's agent moved from the leader to the follower: the leader's last batch of b (hot) is older than what b
    sent since (cool), and the leader's rule follows the newer one; the other way round, memory wins."""
    now = time.time()
    cluster.leader.telemetry.receive("b", _batch("b", 85.0, now - 30))
    cluster.follower.telemetry.receive("b", _batch("b", 40.0, now - 1))
    cluster.leader.alerting.evaluate(now)
    assert ("hot", "b") not in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))
    cluster.leader.telemetry.receive("b", _batch("b", 86.0, now))  # back to the leader, newest of all
    cluster.leader.alerting.evaluate(now + 1)
    assert ("hot", "b") in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))


def test_a_follower_lists_the_leaders_alerts_filtered_by_tenant(cluster: Cluster) -> None:
    now = time.time()
    cluster.follower.telemetry.receive("b", _batch("b", 85.0, now))
    assert cluster.follower.alerting.list_alerts(cluster.admin, None) == []  # nothing saved yet
    cluster.leader.alerting.evaluate(now)
    leader_view = cluster.leader.alerting.list_alerts(cluster.admin, None)
    assert _firing(leader_view) == {("hot", "b"), ("queued", "vision"), ("queued", "nlp")}
    # The follower never evaluated (its engine is empty) and answers with what the leader saved.
    assert cluster.follower.alerting.engine.alerts() == []
    assert cluster.follower.alerting.list_alerts(cluster.admin, None) == leader_view
    pending = cluster.follower.alerting.list_alerts(cluster.admin, [AlertState.PENDING])
    assert pending == cluster.leader.alerting.list_alerts(cluster.admin, [AlertState.PENDING])
    assert {a["state"] for a in pending} <= {"pending"} and not _firing(pending)
    # A vision member: vision's and the cluster's (node) alerts, never nlp's; the same on the leader.
    member_view = cluster.follower.alerting.list_alerts(cluster.vision, [AlertState.FIRING])
    assert _firing(member_view) == {("hot", "b"), ("queued", "vision")}
    assert member_view == cluster.leader.alerting.list_alerts(cluster.vision, [AlertState.FIRING])
    # A later round replaces the snapshot: the queue drained, b cooled down.
    for job in cluster.leader.store.list_jobs():
        cluster.leader.store.request_cancel(job.id, T0)
    cluster.follower.telemetry.receive("b", _batch("b", 40.0, now + 5))
    cluster.leader.alerting.evaluate(now + 5)
    assert _firing(cluster.follower.alerting.list_alerts(cluster.admin, None)) == set()
    states = {(a["rule"], a["state"]) for a in cluster.follower.alerting.list_alerts(cluster.admin, None)}
    assert ("hot", "resolved") in states


def test_one_server_reads_memory_only_and_saves_no_snapshot(cluster: Cluster, tmp_path: Path) -> None:
    solo = Replica(cluster.url, tmp_path, leads=True, shared=False)
    try:
        solo.alerting.reload()

        def refused(*_: Any, **__: Any) -> Any:
            raise AssertionError("one server touched the replicas' tables")

        solo.store.latest_points = refused  # type: ignore[method-assign]
        solo.store.save_alert_snapshot = refused  # type: ignore[method-assign]
        solo.store.load_alert_snapshot = refused  # type: ignore[method-assign]
        now = time.time()
        solo.telemetry.receive("a", _batch("a", 85.0, now))
        solo.alerting.evaluate(now)
        assert ("hot", "a") in _firing(solo.alerting.list_alerts(cluster.admin, None))
        solo.leads = False  # even told it does not lead, one server answers from its own engine
        assert ("hot", "a") in _firing(solo.alerting.list_alerts(cluster.admin, None))
    finally:
        solo.close()
    assert cluster.leader.store.load_alert_snapshot() == ([], None, "")


def test_latest_points_gives_each_series_newest_sample(store: SqlStore) -> None:
    pts = [
        Point(100.0, "a", 0, "gpu_temperature_c", 50.0),
        Point(100.0, "a", 0, "gpu_power_w", 100.0),
        Point(110.0, "a", 0, "gpu_temperature_c", 60.0, 7),
        Point(105.0, "a", 1, "gpu_temperature_c", 70.0),
        Point(108.0, "a", HOST_GPU, "host_cpu_percent", 10.0),
        Point(50.0, "b", 0, "gpu_temperature_c", 99.0),  # before the cutoff
        Point(120.0, "c", 0, "gpu_temperature_c", 30.0),
        Point(120.0, "c", 0, "gpu_temperature_c", 30.0),  # the same sample stored twice
    ]
    store.insert_points(pts)
    got = sorted(store.latest_points(90.0))
    assert got == sorted(
        [
            Point(110.0, "a", 0, "gpu_temperature_c", 60.0, 7),
            Point(105.0, "a", 1, "gpu_temperature_c", 70.0),
            Point(108.0, "a", HOST_GPU, "host_cpu_percent", 10.0),
            Point(120.0, "c", 0, "gpu_temperature_c", 30.0),
        ]
    )
    assert {p.node for p in store.latest_points(0.0, nodes=["b"])} == {"b"}
    assert store.latest_points(0.0, nodes=[]) == []


def test_the_alert_snapshot_is_replaced_each_time(store: SqlStore) -> None:
    assert store.load_alert_snapshot() == ([], None, "")
    store.save_alert_snapshot([{"id": "x", "labels": {"tenant": "t"}}], T0, "r1")
    store.save_alert_snapshot([{"id": "y", "labels": {}}], T0.replace(hour=1), "r2")
    assert store.load_alert_snapshot() == ([{"id": "y", "labels": {}}], T0.replace(hour=1), "r2")


@pytest.mark.postgres
def test_a_follower_app_answers_get_alerts_with_the_leaders(postgres_url: str, tmp_path: Path) -> None:
    """The server as `corral server` builds it on PostgreSQL: a replica that does not lead answers the API with
    the alerts another (leading) replica saved."""
    store = open_store(postgres_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=postgres_url, schedule_interval_s=0.1, alert_interval_s=3600)
    with TestClient(create_app(settings, store)) as client:
        alerting = client.app.state.ctx.alerting  # type: ignore[attr-defined]
        assert alerting.shared
        alerting.leading = lambda: False  # another replica leads
        vision = store.create_tenant("vision", T0)
        nlp = store.create_tenant("nlp", T0)
        member = store.create_user("vm", "member", T0, tenant_id=vision.id)
        assert member and nlp
        token = client.post(
            "/api/v1/tokens",
            json={"name": "vm-t", "user": "vm"},
            headers={"Authorization": f"Bearer {creds.admin_token}"},
        ).json()["token"]
        leader = Replica(postgres_url, tmp_path, leads=True)
        try:
            leader.store.create_alert_rule(
                "queued",
                rule_to_dict(
                    parse_rule({"name": "queued", "metric": "queue_length", "comparison": ">", "threshold": 0})
                ),
                None,
                T0,
            )
            leader.alerting.reload()
            for tid in (vision.id, nlp.id):
                store.create_job(JobSpec(command=("x",), gpus=1, tenant_id=tid), T0)
            leader.alerting.evaluate(time.time())
            expected = [alert_out(a) for a in leader.alerting.engine.alerts()]
            assert len(expected) == 2
            admin = client.get("/api/v1/alerts", headers={"Authorization": f"Bearer {creds.admin_token}"}).json()
            assert admin == expected
            mine = client.get("/api/v1/alerts", headers={"Authorization": f"Bearer {token}"}).json()
            assert [a["labels"]["tenant"] for a in mine] == ["vision"]
        finally:
            leader.close()
    store.close()


def test_rules_and_silences_made_through_another_replica_count_on_the_leader(cluster: Cluster) -> None:
    """Any replica serves the API: a rule or a silence made (or ended) through a follower is in the leader's next
    round, and a follower lists the silences the leader holds."""
    now = time.time()
    cluster.follower.telemetry.receive("b", _batch("b", 70.0, now))
    cluster.follower.alerting.create_rule(
        cluster.admin, {"name": "warm", "metric": "gpu_temperature_c", "comparison": ">", "threshold": 60}
    )
    cluster.leader.alerting.evaluate(now)
    assert ("warm", "b") in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))
    muted = cluster.follower.alerting.create_silence(cluster.admin, {"matchers": 'node="b"', "comment": "repair"})
    cluster.leader.alerting.evaluate(now + 1)
    warm = [a for a in cluster.leader.alerting.list_alerts(cluster.admin, None) if a["rule"] == "warm"]
    assert warm and all(a["silenced_by"] == muted["id"] for a in warm)
    cluster.leader.alerting.delete_silence(cluster.admin, muted["id"])  # ended through the leader
    assert cluster.follower.alerting.list_silences(cluster.admin) == []
    cluster.follower.alerting.create_silence(cluster.admin, {"matchers": 'node="a"'})
    assert [s["matchers"] for s in cluster.leader.alerting.list_silences(cluster.admin)] == ['node="a"']


def test_a_round_builds_only_the_series_its_rules_read_and_a_new_rule_gets_its_own(cluster: Cluster) -> None:
    """1,000 nodes make ~100,000 GPU and host points a round, most of them read by no rule: a round builds a node's
    series only for metrics an enabled rule reads, and a rule made on another metric is served from the next
    round."""
    now = time.time()
    cluster.leader.telemetry.receive("b", _batch("b", 70.0, now))
    metrics = {p.metric for p in cluster.leader.alerting.compute_series(now)}
    assert "gpu_temperature_c" in metrics and "gpu_power_w" not in metrics  # a default reads only the former
    cluster.leader.alerting.create_rule(
        cluster.admin, {"name": "busy", "metric": "gpu_utilization_percent", "comparison": ">=", "threshold": 50}
    )
    assert "gpu_utilization_percent" in {p.metric for p in cluster.leader.alerting.compute_series(now)}
    cluster.leader.alerting.evaluate(now)
    assert ("busy", "b") in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))


def test_a_replica_that_does_not_lead_counts_the_leaders_alerts_and_shows_the_notifiers_it_was_told(
    cluster: Cluster,
) -> None:
    """The Prometheus `corral_alerts{state}` gauge and `GET /alerts/notifiers` of the people's process of a server
    of several, whose loops' process leads: the leader's saved alerts, and the notifiers' status it handed over
    (server/background/scheduler_view.py), not this process's own rules and dispatcher, which never run."""
    now = time.time()
    cluster.leader.telemetry.receive("b", _batch("b", 85.0, now))
    cluster.leader.alerting.evaluate(now)
    leader = cluster.leader.alerting.alert_states()
    assert leader["firing"] >= 3  # b's two hot GPUs and each tenant's queue
    assert cluster.follower.alerting.alert_states() == leader
    told = [
        {
            "notifier": "webhook",
            "delivered": 4,
            "failed": 2,
            "dropped": 0,
            "retries": 6,
            "last_error": "HTTP 500",
            "last_error_at": now,
            "last_success_at": None,
        }
    ]
    assert cluster.follower.alerting.notifier_status() == cluster.follower.alerting.dispatcher.status()
    cluster.follower.alerting.remote_notifiers = lambda: told
    status = cluster.follower.alerting.notifier_status()
    assert [(s.notifier, s.failed, s.last_error) for s in status] == [("webhook", 2, "HTTP 500")]
    cluster.follower.alerting.remote_notifiers = lambda: None  # nothing told yet
    assert cluster.follower.alerting.notifier_status() == []


def test_one_servers_round_reads_back_only_the_nodes_whose_batch_its_memory_lacks(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loops' process of a server of several holds every batch the starter relayed to it; one the channels had
    no room for (or sent before it started) is read back from the database for that node alone, not lost."""
    now = time.time()
    reads: list[tuple[object, ...]] = []
    real = cluster.leader.store.latest_points
    monkeypatch.setattr(cluster.leader.store, "latest_points", lambda *a, **k: reads.append(a) or real(*a, **k))
    silent = datetime.fromtimestamp(now - STALE_AFTER_S - OTHERS_MARGIN_S - 5, UTC)  # no other replica lately
    cluster.leader.store.touch_replica(ReplicaRow("follower", "host", "https://x", "0", silent, silent))
    cluster.leader.telemetry.receive("a", _batch("a", 40.0, now))  # relayed
    cluster.follower.telemetry.receive("b", _batch("b", 85.0, now))  # stored by a worker; the relay dropped it
    cluster.leader.alerting.evaluate(now)
    assert [tuple(r[1]) for r in reads] == [("b",)]  # b alone
    assert ("hot", "b") in _firing(cluster.leader.alerting.list_alerts(cluster.admin, None))
    cluster.leader.telemetry.receive("b", _batch("b", 85.0, now + 1))
    reads.clear()
    cluster.leader.alerting.evaluate(now + 1)
    assert reads == []  # every node's batch in memory: nothing read back
