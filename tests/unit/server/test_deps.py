"""Typed dependencies: one ServerContext per server, shared by the API, job-UI and agent apps, read by the routes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral.server.app import create_agent_app, create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.context import ServerContext, context_of, job_ui_app_of
from corral.server.settings import Settings
from corral.store.sql import open_store


def _app(tmp_path: Path) -> tuple[FastAPI, dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    return create_app(Settings(data_dir=tmp_path, database_url=url, port=8600), store), {
        "Authorization": f"Bearer {creds.admin_token}"
    }


def test_the_three_apps_share_one_context(tmp_path: Path) -> None:
    app, _ = _app(tmp_path)
    ui = job_ui_app_of(app)
    assert ui is not None  # CORRAL_JOB_UI_PORT defaults to the API port + 1
    ctx = context_of(app)
    assert context_of(ui) is ctx and context_of(create_agent_app(app)) is ctx
    assert ctx.telemetry is ctx.alerting.telemetry  # one telemetry service, the alerts read what agents send


def test_an_app_the_factory_did_not_build_is_refused() -> None:
    with pytest.raises(RuntimeError, match="create_app"):
        context_of(FastAPI())


def test_routes_read_the_context_the_app_holds_now(tmp_path: Path) -> None:
    """Routes take their components from app.state.ctx on every request (nothing is captured at build time), so a
    context replaced as a whole (a test's double) is what the next request sees."""
    app, admin = _app(tmp_path)
    client = TestClient(app)
    assert client.get("/api/v1/whoami", headers=admin).json()["user"] == "admin"

    class Unreachable:  # the one method /healthz calls, failing
        def count_users(self) -> int:
            raise ConnectionError("database down")

    app.state.ctx = dataclasses.replace(context_of(app), store=Unreachable())  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        client.get("/healthz")


def test_the_context_is_frozen(tmp_path: Path) -> None:
    ctx: ServerContext = context_of(_app(tmp_path)[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.store = ctx.store  # type: ignore[misc]
