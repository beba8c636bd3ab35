"""Repeating jobs through the API and the runner that fires them (SQLite and PostgreSQL).

The runner is driven with explicit times here (its thread is the same `run_due` on the wall clock), so each
rule is checked at the instant it applies: concurrency policies, missed firings after downtime, pause/resume,
a job that stopped being valid."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.schedules import ScheduleRunner
from corral.server.settings import Settings
from corral.store.records import Quota
from corral.store.sql import SqlStore, open_store


class Api:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call(
            "POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text
        token = self.call("POST", "/login", auth={}, json={"username": name, "password": "correct horse"}).json()[
            "token"
        ]
        return {"Authorization": f"Bearer {token}"}

    def schedule(self, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        body = {"schedule": "@daily", "job": {"command": ["true"]}, **kw}
        return self.call("POST", "/schedules", auth=auth, json=body)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(NodeCertApp(create_app(Settings(data_dir=tmp_path, database_url=database_url), store))) as client:
        a = Api(client, store, creds.admin_token)
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(8)]
        assert (
            client.post(
                "/api/v1/agents/register",
                json={"name": "n1", "backend": "simulated", "gpus": gpus},
                headers=NodeAgents(client)("n1"),
            ).status_code
            == 200
        )
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        pytest.param({"schedule": "61 * * * *"}, 400, "schedule", id="bad-cron"),
        pytest.param({"schedule": "@every 0s"}, 400, "schedule", id="zero-interval"),
        pytest.param({"timezone": "Mars/Olympus"}, 400, "timezone", id="unknown-zone"),
        pytest.param({"concurrency": "sometimes"}, 422, "concurrency", id="unknown-policy"),
        pytest.param({"job": {"command": ["x"], "gpus": 99}}, 400, "job.gpus", id="job-too-big-for-any-node"),
        pytest.param({"job": {"command": ["x"], "queue": "nope"}}, 400, "job.queue", id="job-queue-unknown"),
        pytest.param({"job": {"command": []}}, 422, "job.command", id="job-empty-command"),
        pytest.param({"job": {"command": ["x"], "bogus": 1}}, 422, "job.bogus", id="job-unknown-field"),
        pytest.param({"job": None}, 422, "job", id="no-job"),
        pytest.param({"bogus": 1}, 422, "bogus", id="unknown-field"),
    ],
)
def test_bad_schedules_name_the_field_and_create_nothing(
    api: Api, body: dict[str, Any], status: int, field: str
) -> None:
    r = api.schedule(**body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field
    assert api.call("GET", "/schedules").json() == []


def test_create_shows_the_timetable_and_names_default_to_the_job(api: Api) -> None:
    r = api.schedule(
        schedule="0 9 * * MON-FRI",
        timezone="Europe/Paris",
        job={"command": ["python", "train.py"], "gpus": 2, "name": "train"},
    )
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["name"] == "train" and s["concurrency"] == "forbid" and not s["paused"]
    assert "09:00" in s["description"] and "Europe/Paris" in s["description"]
    upcoming = [datetime.fromisoformat(t) for t in s["upcoming"]]
    assert (
        len(upcoming) == 3 and upcoming == sorted(upcoming) and upcoming[0] == datetime.fromisoformat(s["next_run_at"])
    )
    assert all(t.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris")).hour == 9 for t in upcoming)
    assert api.schedule(job={"command": ["train"]}).status_code == 409  # "train" again, same tenant
    assert api.schedule(name="other", job={"command": ["train"]}).status_code == 201


def test_tenants_see_only_their_schedules_and_viewers_cannot_create(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    viewer = api.user("vic", "viewer", "vision")
    mine = api.schedule(auth=alice, name="a").json()
    theirs = api.schedule(auth=bob, name="b").json()
    assert [s["id"] for s in api.call("GET", "/schedules", auth=alice).json()] == [mine["id"]]
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/run"), ("GET", "/jobs")):
        kw = {"json": {"paused": True}} if method == "PATCH" else {}
        r = api.call(method, f"/schedules/{theirs['id']}{path}", auth=alice, **kw)
        assert r.status_code == 404, (method, path, r.text)  # another tenant's schedule does not exist for alice
    assert api.schedule(auth=viewer, name="v").status_code == 403
    assert api.call("GET", "/schedules", auth=viewer).status_code == 200
    assert api.call("POST", f"/schedules/{mine['id']}/run", auth=viewer).status_code == 403
    assert {s["tenant"] for s in api.call("GET", "/schedules").json()} == {"vision", "nlp"}  # admin sees all


def test_run_now_starts_a_job_that_remembers_its_schedule(api: Api) -> None:
    s = api.schedule().json()
    r = api.call("POST", f"/schedules/{s['id']}/run")
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["schedule_id"] == s["id"] and job["state"] in ("PENDING", "RUNNING")
    after = api.call("GET", f"/schedules/{s['id']}").json()
    assert after["runs"] == 1 and after["last_job_id"] == job["id"] and after["active_job_ids"] == [job["id"]]
    assert after["next_run_at"] == s["next_run_at"]  # the timetable did not move
    assert [j["id"] for j in api.call("GET", f"/schedules/{s['id']}/jobs").json()] == [job["id"]]


def test_pause_resume_edit_and_delete(api: Api) -> None:
    s = api.schedule(schedule="@hourly").json()
    paused = api.call("PATCH", f"/schedules/{s['id']}", json={"paused": True}).json()
    assert paused["paused"] and paused["next_run_at"] is None and paused["upcoming"] == []
    edited = api.call("PATCH", f"/schedules/{s['id']}", json={"schedule": "*/5 * * * *", "paused": False}).json()
    nxt = datetime.fromisoformat(edited["next_run_at"])
    assert not edited["paused"] and nxt.minute % 5 == 0 and nxt - datetime.now(UTC) <= timedelta(minutes=5)
    bad = api.call("PATCH", f"/schedules/{s['id']}", json={"job": {"command": ["x"], "gpus": 99}})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "job.gpus"
    assert api.call("GET", f"/schedules/{s['id']}").json()["job"] == {"command": ["true"]}  # unchanged
    assert api.call("DELETE", f"/schedules/{s['id']}").status_code == 204
    assert api.call("GET", f"/schedules/{s['id']}").status_code == 404


# ---- the runner, at chosen instants ------------------------------------------------------------------


@pytest.fixture
def runner(api: Api) -> ScheduleRunner:
    return ScheduleRunner(api.store, Trigger(), NodeNotifier())


def created(api: Api, **kw: Any) -> tuple[int, datetime]:
    """A schedule and its first due time (at least a minute away: the app's own runner thread leaves it alone)."""
    r = api.schedule(**kw)
    assert r.status_code == 201, r.text
    sched = api.store.get_schedule(r.json()["id"])
    assert sched is not None
    return sched.id, sched.next_run_at


def test_forbid_skips_while_the_last_run_is_active_then_starts_again(api: Api, runner: ScheduleRunner) -> None:
    sid, due = created(api, schedule="@every 1h")
    started = runner.run_due(due)
    assert len(started) == 1 and started[0].spec.schedule_id == sid
    assert runner.run_due(due + timedelta(hours=1)) == []  # the first is still pending: skipped
    s = api.store.get_schedule(sid)
    assert s is not None and s.skipped == 1 and "still active" in s.last_error
    # The run starts and ends (a job only reaches SUCCEEDED from RUNNING: core/states.py's table).
    assert api.store.assign_job(started[0].id, "n1", [0], due + timedelta(minutes=1))
    assert api.store.finish_job(started[0].id, JobState.SUCCEEDED, 0, "", due + timedelta(hours=1, minutes=1))
    assert len(runner.run_due(due + timedelta(hours=2))) == 1
    assert api.store.get_schedule(sid).runs == 2  # type: ignore[union-attr]


def test_allow_starts_alongside_and_replace_cancels_the_active_run(api: Api, runner: ScheduleRunner) -> None:
    allow, due_a = created(api, name="allow", schedule="@every 1h", concurrency="allow")
    replace, due_r = created(api, name="replace", schedule="@every 1h", concurrency="replace")
    first = runner.run_due(max(due_a, due_r))
    assert sorted(j.spec.schedule_id for j in first) == sorted([allow, replace])
    later = max(due_a, due_r) + timedelta(hours=1)
    second = {j.spec.schedule_id: j for j in runner.run_due(later)}
    assert set(second) == {allow, replace}
    active = [JobState.PENDING, JobState.RUNNING]  # the app's own scheduler may have started them on n1 meanwhile
    active_allow = [j.id for j in api.store.list_jobs(states=active, schedule_id=allow)]
    assert len(active_allow) == 2
    old_replace = next(j for j in first if j.spec.schedule_id == replace)
    assert api.store.get_job(old_replace.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert api.store.get_job(second[replace].id).state in active  # type: ignore[union-attr]


def test_firings_missed_while_down_run_once_and_are_counted(api: Api, runner: ScheduleRunner) -> None:
    sid, due = created(api, schedule="@every 10m")
    started = runner.run_due(due + timedelta(minutes=35))  # the server was down for 35 minutes
    assert len(started) == 1
    s = api.store.get_schedule(sid)
    assert s is not None and s.missed == 3 and s.runs == 1
    assert s.next_run_at == due + timedelta(minutes=40)  # back on its rhythm, not catching up one by one
    assert "started 2100.0 s late" in api.store.list_events(started[0].id)[-1].message


def test_a_job_that_stopped_being_valid_is_skipped_with_the_reason(api: Api, runner: ScheduleRunner) -> None:
    sid, due = created(api, schedule="@every 1h", job={"command": ["x"], "gpus": 1, "gpu_model": "H100"})
    tenant_id = api.store.get_schedule(sid).tenant_id  # type: ignore[union-attr]
    api.store.set_quota(Quota(tenant_id=tenant_id, gpu_model="A100", guaranteed_gpus=0, max_gpus=4))
    assert runner.run_due(due) == []
    s = api.store.get_schedule(sid)
    assert s is not None and s.skipped == 1 and "no longer valid" in s.last_error and "gpu_model" in s.last_error
    assert s.next_run_at == due + timedelta(hours=1)  # it tries again next time


def test_paused_schedules_do_not_fire_and_resume_without_catch_up(api: Api, runner: ScheduleRunner) -> None:
    sid, due = created(api, schedule="@every 1m")
    api.call("PATCH", f"/schedules/{sid}", json={"paused": True})
    assert runner.run_due(due + timedelta(hours=1)) == []
    resumed = api.call("PATCH", f"/schedules/{sid}", json={"paused": False}).json()
    nxt = datetime.fromisoformat(resumed["next_run_at"])
    assert timedelta(0) < nxt - datetime.now(UTC) <= timedelta(minutes=1)
    assert api.store.get_schedule(sid).missed == 0  # type: ignore[union-attr]
