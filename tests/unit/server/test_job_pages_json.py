"""GET /api/v1/jobs keeps each listed job's JSON while nothing it is made of changes (services/job_ui.JobPages):
every page must read exactly as the JobOut models of its jobs serialise (what the API answered before it), also after its row, the scheduler's word on it, its prediction or its tenant's name changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from corral.api.schemas import JobOut
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.context import context_of
from corral.server.services.job_ui import job_out
from corral.server.services.tenancy import known_tenant_names
from corral.server.settings import Settings
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Setup = tuple[TestClient, SqlStore, dict[str, str]]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=url)
    with TestClient(create_app(settings, store)) as client:
        yield client, store, {"Authorization": f"Bearer {creds.admin_token}"}
    store.close()


def _page(client: TestClient, store: SqlStore, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The page, checked against what the JobOut models of its jobs give (the way before JobPages)."""
    r = client.get("/api/v1/jobs?all=true", headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    scope = {"type": "http", "app": client.app, "headers": [], "server": ("testserver", 80), "scheme": "http"}
    request = Request(scope | {"path": "/api/v1/jobs", "query_string": b"", "method": "GET"})
    jobs = store.list_jobs(limit=500)
    names = known_tenant_names(store, {j.spec.tenant_id for j in jobs})
    sched = context_of(client.app).scheduler
    models = [job_out(request, store, sched, j, names) for j in jobs]
    want = json.loads(TypeAdapter(list[JobOut]).dump_json(models, by_alias=True))
    got = r.json()
    for a, b in zip(got, want, strict=True):  # eta_s counts down between the two
        left, right = a.pop("eta_s"), b.pop("eta_s")
        assert (left is None) == (right is None) and (left is None or abs(left - right) < 5)
    for a, b in zip(got, want, strict=True):
        assert {k: (v, b.get(k)) for k, v in a.items() if b.get(k) != v} == {}
    assert got == want
    return list(r.json())


def test_a_page_reads_as_its_jobs_models_whatever_changed(setup: Setup) -> None:
    client, store, admin = setup
    sched = context_of(client.app).scheduler
    sched.stop()  # no pass of its own meanwhile: the scheduler's word on each job is what the test sets
    vision = store.create_tenant("vision", T0)
    ids = [store.create_job(JobSpec(command=("train",), name="t", tenant_id=vision.id), T0).id for _ in range(4)]
    sched.pending_reasons, sched.pending_codes, sched.pending_info = {ids[1]: "waits for 1 GPU"}, {}, {}
    sched.pending_codes = {ids[1]: "resources"}
    first = _page(client, store, admin)
    assert [j["id"] for j in first] == ids and _page(client, store, admin) == first  # the second from what was kept
    assert context_of(client.app).job_pages._kept

    store.request_cancel(ids[0], T0)  # the row
    sched.pending_reasons = {ids[1]: "waits for 2 GPUs"}  # the scheduler's word, replaced whole as a pass does
    changed = {j["id"]: j for j in _page(client, store, admin)}
    assert changed[ids[0]]["state"] == "CANCELLED" and changed[ids[1]]["pending_reason"] == "waits for 2 GPUs"
    pending = store.get_job(ids[3])
    assert pending is not None and first[3]["prediction"] is None
    done = [  # the prediction: twelve jobs like it ran 60 s each
        replace(pending, id=10_000 + k, state=JobState.SUCCEEDED, started_at=T0, finished_at=T0 + timedelta(seconds=60))
        for k in range(12)
    ]
    assert sched.predictions.learn(done, {vision.id: "vision"}, {}) == 12
    after = {j["id"]: j for j in _page(client, store, admin)}
    assert after[ids[0]]["state"] == JobState.CANCELLED.value
    assert after[ids[1]]["pending_reason"] == "waits for 2 GPUs" and after[ids[1]]["pending_code"] == "resources"
    assert after[ids[3]]["predicted_run_s"] and after[ids[3]]["prediction"]  # (checked against the models in _page)
    assert {k: v for k, v in after[ids[2]].items() if "predict" not in k} == {
        k: v for k, v in first[2].items() if "predict" not in k
    }
    # a job with an ETA is made afresh each time (its eta_s counts down): never kept
    sched.pending_info = {ids[2]: (1, datetime.now(UTC) + timedelta(seconds=600))}
    later = {j["id"]: j for j in _page(client, store, admin)}
    again = {j["id"]: j for j in _page(client, store, admin)}
    assert later[ids[2]]["queue_position"] == 1 and 0 < again[ids[2]]["eta_s"] < later[ids[2]]["eta_s"] <= 600


def test_a_pass_during_a_page_never_leaves_its_word_under_an_older_key(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A review's race: the page read the scheduler's word once for its keys and job_out read it again for the JSON;
    # a pass in between stored the new word under the old key, served again once a pass went back to the old word.
    client, store, admin = setup
    sched = context_of(client.app).scheduler
    sched.stop()
    job = store.create_job(JobSpec(command=("train",)), T0).id
    before, meanwhile = {job: "waits for 1 GPU"}, {job: "held: budget used up"}
    sched.pending_reasons = before
    real = sched.predictions.predict

    def a_pass_lands(*args: Any) -> Any:
        sched.pending_reasons = meanwhile
        return real(*args)

    monkeypatch.setattr(sched.predictions, "predict", a_pass_lands)
    r = client.get("/api/v1/jobs", headers=admin)
    assert r.status_code == 200 and r.json()[0]["pending_reason"] == "waits for 1 GPU"  # the word it started with
    monkeypatch.setattr(sched.predictions, "predict", real)
    sched.pending_reasons = before  # a later pass goes back to it
    assert _page(client, store, admin)[0]["pending_reason"] == "waits for 1 GPU"


def test_a_large_job_is_listed_whole_and_not_kept(setup: Setup) -> None:
    client, store, admin = setup
    context_of(client.app).scheduler.stop()  # a pass landing between the page and its check would change the reason
    big = store.create_job(JobSpec(command=("train",), env={f"V{i}": "v" * 4000 for i in range(8)}), T0).id
    small = store.create_job(JobSpec(command=("train",)), T0).id
    page = _page(client, store, admin)
    assert [j["id"] for j in page] == [big, small] and len(page[0]["env"]) == 8
    assert set(context_of(client.app).job_pages._kept) == {small}
