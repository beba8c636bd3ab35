"""GPUs allocated over time (the fleet page's graph): the pure series from jobs' runs, and the API route that
serves it, bounded and scoped to the caller's tenant. Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.errors import ValidationError
from corral.core.models import JobSpec
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.allocation import MAX_POINTS, compute_allocation_series
from corral.server.services.reports import JobRun
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

T0 = 1_800_000_000.0  # a whole multiple of 60


def run(start_s: float, end_s: float | None, gpus: int = 1, milli: int = 1000, nodes: int = 1) -> JobRun:
    at = lambda s: datetime.fromtimestamp(T0 + s, UTC)  # noqa: E731
    return JobRun(1, None, None, gpus, milli, nodes, at(start_s), None if end_s is None else at(end_s), ())


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        pytest.param([], [0.0, 0.0, 0.0], id="nothing-ran"),
        pytest.param([run(0, 180, gpus=4)], [4.0, 4.0, 4.0], id="whole-range"),
        pytest.param([run(30, 90, gpus=2)], [1.0, 1.0, 0.0], id="half-buckets-are-averaged"),
        pytest.param([run(0, None, gpus=2, milli=500)], [1.0, 1.0, 1.0], id="a-share-counts-its-fraction"),
        pytest.param([run(60, 120, gpus=2, nodes=3)], [0.0, 6.0, 0.0], id="a-gang-counts-every-node"),
        pytest.param([run(-600, -60, gpus=8), run(0, 60)], [1.0, 0.0, 0.0], id="runs-outside-are-ignored"),
    ],
)
def test_series_is_the_gpus_held_per_bucket(runs: list[JobRun], expected: list[float]) -> None:
    points = compute_allocation_series(runs, T0, T0 + 180, 60, now_s=T0 + 1000)
    assert points == [[T0 + i * 60, v] for i, v in enumerate(expected)]


def test_the_current_bucket_averages_only_the_time_that_has_passed() -> None:
    points = compute_allocation_series([run(0, None, gpus=3)], T0, T0 + 3600, 60, now_s=T0 + 90)
    assert points == [[T0, 3.0], [T0 + 60, 3.0]]  # nothing after now; the half-passed bucket is not halved


@pytest.mark.parametrize(
    ("start", "end", "step", "field"),
    [
        pytest.param(T0 + 60, T0, 60, "start", id="start-after-end"),
        pytest.param(T0 + 2000, T0 + 3000, 60, "start", id="all-in-the-future"),
        pytest.param(T0 - 500 * 86400, T0, 86400, "start", id="over-400-days"),
        pytest.param(T0, T0 + (MAX_POINTS + 1) * 60, 60, "step_s", id="too-many-points"),
    ],
)
def test_bad_ranges_name_the_field(start: float, end: float, step: float, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        compute_allocation_series([], start, end, step, now_s=T0 + 1000 if field != "step_s" else end)
    assert e.value.field == field


class Api:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def user(self, name: str, tenant: str) -> dict[str, str]:
        body = {"name": name, "role": "member", "tenant": tenant, "password": "correct horse"}
        assert self.client.post("/api/v1/users", json=body, headers=self.admin).status_code == 201
        r = self.client.post("/api/v1/login", json={"username": name, "password": "correct horse"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def ran(self, tenant: str, gpus: list[int], ago_s: float, ended_ago_s: float | None = None) -> None:
        """A job of `tenant` that started `ago_s` seconds ago on n1's `gpus` (and ended `ended_ago_s` ago)."""
        t = self.store.find_tenant(tenant)
        assert t is not None
        now = datetime.now(UTC)
        job = self.store.create_job(
            JobSpec(("sleep", "1"), gpus=len(gpus), tenant_id=t.id), now - timedelta(seconds=ago_s)
        )
        assert self.store.assign_job(job.id, "n1", gpus, now - timedelta(seconds=ago_s))
        if ended_ago_s is not None:
            from corral.core.states import JobState

            self.store.finish_job(job.id, JobState.SUCCEEDED, 0, "", now - timedelta(seconds=ended_ago_s))

    def allocated(self, auth: dict[str, str], **params: Any) -> Any:
        return self.client.get("/api/v1/metrics/allocated", params=params, headers=auth)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=3600)
    with TestClient(NodeCertApp(create_app(settings, store))) as client:
        a = Api(client, store, creds.admin_token)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
        body = {"name": "n1", "backend": "simulated", "gpus": gpus}
        assert client.post("/api/v1/agents/register", json=body, headers=NodeAgents(client)("n1")).status_code == 200
        for name in ("vision", "nlp"):
            assert client.post("/api/v1/tenants", json={"name": name}, headers=a.admin).status_code == 201
        yield a


def test_history_survives_any_page_and_is_scoped_to_the_callers_tenant(api: Api) -> None:
    api.ran("vision", [0, 1], ago_s=900)  # still running
    api.ran("nlp", [2, 3, 4], ago_s=900, ended_ago_s=300)
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    start = time.time() - 1800
    first_bucket = lambda who: api.allocated(who, start=start, step_s=60).json()  # noqa: E731
    everyone = first_bucket(api.admin)
    values = [v for _, v in everyone["series"][0]["points"]]
    assert len(values) in (30, 31) and values[0] == 0.0  # half an hour of one-minute buckets, before any job
    assert max(values) == 5.0 and values[-1] == 2.0  # both jobs at once, then vision's alone
    assert max(v for _, v in first_bucket(alice)["series"][0]["points"]) == 2.0
    bobs = [v for _, v in first_bucket(bob)["series"][0]["points"]]
    assert max(bobs) == 3.0 and bobs[-1] == 0.0


@pytest.mark.parametrize(
    ("params", "field"),
    [
        pytest.param({"step_s": 0}, "step_s", id="step-zero"),
        pytest.param({"step_s": 1e9}, "step_s", id="step-too-large"),
        pytest.param({"step_s": 1, "start": "2020-01-01T00:00:00Z"}, "start", id="over-400-days"),
        pytest.param({"step_s": 1, "start": time.time() - 86400}, "step_s", id="too-many-points"),
        pytest.param({"start": "nan"}, "start", id="start-nan"),
        pytest.param({"start": time.time() + 3600}, "start", id="start-in-the-future"),
    ],
)
def test_bad_parameters_are_refused_naming_the_field(api: Api, params: dict[str, Any], field: str) -> None:
    r = api.allocated(api.admin, **params)
    assert r.status_code in (400, 422), r.text  # the API's own checks answer 400, the declared bounds 422
    assert r.json()["error"]["field"] == field


def test_needs_a_login(api: Api) -> None:
    assert api.allocated({}).status_code == 401
