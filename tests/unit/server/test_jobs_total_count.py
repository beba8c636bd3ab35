"""`X-Total-Count` on GET /jobs (the portal's totals) is scoped like the list itself: a member never learns how
many jobs other tenants run. The jobs are put in the store directly: only the listing is under test."""

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


@pytest.fixture
def setup(database_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, SqlStore, dict[str, str]]]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        yield client, store, {"Authorization": f"Bearer {creds.admin_token}"}
    store.close()


def _member(client: TestClient, store: SqlStore, admin: dict[str, str], name: str, tenant: str) -> dict[str, str]:
    """A member of a new `tenant` with an API token the admin made (no login involved)."""
    store.create_user(name, "member", T0, tenant_id=store.create_tenant(tenant, T0).id)
    r = client.post("/api/v1/tokens", json={"name": "t", "user": name}, headers=admin)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


def test_total_count_counts_only_the_callers_tenant(setup: tuple[TestClient, SqlStore, dict[str, str]]) -> None:
    client, store, admin = setup
    alice, bob = _member(client, store, admin, "alice", "vision"), _member(client, store, admin, "bob", "nlp")
    ids: dict[str, list[int]] = {}
    for tenant, n in (("vision", 2), ("nlp", 3)):
        found = store.find_tenant(tenant)
        assert found is not None
        ids[tenant] = [store.create_job(JobSpec(command=("true",), tenant_id=found.id), T0).id for _ in range(n)]
    assert store.finish_job(ids["nlp"][0], JobState.FAILED, None, "never placed", T0)
    cases = {
        "?all=true": (2, 3, 5),
        "?all=true&limit=1": (2, 3, 5),
        "": (2, 2, 4),
        "?state=PENDING&limit=1&newest_first=true": (2, 2, 4),
        "?state=FAILED": (0, 1, 1),
    }
    for query, (for_alice, for_bob, for_admin) in cases.items():
        for who, expected in ((alice, for_alice), (bob, for_bob), (admin, for_admin)):
            r = client.get(f"/api/v1/jobs{query}", headers=who)
            assert r.status_code == 200, r.text
            assert r.headers["X-Total-Count"] == str(expected), (query, who is admin)
            assert len(r.json()) == min(expected, 1 if "limit=1" in query else expected)
