"""Run-time predictions in the server (issue 15): learnt from the store's successful jobs, scoped to each tenant,
shown on a pending job (`prediction`, `predicted_run_s`) and in `corral show`, and kept across a restart (the
history they are learnt from is in the store). Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.cli.light import print_job
from corral.core.models import Job, JobSpec
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.prediction import RunTimePredictions
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

START = datetime.now(UTC) - timedelta(days=1)


def _ran(store: SqlStore, tenant: str, user: str | None, name: str, run_s: float, ok: bool = True) -> int:
    t = store.find_tenant(tenant)
    assert t is not None
    u = store.find_user(user) if user else None
    job = store.create_job(
        JobSpec(("python", "train.py"), name=name, gpus=1, tenant_id=t.id, user_id=u.id if u else None), START
    )
    assert store.assign_job(job.id, "n1", [0], START)
    state = JobState.SUCCEEDED if ok else JobState.FAILED
    assert store.finish_job(job.id, state, 0 if ok else 1, "", START + timedelta(seconds=run_s))
    return job.id


def _client(store: SqlStore, database_url: str, tmp_path: Path) -> tuple[TestClient, dict[str, str]]:
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, queueing="predict")
    client = TestClient(NodeCertApp(create_app(settings, store)))
    return client, {"Authorization": f"Bearer {creds.admin_token}"}


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Iterator[SqlStore]:
    s = open_store(database_url)
    yield s
    s.close()


def _setup(client: TestClient, admin: dict[str, str]) -> None:
    gpus = [{"index": 0, "uuid": "GPU-0", "model": "H100-80GB", "memory_mib": 81920}]
    body = {"name": "n1", "backend": "simulated", "gpus": gpus}
    assert client.post("/api/v1/agents/register", json=body, headers=NodeAgents(client)("n1")).status_code == 200
    for name in ("vision", "nlp"):
        assert client.post("/api/v1/tenants", json={"name": name}, headers=admin).status_code == 201
    body = {"name": "alice", "role": "member", "tenant": "vision"}
    assert client.post("/api/v1/users", json=body, headers=admin).status_code == 201


def _settled(client: TestClient, admin: dict[str, str], job: int) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        j = client.get(f"/api/v1/jobs/{job}", headers=admin).json()
        if j["prediction"] or time.monotonic() > deadline:
            return dict(j)
        time.sleep(0.1)


def test_a_pending_job_shows_what_its_tenants_earlier_jobs_like_it_ran_for_and_keeps_it_after_a_restart(
    store: SqlStore, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, admin = _client(store, database_url, tmp_path)
    with client:
        _setup(client, admin)
        for i in range(8):
            _ran(store, "vision", "alice", f"train-{i}", 600 + 60 * i)
        _ran(store, "vision", "alice", "train-8", 5, ok=False)  # a failure says nothing about run time
        for i in range(12):  # another tenant's jobs with the same name, much shorter: never mixed in
            _ran(store, "nlp", None, f"train-{i}", 10)
        # The GPU is busy so the next jobs wait (the first pass learns the store's history).
        hold = client.post("/api/v1/jobs", json={"command": ["sleep", "600"], "gpus": 1}, headers=admin).json()["id"]
        t = store.find_tenant("vision")
        assert t is not None
        alice = store.find_user("alice")
        assert alice is not None
        spec = JobSpec(("python", "train.py"), name="train-99", gpus=1, tenant_id=t.id, user_id=alice.id)
        mine = store.create_job(spec, datetime.now(UTC)).id
        nlp = store.find_tenant("nlp")
        assert nlp is not None
        other = store.create_job(JobSpec(("x",), name="fresh", gpus=1, tenant_id=nlp.id), datetime.now(UTC)).id
        j = _settled(client, admin, mine)
        assert j["state"] == "PENDING" and hold != mine
        # 8 earlier successes of alice's train-*: 600..1020 s, median 810 s (13 m 30 s); nlp's 10 s runs not counted
        assert j["prediction"] == "median of 8 earlier jobs by alice named train-* on 1 GPU: 13 m 30 s", j
        assert 600 <= j["predicted_run_s"] <= 1100
        # nlp's job learns from nlp's jobs only (vision's 8 longer runs are not in its "1 GPU" key)
        theirs = client.get(f"/api/v1/jobs/{other}", headers=admin).json()["prediction"]
        assert theirs == "median of 12 earlier jobs of nlp on 1 GPU: 10 s", theirs
        print_job(j)
        assert "predicted  median of 8 earlier jobs by alice named train-*" in capsys.readouterr().out
    again, admin = _client(store, database_url, tmp_path / "again")  # a restart: learnt again from the store
    with again:
        assert _settled(again, admin, mine)["prediction"] == j["prediction"]


def test_predictions_stay_within_a_tenant_and_learn_successes_once() -> None:
    predictions = RunTimePredictions()
    store_jobs: list[Any] = []

    class FakeJob:  # the fields compute_features and compute_run_s read
        def __init__(self, i: int, tenant: int, run_s: float, state: JobState = JobState.SUCCEEDED) -> None:
            self.id, self.state = i, state
            self.spec = JobSpec(("python", "a.py"), name="sweep-7", gpus=2, tenant_id=tenant)
            self.started_at = START
            self.finished_at = START + timedelta(seconds=run_s)

    tenants = {1: "vision", 2: "nlp"}
    store_jobs = [FakeJob(i, 1, 100) for i in range(8)] + [FakeJob(100, 1, 9, JobState.FAILED)]
    assert predictions.learn(store_jobs, tenants, {}) == 8
    assert predictions.learn(store_jobs, tenants, {}) == 0  # seen again (history and a later pass): counted once
    guess = predictions.predict(FakeJob(200, 1, 0), tenants, {})  # type: ignore[arg-type]
    assert guess is not None and guess.basis.jobs == 8
    assert predictions.predict(FakeJob(201, 2, 0), tenants, {}) is None  # type: ignore[arg-type]


def test_predict_all_answers_as_predict_does_and_learns_between_passes() -> None:
    """The scheduler asks for every pending and running job's prediction each pass (predict_all), and a page asks
    `predict` for each job it lists: both answer as a predictor that keeps nothing (`reference`, taught the same),
    with the same object while nothing changed, and anew once a finished job is learnt or a name changes."""
    predictions, reference = RunTimePredictions(), RunTimePredictions()
    tenants, users = {1: "vision"}, {7: "alice"}
    waiting = [
        JobSpec(("python", "train.py"), name=f"train-{i}", gpus=1, tenant_id=1, user_id=7 if i % 2 else None)
        for i in range(4)
    ]
    jobs = [Job(id=100 + i, spec=s, state=JobState.PENDING, created_at=START) for i, s in enumerate(waiting)]

    def done(i: int, run_s: float) -> Job:
        return Job(
            id=i, spec=waiting[i % 4], state=JobState.SUCCEEDED, created_at=START, started_at=START,
            finished_at=START + timedelta(seconds=run_s),
        )  # fmt: skip

    def learn(finished: list[Job]) -> None:
        for p in (predictions, reference):
            p.learn(finished, tenants, users)

    def fresh(names: dict[int, str], user_names: dict[int, str]) -> dict[int, object]:
        return {j.id: reference.predict(j, names, user_names) for j in jobs}

    def asked(names: dict[int, str], user_names: dict[int, str]) -> dict[int, object]:
        return {j.id: predictions.predict(j, names, user_names) for j in jobs}

    first = predictions.predict_all(jobs, tenants, users)
    assert first == fresh(tenants, users) and all(v is None for v in first.values())  # nothing learnt yet
    learn([done(i, 600.0) for i in range(8)])
    assert asked(tenants, users) == fresh(tenants, users)  # learnt since the pass: not its answers
    learnt = predictions.predict_all(jobs, tenants, users)
    assert learnt == fresh(tenants, users) and all(v is not None for v in learnt.values())
    again = predictions.predict_all(jobs, tenants, users)
    assert all(again[k] is learnt[k] for k in learnt)  # kept: the same objects
    assert all(predictions.predict(j, tenants, users) is learnt[j.id] for j in jobs)  # a page reads the pass's
    learn([done(20 + i, 7200.0) for i in range(8)])
    assert asked(tenants, users) == fresh(tenants, users) != learnt
    assert predictions.predict_all(jobs, tenants, users) == fresh(tenants, users) != learnt
    renamed = {1: "speech"}  # another tenant name: another scope, nothing learnt there
    assert asked(renamed, users) == fresh(renamed, users)
    assert predictions.predict_all(jobs, renamed, users) == fresh(renamed, users)
    jobs[0] = Job(id=100, spec=waiting[0], state=JobState.PENDING, created_at=START + timedelta(seconds=1))
    assert predictions.predict_all(jobs, renamed, users) == fresh(renamed, users)
    predictions.predict_all(jobs, tenants, users)
    bob = {7: "bob"}  # another users' map: alice's jobs are now bob's, of whom nothing was learnt
    assert asked(tenants, bob) == fresh(tenants, bob) != fresh(tenants, users)
