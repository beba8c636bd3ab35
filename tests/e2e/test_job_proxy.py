"""A job's own web UI opens through Corral's authenticated proxy (real server, agent and job processes)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import Corral, free_port, wait_for

pytestmark = pytest.mark.e2e


def test_job_web_ui_through_the_proxy(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    # (in the job's own dir: the job runs as a user of its own, who cannot read the test's tmp_path)
    job = c.submit(
        "--web-ui",
        "--",
        "sh",
        "-c",
        "echo prefix=$CORRAL_PROXY_PREFIX port=$PORT; printf 'hello from the job' > index.html; "
        "exec python3 -m http.server $CORRAL_JOB_PORT --bind 127.0.0.1",
    )
    # RUNNING comes first; the web URL once the agent's sync has handed the job its port (on a loaded CI machine
    # the two were seen apart)
    shown = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j["web_url"] and j, 30, "running, web UI")
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
    assert f"port={c.job(job)['port']}" in c.cli("logs", str(job)).stdout  # $PORT is $CORRAL_JOB_PORT
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 30, "cancelled")
    r = httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html", headers=auth)
    assert r.status_code == 409 and "CANCELLED" in r.json()["error"]["message"]


def test_the_proxy_reaches_only_a_port_the_jobs_own_processes_hold(corral_factory: Any) -> None:
    """The old proxy connected to whatever port a job declared: the Corral API's own, another job's UI, any port of
    the node. Now each job gets a port of its own and the proxy connects only while the job's processes hold it."""
    c: Corral = corral_factory()
    c.start()
    auth = {"Authorization": f"Bearer {(c.data_dir / 'admin-token').read_text().strip()}"}
    serve = 'printf "the victim\'s notebook" > index.html; exec python3 -m http.server {} --bind 127.0.0.1'

    def proxied(job: int) -> httpx.Response:
        return httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html", headers=auth)

    victim = c.submit("--web-ui", "--", "sh", "-c", serve.format("$CORRAL_JOB_PORT"))
    wait_for(lambda: proxied(victim).status_code == 200, 30, "the victim's web UI answers through the proxy")
    victim_port = c.job(victim)["port"]
    # Declaring the API's port or the victim's (the old --port N) no longer gets it; nor does listening elsewhere.
    api_thief = c.submit("--port", str(c.port), "--", "sleep", "600")
    ui_thief = c.submit("--port", str(victim_port), "--", "sleep", "600")
    stray = c.submit("--web-ui", "--", "sh", "-c", serve.format(free_port()))
    # A job without a UI of its own takes another job's assigned port (that job listens on nothing).
    squatted = c.submit("--web-ui", "--", "sleep", "600")
    wait_for(lambda: c.job(squatted)["port"], 30, "the squatted job handed to its node")
    squatter = c.submit("--", "sh", "-c", serve.format(c.job(squatted)["port"]))
    for job in (api_thief, ui_thief, stray, squatter):
        wait_for(lambda: c.job(job)["state"] == "RUNNING", 30, f"job {job} running")
    for job in (api_thief, ui_thief, stray):
        wait_for(lambda: c.job(job)["port"], 30, f"job {job} handed to its node")
    ports = {c.job(j)["port"] for j in (victim, api_thief, ui_thief, stray, squatted)}
    assert len(ports) == 5 and c.port not in ports  # each its own, none the API's
    for job in (api_thief, ui_thief, stray):
        r = proxied(job)
        assert r.status_code == 409 and "not listening" in r.json()["error"]["message"], (job, r.text)
    wait_for(lambda: "not the job's" in proxied(squatted).text, 30, "the squatter's listener reported as foreign")
    assert proxied(squatted).status_code == 409
    assert proxied(victim).text == "the victim's notebook"  # the victim's own UI is still its own
