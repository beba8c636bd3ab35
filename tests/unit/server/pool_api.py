"""The API of a real app over a real store (SQLite or PostgreSQL) for the pools and budgets tests: an admin, one
registered node n1 with 2 H100s, tenants vision and nlp, and the autoscaler kept from acting (the pool nodes a
test writes by hand stay as written; no node is ever started)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from node_certs import NodeAgents, NodeCertApp

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store


class TenantApi:
    def __init__(self, client: TestClient, store: SqlStore, admin_token: str) -> None:
        self.client, self.store = client, store
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    @property
    def ctx(self) -> Any:
        return self.client.app.state.ctx  # type: ignore[attr-defined]

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

    def submit(self, auth: dict[str, str], **kw: Any) -> Any:
        return self.call("POST", "/jobs", auth=auth, json={"command": ["true"], **kw})


@contextmanager
def open_api(kind: type[TenantApi], database_url: str, tmp_path: Path, **settings: Any) -> Iterator[Any]:
    """An app of `kind` (a TenantApi) with n1, vision and nlp; `settings`: more Settings fields."""
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    config = Settings(data_dir=tmp_path, database_url=database_url, gateway_port=0, **settings)
    with TestClient(NodeCertApp(create_app(config, store))) as client:
        a = kind(client, store, creds.admin_token)
        a.ctx.autoscaler.leading = lambda: False  # no pool node is ever started or released here
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)]
        r = client.post(
            "/api/v1/agents/register",
            json={"name": "n1", "backend": "simulated", "gpus": gpus},
            headers=NodeAgents(client)("n1"),
        )
        assert r.status_code == 200, r.text
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a
