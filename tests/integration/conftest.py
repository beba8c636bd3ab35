"""Shared setup for the integration tests: the job proxy's app, and moto's server for the AWS provider's."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from corral.api.schemas import WebPortReport
from corral.core.tenancy import DEFAULT_TENANT
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.routers import proxy
from corral.server.settings import Settings
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store
from moto_server import MotoUnavailable, run_moto_server
from realparts import missing_real_part


@dataclass(frozen=True)
class ProxyApp:
    """The app over a real SQLite store (API and job-UI origins) and a RUNNING job whose web UI is at a port (its
    node's agent vouching that the job's own processes listen there)."""

    api: TestClient
    ui: TestClient
    job: int
    admin: dict[str, str]
    store: SqlStore

    def new_token(self, **body: str) -> tuple[int, str]:
        """A token made through the API as the admin (`user=` for another user's): its id and secret."""
        r = self.api.post("/api/v1/tokens", json=body, headers=self.admin)
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["token"]

    def login(self) -> tuple[dict[str, str], str]:
        """Log the admin in on the web: the session-cookie header to send, and the CSRF token for logout."""
        r = self.api.post("/web/login", json={"token": self.admin["Authorization"].removeprefix("Bearer ")})
        assert r.status_code == 200, r.text
        return {"Cookie": f"corral_session={self.api.cookies['corral_session']}"}, r.json()["csrf"]


@pytest.fixture
def proxy_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], ProxyApp]]:
    """A factory: `proxy_app(port)` for a job serving its web UI at 127.0.0.1:port. Access is rechecked every
    0.1 s. No lifespan (no `with`): the scheduler and the node watch stay off, so the job stays RUNNING."""
    monkeypatch.setattr(proxy, "ACCESS_RECHECK_S", 0.1)
    stores: list[SqlStore] = []

    def make(port: int) -> ProxyApp:
        url = f"sqlite:///{tmp_path / 'c.db'}"
        store = open_store(url)
        stores.append(store)
        creds = ensure_credentials(store, tmp_path)
        app = create_app(Settings(data_dir=tmp_path, database_url=url), store)
        now = datetime.now(UTC)
        store.upsert_node("node-a", "node-a", "simulated", 0, 0, {}, [], now, address="127.0.0.1")
        tenant = store.find_tenant(DEFAULT_TENANT)
        assert tenant is not None
        job = store.create_job(JobSpec(command=("serve",), port=port, tenant_id=tenant.id), now)
        assert store.assign_job(job.id, "node-a", [], now)
        # as node-a's agent reports it: only the job's own processes listen on its port (agent/webports.py)
        app.state.ctx.web_ports.record("node-a", [WebPortReport(job_id=job.id, attempt=1, port=port, listening=True)])
        return ProxyApp(
            TestClient(app),
            TestClient(app.state.job_ui_app),
            job.id,
            {"Authorization": f"Bearer {creds.admin_token}"},
            store,
        )

    yield make
    for store in stores:
        store.close()


# ---- moto's server (AWS APIs over real HTTP): the aws provider's tests ----------------------------------------
AWS_REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server for this worker, validating AMIs as EC2 does (an unknown AMI is an error, not a machine)."""
    try:
        with run_moto_server({"MOTO_ENABLE_AMI_VALIDATION": "true"}) as endpoint:
            yield endpoint
    except MotoUnavailable as e:
        missing_real_part(f"moto's server (AWS APIs): {e}", "make test installs it (pip install -e '.[dev]')")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and region for this test only; a developer's own ~/.aws and profile are kept out."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_AWS_REGION", AWS_REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
