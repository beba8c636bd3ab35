"""Whom jobs run as: the server resolves each job's Unix identity (an admin's mapping, else a UID from the range)
and hands it to the agent; only admins map users, never to uid 0, a system account, a range UID or another
tenant's account."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.core.errors import ValidationError
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.core.unix_identity import (
    JobIdentity,
    UidRange,
    check_mapped_identity,
    compute_job_identity,
    parse_uid_range,
)
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.agents import compute_assignments
from corral.server.settings import Settings
from corral.store.base import StateStore
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store

RANGE = UidRange(200_000, 265_535)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# ---- the pure rules ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200000-265535", UidRange(200_000, 265_535)),
        (" 5000 - 6000 ", UidRange(5000, 6000)),
    ],
)
def test_uid_ranges_parse(text: str, expected: UidRange) -> None:
    assert parse_uid_range(text) == expected


@pytest.mark.parametrize("text", ["", "200000", "0-65535", "999-5000", "6000-5000", "5000-4294967295", "a-b"])
def test_bad_uid_ranges_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_uid_range(text)
    assert e.value.field == "job_uids"


@pytest.mark.parametrize(
    ("user_id", "mapped", "expected"),
    [
        (1, None, JobIdentity(200_001, 200_001, "alice")),
        (65_535, None, JobIdentity(265_535, 265_535, "alice")),
        (7, (5001, 5002), JobIdentity(5001, 5002, "alice")),
        (None, None, JobIdentity(200_000, 200_000, "corral-job")),
    ],
)
def test_job_identity(user_id: int | None, mapped: tuple[int, int] | None, expected: JobIdentity) -> None:
    assert compute_job_identity(user_id, "alice", mapped, RANGE) == expected


def test_a_user_id_beyond_the_range_is_an_error_not_a_wrap() -> None:
    with pytest.raises(ValidationError, match="no UID in 200000-265535"):
        compute_job_identity(65_536, "zed", None, RANGE)


@pytest.mark.parametrize(
    ("uid", "gid", "field"),
    [
        (0, 5000, "uid"),
        (5000, 0, "gid"),
        (999, 5000, "uid"),
        (5000, 27, "gid"),
        (200_002, 5000, "uid"),
        (5000, 265_535, "gid"),
    ],
)
def test_mappings_to_system_or_range_ids_are_refused(uid: int, gid: int, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_mapped_identity(uid, gid, RANGE)
    assert e.value.field == field


# ---- what the agent is handed ---------------------------------------------------------
def _running_job(store: StateStore, user_id: int | None, schedule_id: int | None = None) -> int:
    job = store.create_job(JobSpec(command=("id", "-u"), user_id=user_id, schedule_id=schedule_id), NOW)
    assert store.assign_job(job.id, "n1", [], NOW)
    return job.id


def test_assignments_carry_the_owners_identity(store: SqlStore) -> None:
    node = store.upsert_node("n1", "n1", "simulated", 0, 0, {}, [GpuInfo(0, "GPU-0", "H100-80GB", 81920)], NOW)
    alice = store.create_user("alice", "member", NOW)
    carol = store.create_user("carol", "member", NOW)
    store.set_user_unix_identity(carol.id, 5001, 5100)
    ids = {
        _running_job(store, alice.id): (200_000 + alice.id, 200_000 + alice.id, "alice"),
        _running_job(store, carol.id): (5001, 5100, "carol"),
        _running_job(store, None): (200_000, 200_000, "corral-job"),
    }
    assignments, _ = compute_assignments(store, node, set(), uids=RANGE)
    assert {a.job_id: (a.uid, a.gid, a.unix_user) for a in assignments} == ids


def test_a_job_whose_owner_has_no_uid_fails_with_the_reason(store: StateStore) -> None:
    node = store.upsert_node("n1", "n1", "simulated", 0, 0, {}, [], NOW)
    users = [store.create_user(f"u{i}", "member", NOW) for i in range(3)]
    job_id = _running_job(store, users[2].id)
    assignments, _ = compute_assignments(store, node, set(), uids=UidRange(300_000, 300_000 + users[1].id))
    job = store.get_job(job_id)
    assert assignments == [] and job is not None and job.state is JobState.FAILED
    assert "has no UID in" in job.reason


# ---- the API -----------------------------------------------------------------------
class Api:
    def __init__(self, client: TestClient, admin_token: str) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call("POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": "pw-" * 4})
        assert r.status_code == 201, r.text
        token = self.call("POST", "/tokens", json={"user": name}).json()["token"]
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        a = Api(client, creds.admin_token)
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


def test_admin_maps_a_user_and_everyone_sees_the_identity(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    assert api.call("GET", "/users/alice/unix", auth=alice).json()["source"] == "range"
    r = api.call("PUT", "/users/alice/unix", json={"uid": 5001})
    assert r.status_code == 200, r.text
    assert r.json() == {"user": "alice", "uid": 5001, "gid": 5001, "source": "mapped"}
    assert api.call("GET", "/users/alice/unix", auth=alice).json()["uid"] == 5001
    listed = {u["name"]: (u["unix_uid"], u["unix_gid"]) for u in api.call("GET", "/users").json()}
    assert listed["alice"] == (5001, 5001)
    cleared = api.call("DELETE", "/users/alice/unix").json()
    assert cleared["source"] == "range" and cleared["uid"] > 200_000


def test_a_tenant_admin_cannot_map_its_members_to_any_account(api: Api) -> None:
    boss = api.user("boss", "tenant-admin", "vision")
    api.user("alice", "member", "vision")
    for uid in (0, 1000, 5001):
        assert api.call("PUT", "/users/alice/unix", auth=boss, json={"uid": uid}).status_code in (403, 422)
    assert api.call("PUT", "/users/alice/unix", auth=boss, json={"uid": 5001}).status_code == 403
    assert api.call("GET", "/users/alice/unix").json()["source"] == "range"


def test_members_cannot_read_other_users_identities(api: Api) -> None:
    alice = api.user("alice", "member", "vision")
    api.user("bob", "member", "nlp")
    api.user("carol", "member", "vision")
    assert api.call("GET", "/users/bob/unix", auth=alice).status_code == 404  # another tenant: not even there
    assert api.call("GET", "/users/carol/unix", auth=alice).status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"uid": 0}, "uid"),
        ({"uid": 999}, "uid"),
        ({"uid": 5001, "gid": 0}, "gid"),
        ({"uid": 200_005}, "uid"),
        ({"uid": 2**63}, "uid"),
    ],
)
def test_bad_mappings_are_refused_naming_the_field(api: Api, body: dict[str, int], field: str) -> None:
    api.user("alice", "member", "vision")
    r = api.call("PUT", "/users/alice/unix", json=body)
    assert r.status_code in (400, 422) and r.json()["error"]["field"] == field, r.text  # 422: schema, 400: rules


def test_tenants_never_share_an_account(api: Api) -> None:
    for name, tenant in (("alice", "vision"), ("carol", "vision"), ("bob", "nlp")):
        api.user(name, "member", tenant)
    assert api.call("PUT", "/users/alice/unix", json={"uid": 5001}).status_code == 200
    assert api.call("PUT", "/users/carol/unix", json={"uid": 5001}).status_code == 200  # same tenant: shared home
    r = api.call("PUT", "/users/bob/unix", json={"uid": 5001})
    assert r.status_code == 400 and r.json()["error"]["field"] == "uid"
