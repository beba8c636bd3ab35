"""A hostile tenant against the newest surfaces (review of 2026-11-26): the allocation history can neither pin a
server thread nor read an unbounded range, a tenant-admin's rule cannot replace a rule of the whole cluster, and a
member's job filters and totals count its own tenant's jobs only. Through the API, both databases."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.models import JobSpec
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.allocation import compute_allocation_series
from corral.server.services.reports import JobRun
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

T0 = 1_800_000_000.0
# A step whose bucket edge k * step comes back as k - 1 buckets: (k * 58.539) / 58.539 < k for the third bucket
# after T0. Walking a float time from edge to edge never passed that edge (a member's request spun for ever).
ROUNDING_STEP = 58.539


def _run(start_s: float, end_s: float | None, gpus: int = 1) -> JobRun:
    at = lambda s: datetime.fromtimestamp(s, UTC)  # noqa: E731
    return JobRun(1, None, None, gpus, 1000, 1, at(start_s), None if end_s is None else at(end_s), ())


def _stuck_edge(start: float, end: float, step: float) -> bool:
    """Whether some bucket edge k * step in [start, end) divides back to under k (where the old walk stopped)."""
    first = math.floor(start / step)
    for k in range(first + 1, math.ceil(end / step)):
        edge = k * step
        if (math.floor(edge / step) + 1) * step <= edge:
            return True
    return False


def _within(seconds: float, fn: Any) -> Any:
    """fn() in a daemon thread; fails (instead of hanging the suite) when it has not returned in time."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"still running after {seconds} s"
    return out[0]


def test_allocation_series_ends_on_a_bucket_edge_that_float_division_rounds_down() -> None:
    assert _stuck_edge(T0, T0 + 3600, ROUNDING_STEP)
    points = _within(5, lambda: compute_allocation_series([_run(T0, None, 2)], T0, T0 + 3600, ROUNDING_STEP, T0 + 3600))
    assert len(points) in (62, 63) and all(v == 2.0 for _, v in points[1:-1])
    # Same answer as with a round step, in GPU-seconds.
    total = sum(v * (min(t + ROUNDING_STEP, T0 + 3600) - max(t, T0)) for t, v in points)
    assert total == pytest.approx(2 * 3600, rel=1e-9)


class Api:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        body = {"name": name, "role": role, "tenant": tenant}
        assert self.client.post("/api/v1/users", json=body, headers=self.admin).status_code == 201
        r = self.client.post("/api/v1/tokens", json={"name": f"{name}-t", "user": name}, headers=self.admin)
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def ran(self, tenant: str, gpus: list[int], ago_s: float, name: str = "job") -> int:
        t = self.store.find_tenant(tenant)
        assert t is not None
        now = datetime.now(UTC)
        job = self.store.create_job(
            JobSpec(("sleep", "1"), name=name, gpus=len(gpus), tenant_id=t.id), now - timedelta(seconds=ago_s)
        )
        assert self.store.assign_job(job.id, "n1", gpus, now - timedelta(seconds=ago_s))
        return job.id


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=3600, alert_interval_s=3600)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        a = Api(client, store, creds.admin_token)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
        body = {"name": "n1", "backend": "simulated", "gpus": gpus}
        assert client.post("/api/v1/agents/register", json=body, headers=NodeAgents(client)("n1")).status_code == 200
        for name in ("vision", "nlp"):
            assert client.post("/api/v1/tenants", json={"name": name}, headers=a.admin).status_code == 201
        yield a
    store.close()


def test_a_member_cannot_pin_a_server_thread_with_the_allocation_history(api: Api) -> None:
    api.ran("vision", [0, 1], ago_s=7200)  # the member's own job, still running
    alice = api.user("alice", "member", "vision")
    end = time.time() - 60
    start = end - 3000
    steps = [s / 1000 for s in range(1500, 60000, 7) if _stuck_edge(start, end, s / 1000)][:3]
    assert steps  # a few percent of steps have such an edge in any hour
    for step in steps:
        r = _within(
            10,
            lambda s=step: api.client.get(
                "/api/v1/metrics/allocated", params={"start": start, "end": end, "step_s": s}, headers=alice
            ),
        )
        assert r.status_code == 200, r.text
        assert {v for _, v in r.json()["series"][0]["points"][1:-1]} == {2.0}


def test_an_unbounded_allocation_range_is_refused_before_any_run_is_read(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = api.user("alice", "member", "vision")
    read: list[Any] = []
    store = api.client.app.state.ctx.store  # type: ignore[attr-defined]
    real = store.list_runs_between
    monkeypatch.setattr(store, "list_runs_between", lambda *a, **kw: read.append(a) or real(*a, **kw))
    for params, field in (
        ({"start": 0, "step_s": 86400}, "start"),
        ({"start": time.time() - 86400, "step_s": 1}, "step_s"),
    ):
        r = api.client.get("/api/v1/metrics/allocated", params=params, headers=alice)
        assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text
    assert read == []  # 50 years of the tenant's runs are not fetched only to be refused
    assert api.client.get("/api/v1/metrics/allocated", headers=alice).status_code == 200
    assert len(read) == 1


@pytest.mark.parametrize("name", ["gpu_unhealthy", "node_lost", "gpu_temperature"])
def test_a_tenant_admins_rule_cannot_replace_a_rule_of_the_cluster(api: Api, name: str) -> None:
    boss = api.user("vboss", "tenant-admin", "vision")
    # The attack: a rule of its own tenant named as the cluster's, which used to take its place for everyone.
    body = {"name": name, "metric": "gpu_temperature_c", "comparison": ">", "threshold": 1e9}
    r = api.client.post("/api/v1/alert-rules", json=body, headers=boss)
    assert r.status_code == 400 and r.json()["error"]["field"] == "name", r.text
    rules = {x["name"]: x for x in api.client.get("/api/v1/alert-rules", headers=api.admin).json()}
    assert rules[name]["builtin"] and rules[name]["tenant"] is None
    # Its own name is fine; an admin may still override the cluster's rule by name.
    assert api.client.post("/api/v1/alert-rules", json=body | {"name": "vision-hot"}, headers=boss).status_code == 201
    assert api.client.post("/api/v1/alert-rules", json=body, headers=api.admin).status_code == 201


def test_a_stored_tenant_rule_with_a_cluster_rules_name_is_ignored(api: Api) -> None:
    vision = api.store.find_tenant("vision")
    assert vision is not None
    spec = {"name": "gpu_unhealthy", "metric": "gpu_unhealthy", "comparison": ">", "threshold": 1e9}
    spec |= {"scope": "tenant", "tenant": "vision"}
    api.store.create_alert_rule("gpu_unhealthy", spec, vision.id, datetime.now(UTC))  # as an older version let it
    alerting = api.client.app.state.ctx.alerting  # type: ignore[attr-defined]
    alerting.reload()
    rule = next(r for r in alerting.engine.rules() if r.name == "gpu_unhealthy")
    assert rule.tenant is None and rule.threshold == 0


def test_a_members_job_filters_and_totals_count_its_own_tenant_only(api: Api) -> None:
    mine = api.ran("vision", [0], ago_s=60, name="train_x")
    theirs = api.ran("nlp", [1, 2], ago_s=60, name="train_%")
    alice = api.user("alice", "member", "vision")
    api.user("bob", "member", "nlp")

    def listed(**params: Any) -> tuple[list[int], str]:
        r = api.client.get("/api/v1/jobs", params={"all": "true", **params}, headers=alice)
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()], r.headers["X-Total-Count"]

    assert listed(node="n1") == ([mine], "1")  # n1 holds both tenants' jobs: only hers are counted
    assert listed(name="train") == ([mine], "1")
    assert listed(name="%") == ([], "0")  # the other tenant's `train_%` is neither listed nor counted
    assert listed(name="_") == ([mine], "1")
    assert listed(array_id=theirs) == ([], "0")
    # Another tenant, another tenant's user, and ones that do not exist: the same empty answer.
    assert listed(tenant="nlp") == listed(tenant="nosuch") == ([], "0")
    assert listed(user="bob") == listed(user="nosuch") == ([], "0")
    long = api.client.get("/api/v1/jobs", params={"name": "x" * 256}, headers=alice)
    assert long.status_code == 422
    nul = api.client.get("/api/v1/jobs", params={"name": "a\x00b"}, headers=alice)
    assert nul.status_code == 422 and nul.json()["error"]["field"] == "name"


@pytest.mark.parametrize(
    "summary",
    [
        pytest.param("{value:>300000000}", id="300-MB-per-alert"),
        pytest.param("{value:.99999f}", id="huge-precision"),
        pytest.param("{value:{threshold}}", id="width-from-the-threshold"),
        pytest.param("{value:>999}" * 200, id="too-long"),
    ],
)
def test_a_tenant_admins_rule_summary_cannot_blow_up_every_alert(api: Api, summary: str) -> None:
    boss = api.user("vboss", "tenant-admin", "vision")
    body = {"name": "vision-busy", "metric": "job_gpu_utilization_percent", "comparison": ">=", "threshold": 1e9}
    r = api.client.post("/api/v1/alert-rules", json=body | {"summary": summary}, headers=boss)
    assert r.status_code == 400 and r.json()["error"]["field"] == "summary", r.text
    ok = "job {job} at {value:.0f}% (limit {threshold:>6.1f}), {missing} {broken"
    assert api.client.post("/api/v1/alert-rules", json=body | {"summary": ok}, headers=boss).status_code == 201


def test_a_member_sees_which_gpus_are_used_but_not_another_tenants_job_ids(api: Api) -> None:
    """GET /gpus named the job on every GPU, whichever tenant's: a member learnt other tenants' job ids."""
    mine = api.ran("vision", [0], ago_s=60)
    theirs = api.ran("nlp", [1, 2], ago_s=60)
    alice = api.user("alice", "member", "vision")
    for path in ("/api/v1/gpus", "/api/v1/gpus?node=n1"):
        gpus = {g["index"]: g for g in api.client.get(path, headers=alice).json()}
        assert gpus[0]["job_id"] == mine
        assert gpus[1]["job_id"] is None and gpus[1]["used_milli"] == 1000  # used, by whom is not hers to know
        assert theirs not in {g["job_id"] for g in gpus.values()}
    admin = {g["index"]: g for g in api.client.get("/api/v1/gpus", headers=api.admin).json()}
    assert (admin[0]["job_id"], admin[1]["job_id"]) == (mine, theirs)
