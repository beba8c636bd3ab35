"""A submission (one job, a batch) and a cancel wake the scheduler once their answer has been sent, not while it is
being made (a pass woken in the server's own process would take the interpreter from the answer: issue 13's loop
of `corral submit` calls); a replayed submission (same Idempotency-Key) wakes nothing. Real app, SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.context import context_of
from corral.server.settings import Settings
from corral.store.sql import open_store


class Recorder:
    """The app, wrapped: records when an answer's last byte is sent and when the scheduler is woken."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def recording_send(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.events.append("answered")

        await self.app(scope, receive, recording_send if scope["type"] == "http" else send)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[TestClient, Recorder, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=url, schedule_interval_s=3600, alert_interval_s=3600)
    app = create_app(settings, store)
    rec = Recorder(app)
    with TestClient(rec) as client:
        trigger = context_of(app).scheduler.trigger
        real_fire = trigger.fire

        def fire() -> None:
            rec.events.append("wake")
            real_fire()

        trigger.fire = fire  # type: ignore[method-assign]
        yield client, rec, {"Authorization": f"Bearer {creds.admin_token}"}


def test_a_submission_wakes_the_scheduler_after_its_answer(world: tuple[TestClient, Recorder, dict[str, str]]) -> None:
    client, rec, admin = world
    rec.events.clear()
    r = client.post("/api/v1/jobs", json={"command": ["true"], "gpus": 0}, headers=admin)
    assert r.status_code == 201, r.text
    assert rec.events == ["answered", "wake"]

    rec.events.clear()
    r = client.post("/api/v1/jobs/batch", json={"jobs": [{"command": ["a"]}, {"command": ["b"]}]}, headers=admin)
    assert r.status_code == 201 and len(r.json()) == 2, r.text
    assert rec.events == ["answered", "wake"]

    rec.events.clear()
    r = client.post(f"/api/v1/jobs/{r.json()[0]['id']}/cancel", headers=admin)
    assert r.status_code == 200, r.text
    assert rec.events == ["answered", "wake"]


def test_a_replayed_or_refused_submission_wakes_nothing(world: tuple[TestClient, Recorder, dict[str, str]]) -> None:
    client, rec, admin = world
    keyed = {**admin, "Idempotency-Key": "sweep-7"}
    first = client.post("/api/v1/jobs", json={"command": ["true"]}, headers=keyed)
    assert first.status_code == 201, first.text
    rec.events.clear()
    again = client.post("/api/v1/jobs", json={"command": ["true"]}, headers=keyed)
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert rec.events == ["answered"]

    rec.events.clear()
    bad = client.post("/api/v1/jobs", json={"command": [], "gpus": 0}, headers=admin)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "command"
    assert rec.events == ["answered"]


def test_a_stored_submission_whose_answer_fails_still_wakes_the_scheduler(
    world: tuple[TestClient, Recorder, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, rec, admin = world
    import corral.server.routers.jobs as jobs_router

    def broken(*_: object, **__: object) -> object:
        raise RuntimeError("the answer cannot be made")

    monkeypatch.setattr(jobs_router, "job_out", broken)
    client_500 = TestClient(client.app, raise_server_exceptions=False)
    rec.events.clear()
    r = client_500.post("/api/v1/jobs", json={"command": ["true"]}, headers=admin)
    assert r.status_code == 500
    assert "wake" in rec.events  # the job is stored (below): it must not wait for the next periodic pass
    monkeypatch.undo()
    listed = client.get("/api/v1/jobs", params={"all": "true"}, headers=admin).json()
    assert [j["command"] for j in listed] == [["true"]]
