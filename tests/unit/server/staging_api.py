"""The API of a real app over a real store (SQLite or PostgreSQL) for the data-staging tests: an admin, two
registered nodes n1 and n2 with 2 H100s each, the given tenants, staging allowed from each tenant's dir under
`shared/` and from a read-only `datasets/`, one S3 endpoint allowed; the tests run the scheduling passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from corral.core.resources import GpuInfo
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.staging import compute_stage_orders
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

ENDPOINT = "http://127.0.0.1:9"  # allowed by the server; never contacted here


class StagingApi:
    def __init__(self, client: TestClient, admin_token: str, shared: Path, key: str) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin_token}"}
        self.shared = shared
        self.key = key  # the s3 secrets' value

    @property
    def ctx(self) -> Any:
        return self.client.app.state.ctx  # type: ignore[attr-defined]

    @property
    def store(self) -> SqlStore:
        return self.ctx.store  # type: ignore[no-any-return]

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, tenant: str) -> dict[str, str]:
        r = self.call("POST", "/users", json={"name": name, "role": "member", "tenant": tenant, "password": "pw-pw-pw"})
        assert r.status_code == 201, r.text
        r = self.call("POST", "/login", auth={}, json={"username": name, "password": "pw-pw-pw"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def submit(self, auth: dict[str, str], **body: Any) -> Any:
        """POST /jobs as `auth`: a `train` command with these fields."""
        return self.call("POST", "/jobs", auth=auth, json={"command": ["train"], **body})

    def s3_secret(self, auth: dict[str, str], name: str = "s3", endpoint: str | None = ENDPOINT, **extra: Any) -> Any:
        body: dict[str, Any] = {"name": name, "value": self.key, "kind": "s3", "username": "AKIAEXAMPLE", **extra}
        if endpoint:
            body["host"] = endpoint
        return self.call("POST", "/secrets", auth=auth, json=body)

    def orders(self, node: str) -> tuple[list[Any], list[Any]]:
        s = self.ctx.settings
        return compute_stage_orders(self.store, node, self.ctx.keyring, s.staging_rules, s.job_uid_range)

    def run_pass(self) -> None:
        for n in ("n1", "n2"):
            self.store.touch_node(n, datetime.now(UTC))
        self.ctx.scheduler.run_once(datetime.now(UTC))

    def job(self, job_id: int) -> Any:
        job = self.store.get_job(job_id)
        assert job is not None
        return job


def _gpu(i: int) -> GpuInfo:
    return GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB", memory_mib=81920)


@contextmanager
def open_staging_api(database_url: str, tmp_path: Path, tenants: Sequence[str], key: str) -> Iterator[StagingApi]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    for node in ("n1", "n2"):
        store.upsert_node(node, node, "simulated", 8000, 65536, {}, [_gpu(0), _gpu(1)], datetime.now(UTC))
    shared = tmp_path / "shared"
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        stage_paths=f"{shared}/{{tenant}},{tmp_path}/datasets:ro",
        stage_s3_endpoints=ENDPOINT,
        schedule_interval_s=3600,  # the tests run the passes themselves (a submit still wakes the loop)
    )
    with TestClient(create_app(settings, store)) as client:
        a = StagingApi(client, creds.admin_token, shared, key)
        for name in tenants:
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a
