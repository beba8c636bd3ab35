"""A job's own web UI opens through Corral's authenticated proxy (real server, agent and job processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Corral, free_port, wait_for

pytestmark = pytest.mark.e2e


def test_job_web_ui_through_the_proxy(corral_factory: Any, tmp_path: Path) -> None:
    c: Corral = corral_factory()
    c.start()
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("hello from the job")
    port = free_port()
    job = c.submit("--port", str(port), "--workdir", str(site), "--", "sh", "-c",
                   "echo prefix=$CORRAL_PROXY_PREFIX; exec python3 -m http.server $CORRAL_PORT --bind 127.0.0.1")
    shown = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 30, "running")
    assert shown["web_url"] == f"{c.ui_url}/proxy/jobs/{job}/"  # the job-UI origin, apart from the API's
    token = (c.data_dir / "admin-token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}

    def page() -> httpx.Response | None:
        r = httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html", headers=auth)
        return r if r.status_code == 200 else None

    r = wait_for(page, 30, "the job's web UI answers through the proxy")
    assert r.text == "hello from the job"
    assert httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html").status_code == 401
    # The API port sends old links to the job-UI origin, and the job-UI origin serves nothing but job UIs.
    moved = httpx.get(f"{c.url}/proxy/jobs/{job}/index.html?x=1", headers=auth)
    assert moved.status_code == 307 and moved.headers["location"] == f"{c.ui_url}/proxy/jobs/{job}/index.html?x=1"
    assert httpx.post(f"{c.url}/proxy/jobs/{job}/index.html", headers=auth).status_code == 404
    for path in ("/api/v1/jobs", "/", "/jobs", "/web/session", "/static/app.js"):
        assert httpx.get(f"{c.ui_url}{path}", headers=auth).status_code == 404, path
    assert "prefix=/proxy/jobs/" in c.cli("logs", str(job)).stdout
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 30, "cancelled")
    r = httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html", headers=auth)
    assert r.status_code == 409 and "CANCELLED" in r.json()["error"]["message"]
