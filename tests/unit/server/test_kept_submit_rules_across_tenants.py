"""A hostile member against the submit rules the server keeps (read_submit_lists, migration 0031): a queue or a
quota made for one tenant never opens anything to another, a member cannot change either, and each change reaches
that tenant's next submission at once, though both tenants' lists were kept just before (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pool_api import TenantApi, open_api


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[TenantApi]:
    with open_api(TenantApi, database_url, tmp_path) as api:
        yield api


def _refused(r: object, field: str) -> None:
    assert r.status_code == 400, r.text  # type: ignore[attr-defined]
    assert r.json()["error"]["field"] == field  # type: ignore[attr-defined]


def test_a_queue_or_quota_of_one_tenant_opens_nothing_to_another(api: TenantApi) -> None:
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    assert api.submit(alice).status_code == 201 and api.submit(bob).status_code == 201  # both tenants' lists kept
    _refused(api.submit(alice, queue="private"), "queue")
    assert api.call("PUT", "/tenants/vision/queues", json={"name": "private"}).status_code == 200
    assert api.submit(alice, queue="private").status_code == 201  # at once, though kept before
    _refused(api.submit(bob, queue="private"), "queue")  # vision's queue is not nlp's
    # a member can make no queue, in another tenant nor in its own, and nothing it tried is kept
    # (another tenant's answers as if it did not exist; its own refuses the role)
    assert api.call("PUT", "/tenants/vision/queues", bob, json={"name": "private"}).status_code == 404
    assert api.call("PUT", "/tenants/nlp/queues", bob, json={"name": "private"}).status_code == 403
    _refused(api.submit(bob, queue="private"), "queue")
    # quotas: vision's pins its GPU jobs to its model at once; nlp's jobs stay unpinned; a member sets none
    assert (
        api.call("PUT", "/tenants/vision/quotas", json={"gpu_model": "H100-80GB", "guaranteed_gpus": 1}).status_code
        == 200
    )
    assert api.submit(alice, gpus=1).json()["gpu_model"] == "H100-80GB"
    assert api.submit(bob, gpus=1).json()["gpu_model"] is None
    assert api.call("PUT", "/tenants/nlp/quotas", bob, json={"guaranteed_gpus": 2}).status_code == 403
    assert api.call("PUT", "/tenants/vision/quotas", bob, json={"guaranteed_gpus": 0}).status_code == 403  # admins
    assert api.submit(alice, gpus=1).json()["gpu_model"] == "H100-80GB"
