"""Where jobs' web UIs are served: their own origin by default (the API port + 1), or the API's own port when
CORRAL_JOB_UI_PORT=0; links and redirects name the right place, also behind a reverse proxy."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store


@pytest.mark.parametrize(
    ("port", "ui_port", "effective"),
    [(8600, None, 8601), (9000, None, 9001), (9000, 7000, 7000), (9000, 0, 0), (65535, None, 0), (0, None, 0)],
)
def test_default_job_ui_port_is_next_to_the_api(port: int, ui_port: int | None, effective: int) -> None:
    assert Settings(port=port, job_ui_port=ui_port).effective_job_ui_port == effective


def _client(tmp_path: Path, **settings: object) -> tuple[TestClient, dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, tmp_path)
    app = create_app(Settings(data_dir=tmp_path, database_url=url, **settings), store)  # type: ignore[arg-type]
    return TestClient(app), {"Authorization": f"Bearer {creds.admin_token}"}


def test_api_port_redirects_job_ui_links_to_their_origin(tmp_path: Path) -> None:
    client, auth = _client(tmp_path, port=8600, job_ui_url="https://jobs.corral.example/")
    r = client.get("/proxy/jobs/7/lab/tree?token=x", headers=auth, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "https://jobs.corral.example/proxy/jobs/7/lab/tree?token=x"
    r = client.post("/proxy/jobs/7/api/kernels", headers=auth)
    assert r.status_code == 404 and "https://jobs.corral.example/proxy/jobs/7/" in r.json()["error"]["message"]
    ui = TestClient(client.app.state.job_ui_app)
    assert ui.get("/proxy/jobs/7/", headers=auth).status_code == 404  # no such job: the UI origin's own answer
    assert ui.get("/api/v1/jobs", headers=auth).status_code == 404  # and no API there


def test_without_a_job_ui_port_the_api_port_serves_them(tmp_path: Path) -> None:
    client, auth = _client(tmp_path, job_ui_port=0)
    assert client.app.state.job_ui_app is None
    r = client.get("/proxy/jobs/7/", headers=auth, follow_redirects=False)
    assert r.status_code == 404 and "job '7'" in r.json()["error"]["message"]
