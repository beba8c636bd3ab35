"""A tenant-admin's silences and alert rules stay inside its tenant: a silence mutes only that tenant's own
alerts (never a node's or a GPU's, never another tenant's), it lists and ends only its tenant's silences, and its
rules neither cordon nodes nor stop another tenant's jobs. Through the API, both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.telemetry import GpuSample, TelemetryBatch, batch_to_dict
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store


class Cluster:
    """Two tenants (vision, nlp), each with a tenant-admin and a member running a 1-GPU job on node n1."""

    def __init__(self, client: TestClient, store: SqlStore, admin: str, join: dict[str, str]) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin}"}
        self.agent = join  # headers presenting node n1's certificate
        self.jobs: dict[str, int] = {}

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=self.admin if auth is None else auth, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        assert self.call("POST", "/users", json={"name": name, "role": role, "tenant": tenant}).status_code == 201
        r = self.call("POST", "/tokens", json={"name": f"{name}-t", "user": name})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def busy_gpus(self) -> None:
        """Every GPU of n1 at 95 % now, then one evaluation round."""
        now = time.time()
        gpus = tuple(
            GpuSample(
                ts=now,
                index=i,
                uuid=f"GPU-n1-{i}",
                utilization_percent=95.0,
                memory_used_mib=1,
                memory_total_mib=81920,
                power_w=100,
                temperature_c=40,
            )
            for i in range(4)
        )
        batch = TelemetryBatch(node="n1", ts=now, host=None, gpus=gpus, events=(), gpu_count=4)
        assert (
            self.client.post("/api/v1/agents/n1/telemetry", json=batch_to_dict(batch), headers=self.agent).status_code
            == 200
        )
        self.client.app.state.ctx.alerting.evaluate(now)  # type: ignore[attr-defined]

    def firing(self) -> dict[tuple[str, str], str | None]:
        """(rule, tenant label or "") -> the silence muting it, for every firing alert (as the admin sees them)."""
        return {
            (a["rule"], a["labels"].get("tenant", "")): a["silenced_by"]
            for a in self.call("GET", "/alerts", params={"state": "firing"}).json()
        }


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1, alert_interval_s=3600)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        c = Cluster(client, store, creds.admin_token, NodeAgents(client)("n1"))
        gpus = [{"index": i, "uuid": f"GPU-n1-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(4)]
        assert (
            client.post(
                "/api/v1/agents/register", json={"name": "n1", "backend": "simulated", "gpus": gpus}, headers=c.agent
            ).status_code
            == 200
        )
        for tenant in ("vision", "nlp"):
            assert c.call("POST", "/tenants", json={"name": tenant}).status_code == 201
            member = c.user(f"{tenant}-member", "member", tenant)
            c.jobs[tenant] = c.call("POST", "/jobs", auth=member, json={"command": ["x"], "gpus": 1}).json()["id"]
        deadline = time.monotonic() + 10
        while any(c.call("GET", f"/jobs/{j}").json()["state"] != "RUNNING" for j in c.jobs.values()):
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.05)
        yield c
    store.close()


def _rules(c: Cluster, vboss: dict[str, str], nboss: dict[str, str]) -> None:
    """A cluster rule and one rule of each tenant, all over GPU utilisation > 80."""
    rule = {"metric": "gpu_utilization_percent", "comparison": ">", "threshold": 80}
    assert c.call("POST", "/alert-rules", json={"name": "busy", **rule}).status_code == 201
    assert c.call("POST", "/alert-rules", auth=vboss, json={"name": "vision-busy", **rule}).status_code == 201
    assert c.call("POST", "/alert-rules", auth=nboss, json={"name": "nlp-busy", **rule}).status_code == 201


def test_a_tenant_admins_silence_mutes_its_own_tenants_alerts_only(cluster: Cluster) -> None:
    vboss, nboss = cluster.user("vboss", "tenant-admin", "vision"), cluster.user("nboss", "tenant-admin", "nlp")
    _rules(cluster, vboss, nboss)
    # The attack: a silence over every alert of the cluster for 89 days.
    everything = {"matchers": 'alertname=~".+"', "duration_s": 89 * 86400}
    r = cluster.call("POST", "/silences", auth=vboss, json=everything)
    assert r.status_code in (400, 422) and r.json()["error"]["field"] == "ends_at"  # a tenant's lasts 30 days
    r = cluster.call("POST", "/silences", auth=vboss, json=everything | {"duration_s": 7 * 86400})
    assert r.status_code == 201, r.text
    assert r.json()["tenant"] == "vision"
    cluster.busy_gpus()
    firing = cluster.firing()
    assert firing[("vision-busy", "vision")] == r.json()["id"]  # its own rule's alert: muted
    # The cluster's rule on vision's own GPU (a hardware alert), on nlp's, and nlp's own rule: untouched.
    assert firing[("busy", "vision")] is None and firing[("busy", "nlp")] is None and firing[("busy", "")] is None
    assert firing[("nlp-busy", "nlp")] is None
    # Naming another tenant, or a selector over the tenant label, does not widen it.
    r = cluster.call("POST", "/silences", auth=vboss, json={"matchers": 'tenant="nlp"', "tenant": "nlp"})
    assert r.status_code in (400, 422) and r.json()["error"]["field"] == "tenant"
    assert cluster.call("POST", "/silences", auth=vboss, json={"matchers": 'tenant="nlp"'}).status_code == 201
    cluster.busy_gpus()
    assert cluster.firing()[("nlp-busy", "nlp")] is None


def test_a_tenant_admin_reaches_only_its_tenants_silences(cluster: Cluster) -> None:
    vboss, nboss = cluster.user("vboss", "tenant-admin", "vision"), cluster.user("nboss", "tenant-admin", "nlp")
    member = cluster.user("vmember", "member", "vision")
    admins = cluster.call("POST", "/silences", json={"matchers": 'alertname="gpu_temperature"'}).json()["id"]
    nlps = cluster.call("POST", "/silences", auth=nboss, json={"matchers": 'alertname="x"'}).json()["id"]
    visions = cluster.call("POST", "/silences", auth=vboss, json={"matchers": 'alertname="x"'}).json()["id"]
    for other in (admins, nlps):  # out of reach: as if it did not exist
        assert cluster.call("DELETE", f"/silences/{other}", auth=vboss).status_code == 404
    assert [s["id"] for s in cluster.call("GET", "/silences", auth=vboss).json()] == [visions]
    assert [s["id"] for s in cluster.call("GET", "/silences", auth=member).json()] == [visions]
    assert {s["id"] for s in cluster.call("GET", "/silences").json()} == {admins, nlps, visions}
    assert cluster.call("POST", "/silences", auth=member, json={"matchers": 'alertname="x"'}).status_code == 403
    assert cluster.call("DELETE", f"/silences/{visions}", auth=member).status_code == 403
    assert cluster.call("DELETE", f"/silences/{visions}", auth=vboss).status_code == 204
    assert cluster.call("DELETE", f"/silences/{nlps}").status_code == 204  # an admin reaches every silence


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"matchers": 'alertname="x"', "duration_s": -1}, "duration_s"),
        ({"matchers": 'alertname="x"', "duration_s": 91 * 86400}, "duration_s"),
        ({"matchers": 'alertname="x"', "comment": "c" * 1001}, "comment"),
        ({"matchers": 'alertname="x"', "starts_at": 1e300}, "starts_at"),
        ({"matchers": {f"l{i}": "v" for i in range(33)}}, "matchers"),
        ({"matchers": 'alertname="x"', "owner": "me"}, "owner"),
        ({"matchers": 'alertname="x"', "tenant": "nope"}, "tenant"),
        ({"matchers": ""}, "matchers"),
    ],
)
def test_silence_fields_are_bounded(cluster: Cluster, body: dict[str, Any], field: str) -> None:
    r = cluster.call("POST", "/silences", json=body)
    assert r.status_code in (400, 422), r.text
    assert r.json()["error"]["field"].split(".")[0] == field


def test_a_tenant_admins_rule_neither_cordons_nodes_nor_stops_other_tenants_jobs(cluster: Cluster) -> None:
    vboss, nboss = cluster.user("vboss", "tenant-admin", "vision"), cluster.user("nboss", "tenant-admin", "nlp")
    anything = {"metric": "gpu_utilization_percent", "comparison": ">", "threshold": 0}
    r = cluster.call("POST", "/alert-rules", auth=vboss, json={"name": "take", **anything, "actions": ["cordon_node"]})
    assert r.status_code in (400, 422) and r.json()["error"]["field"] == "actions"
    r = cluster.call(
        "POST",
        "/alert-rules",
        auth=vboss,
        json={"name": "stop-all", **anything, "scope": "global", "selector": 'tenant=~".*"', "actions": ["stop_job"]},
    )
    assert r.status_code == 201 and r.json()["tenant"] == "vision"
    assert "stop-all" not in {x["name"] for x in cluster.call("GET", "/alert-rules", auth=nboss).json()}
    # A tenant rule stored before the API refused such actions is held back when it fires.
    cluster.store.create_alert_rule(
        "old-cordon",
        {"name": "old-cordon", **anything, "scope": "tenant", "tenant": "vision", "actions": ["cordon_node"]},
        None,
        datetime.now(UTC),
    )
    cluster.client.app.state.ctx.alerting.reload()  # type: ignore[attr-defined]
    cluster.busy_gpus()
    assert cluster.call("GET", "/nodes/n1").json()["cordoned"] is False
    assert cluster.call("GET", f"/jobs/{cluster.jobs['nlp']}").json()["cancel_requested"] is False
    assert cluster.call("GET", f"/jobs/{cluster.jobs['vision']}").json()["cancel_requested"] is True  # its own


def test_a_tenant_admins_silence_stored_before_tenants_had_silences_becomes_its_tenants(cluster: Cluster) -> None:
    cluster.user("vboss", "tenant-admin", "vision")
    now = time.time()
    old = {
        "matchers": 'alertname=~".+"',
        "starts_at": now,
        "ends_at": now + 89 * 86400,
        "created_by": "vboss",
        "comment": "",
    }  # what a tenant-admin could store before: every alert of the cluster, for 89 days
    cluster.store.save_silence("legacy", old, datetime.now(UTC))
    cluster.client.app.state.ctx.alerting.reload()  # type: ignore[attr-defined]
    assert [s["tenant"] for s in cluster.call("GET", "/silences").json() if s["id"] == "legacy"] == ["vision"]
