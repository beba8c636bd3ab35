"""GET /jobs filters by `tenant`, `user` and `name` in the store (the portal's history filter): `X-Total-Count` counts
the filtered list, a member's filter never reaches past its tenant, and each bad parameter is refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Setup = tuple[TestClient, SqlStore, dict[str, str]]


@pytest.fixture
def setup(database_url: str, tmp_path: Path) -> Iterator[Setup]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        yield client, store, {"Authorization": f"Bearer {creds.admin_token}"}
    store.close()


def _jobs(store: SqlStore) -> dict[str, int]:
    """vision: alice's train-resnet (finished) and eval_50%; nlp: bob's train-bert. name -> id."""
    vision, nlp = store.create_tenant("vision", T0), store.create_tenant("nlp", T0)
    alice = store.create_user("alice", "member", T0, tenant_id=vision.id)
    bob = store.create_user("bob", "member", T0, tenant_id=nlp.id)
    ids = {}
    for name, tenant, user in (("train-resnet", vision, alice), ("eval_50%", vision, alice), ("Train-BERT", nlp, bob)):
        spec = JobSpec(command=("true",), name=name, tenant_id=tenant.id, user_id=user.id)
        ids[name] = store.create_job(spec, T0).id
    assert store.finish_job(ids["train-resnet"], JobState.FAILED, None, "never placed", T0)
    return ids


def _names(client: TestClient, query: str, headers: dict[str, str]) -> tuple[list[str], str]:
    r = client.get(f"/api/v1/jobs?all=true&{query}", headers=headers)
    assert r.status_code == 200, r.text
    return sorted(j["name"] for j in r.json()), r.headers["X-Total-Count"]


def test_tenant_user_and_name_filter_the_list_and_its_total(setup: Setup) -> None:
    client, store, admin = setup
    _jobs(store)
    cases = {
        "tenant=vision": (["eval_50%", "train-resnet"], "2"),
        "tenant=nlp": (["Train-BERT"], "1"),
        "user=bob": (["Train-BERT"], "1"),
        "name=train": (["Train-BERT", "train-resnet"], "2"),  # any case
        "name=_5": (["eval_50%"], "1"),  # `_` and `%` are the text itself, not wildcards
        "name=%": (["eval_50%"], "1"),
        "name=train&tenant=vision&state=FAILED": (["train-resnet"], "1"),
        "name=train&state=PENDING": (["Train-BERT"], "1"),
        "tenant=nobody": ([], "0"),
        "user=nobody": ([], "0"),
        "name=train&limit=1": (["train-resnet"], "2"),
    }
    for query, expected in cases.items():
        assert _names(client, query, admin) == expected, query


def test_a_members_filter_stays_inside_its_tenant(setup: Setup) -> None:
    client, store, admin = setup
    _jobs(store)
    r = client.post("/api/v1/tokens", json={"name": "t", "user": "alice"}, headers=admin)
    alice = {"Authorization": f"Bearer {r.json()['token']}"}
    assert _names(client, "name=train", alice) == (["train-resnet"], "1")
    assert _names(client, "tenant=vision", alice) == (["eval_50%", "train-resnet"], "2")
    assert _names(client, "tenant=nlp", alice) == ([], "0")  # another tenant: empty, as an unknown one
    assert _names(client, "user=bob", alice) == ([], "0")


@pytest.mark.parametrize(
    ("query", "field"),
    [("tenant=" + "t" * 65, "tenant"), ("user=", "user"), ("name=" + "n" * 256, "name")],
)
def test_a_bad_filter_is_refused_naming_its_field(setup: Setup, query: str, field: str) -> None:
    client, _, admin = setup
    r = client.get(f"/api/v1/jobs?{query}", headers=admin)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field


def test_the_total_counts_what_the_node_and_array_filters_list(setup: Setup) -> None:
    """X-Total-Count counted every job before, whatever `node` or `array_id` narrowed the page to (issue 13)."""
    client, store, admin = setup
    _jobs(store)
    array = 4242
    for i in range(2):
        store.create_job(JobSpec(command=("true",), name=f"task-{i}", array_id=array, array_index=i), T0)
    r = client.get(f"/api/v1/jobs?all=true&array_id={array}", headers=admin)
    assert r.status_code == 200 and len(r.json()) == 2, r.text
    assert r.headers["X-Total-Count"] == "2"  # not the 5 jobs there are in all
    r = client.get("/api/v1/jobs?all=true&node=no-such-node", headers=admin)
    assert r.json() == [] and r.headers["X-Total-Count"] == "0"
