"""What the server's settings allow in a job (host mounts under CORRAL_ALLOWED_MOUNTS, staging from the tenant's
CORRAL_STAGE_PATHS) holds for every way a job comes to be: a submission, a schedule (created, changed, run now,
fired by the runner) and a service's replicas. Before, schedules and services were checked as if the server allowed
no mounts and no shared storage, so a schedule or service with an allowed mount was refused, and a firing could
never stage from shared storage. What the settings forbid stays forbidden everywhere (SQLite and PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pool_api import TenantApi, open_api

from corral.server.context import context_of

IMAGE = "registry.example/train:1"


class Api(TenantApi):
    shared: Path  # each tenant's shared dir is shared/TENANT (CORRAL_STAGE_PATHS)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    shared = tmp_path / "shared"
    (shared / "vision").mkdir(parents=True)
    (shared / "nlp").mkdir(parents=True)
    settings = {"allowed_mounts": "/srv/datasets", "stage_paths": f"{shared}/{{tenant}}"}
    with open_api(Api, database_url, tmp_path, **settings) as api:
        api.shared = shared
        yield api


@pytest.fixture
def alice(api: Api) -> dict[str, str]:
    return api.user("alice", "member", "vision")


def mounted(source: str) -> dict[str, Any]:
    return {"image": IMAGE, "command": ["python", "train.py"], "mounts": [f"{source}:/data:ro"]}


def staged(api: Api, tenant: str) -> dict[str, Any]:
    return {"command": ["python", "train.py"], "stage_in": [f"{api.shared / tenant}/labels.csv:labels.csv"]}


def test_a_submission_an_allowed_mount_and_staging(api: Api, alice: dict[str, str]) -> None:
    """The baseline the other ways must match."""
    assert api.call("POST", "/jobs", alice, json=mounted("/srv/datasets/imagenet")).status_code == 201
    assert api.call("POST", "/jobs", alice, json=staged(api, "vision")).status_code == 201


def test_a_schedule_with_an_allowed_mount_is_created_run_now_and_fired(api: Api, alice: dict[str, str]) -> None:
    body = {"schedule": "@every 1h", "concurrency": "allow", "job": mounted("/srv/datasets/a")}
    r = api.call("POST", "/schedules", alice, json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    now = api.call("POST", f"/schedules/{sid}/run", alice)
    assert now.status_code == 201, now.text
    assert now.json()["mounts"] == ["/srv/datasets/a:/data:ro"]
    # the server's own runner fires it (at a chosen instant) with the same rules
    runner = context_of(api.client.app).schedules
    schedule = api.store.get_schedule(sid)
    assert schedule is not None
    fired = runner.run_due(schedule.next_run_at + timedelta(seconds=1))
    assert [j.spec.container.mounts[0].source for j in fired if j.spec.container] == ["/srv/datasets/a"]
    changed = api.call("PATCH", f"/schedules/{sid}", alice, json={"job": mounted("/srv/datasets/b")})
    assert changed.status_code == 200, changed.text


def test_a_schedule_that_stages_from_its_tenants_shared_dir_fires(api: Api, alice: dict[str, str]) -> None:
    r = api.call("POST", "/schedules", alice, json={"schedule": "@every 1h", "job": staged(api, "vision")})
    assert r.status_code == 201, r.text
    schedule = api.store.get_schedule(r.json()["id"])
    assert schedule is not None
    fired = context_of(api.client.app).schedules.run_due(schedule.next_run_at + timedelta(seconds=1))
    assert len(fired) == 1 and fired[0].spec.stage_in[0].source.endswith("/vision/labels.csv")
    again = api.store.get_schedule(schedule.id)
    assert again is not None and again.runs == 1 and not again.last_error


@pytest.mark.parametrize(
    ("job", "field", "problem"),
    [
        pytest.param(mounted("/etc"), "job.mounts", "not under a directory this cluster allows", id="mount-outside"),
        pytest.param(None, "job.stage_in", "", id="another-tenants-shared-dir"),
    ],
)
def test_a_schedule_is_refused_what_the_settings_forbid(
    api: Api, alice: dict[str, str], job: dict[str, Any] | None, field: str, problem: str
) -> None:
    body = {"schedule": "@every 1h", "job": job or staged(api, "nlp")}
    r = api.call("POST", "/schedules", alice, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field and problem in r.json()["error"]["message"]
    assert api.call("GET", "/schedules", alice).json() == []


def test_a_service_with_an_allowed_mount_starts_its_replica(api: Api, alice: dict[str, str]) -> None:
    body = {"name": "web", "image": IMAGE, "port": 8000, "mounts": ["/srv/datasets/models:/models:ro"]}
    r = api.call("POST", "/services", alice, json=body)
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 20
    while not (
        replicas := [j for j in api.call("GET", "/jobs", alice).json() if j.get("service_id") == r.json()["id"]]
    ):
        assert time.monotonic() < deadline, "the controller started no replica"
        time.sleep(0.05)
    assert replicas[0]["mounts"] == ["/srv/datasets/models:/models:ro"]
    bad = api.call("PATCH", "/services/web", alice, json={"mounts": ["/root:/models"]})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "mounts", bad.text
    refused = api.call("POST", "/services", alice, json={**body, "name": "web2", "mounts": ["/etc:/x"]})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "mounts", refused.text


def test_the_runner_without_the_settings_rules_would_skip_what_it_now_fires(api: Api, alice: dict[str, str]) -> None:
    """The failing half of the fix: a runner built without the server's rules skips the firing, naming why."""
    from corral.server.services.notify import NodeNotifier, Trigger
    from corral.server.services.schedules import ScheduleRunner

    r = api.call("POST", "/schedules", alice, json={"schedule": "@every 1h", "job": mounted("/srv/datasets/a")})
    schedule = api.store.get_schedule(r.json()["id"])
    assert schedule is not None
    bare = ScheduleRunner(api.store, Trigger(), NodeNotifier())
    assert bare.run_due(schedule.next_run_at + timedelta(seconds=1)) == []
    skipped = api.store.get_schedule(schedule.id)
    assert skipped is not None and "mount" in skipped.last_error
    assert datetime.now(UTC) < skipped.next_run_at + timedelta(hours=2)
