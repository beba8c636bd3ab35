"""An unknown page path answers the portal's 404 page (HTML, status 404); unknown API and other machine paths keep
the JSON error body their clients parse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.server.app import create_app
from corral.server.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'corral.db'}")
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.mark.parametrize("path", ["/nosuchpage", "/nodes/a/b/c", "/jobs/12/nothing"])
def test_an_unknown_page_is_the_portals_404_page(client: TestClient, path: str) -> None:
    r = client.get(path, headers={"Accept": "text/html"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert '<main id="app"' in r.text and "/static/app.js" in r.text  # the shell, whose router draws the 404 view
    assert "Content-Security-Policy" in r.headers


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/api/v1/nosuch"), ("GET", "/api/nosuch"), ("GET", "/web/nosuch"), ("POST", "/nosuchpage")],
)
def test_an_unknown_machine_path_stays_a_json_404(client: TestClient, method: str, path: str) -> None:
    r = client.request(method, path, headers={"Accept": "text/html"})
    assert r.status_code in (404, 405)
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["code"] == "http_error"
