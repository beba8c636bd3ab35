"""A job's WebSocket app through the proxy from a real browser: the session cookie is the credential on the
server's own pages, and a page of another origin on the same host (which the browser sends the cookie from:
cookies ignore ports, and SameSite treats the two as one site) is refused."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import JOB_PYTHON, JOB_PYTHONPATH, free_port, wait_for

from .conftest import Cluster, Tab

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]
ECHO_APP = Path(__file__).resolve().parents[1] / "e2e" / "ws_echo_app.py"

# Open a WebSocket, send a text and a binary frame, and report what happened (in the page).
ROUND_TRIP = """async (url) => {
  const ws = new WebSocket(url, ["corral-test"]);
  ws.binaryType = "arraybuffer";
  const got = [];
  const done = new Promise((resolve) => {
    ws.onmessage = (e) => {
      got.push(typeof e.data === "string" ? e.data : Array.from(new Uint8Array(e.data)));
      if (got.length === 2) ws.close(4003, "done");
    };
    ws.onclose = (e) => resolve({opened: opened, code: e.code, got: got, protocol: ws.protocol});
  });
  let opened = false;
  ws.onopen = () => { opened = true; ws.send("from the browser"); ws.send(new Uint8Array([0, 1, 255])); };
  const late = new Promise((resolve) => setTimeout(() => resolve({opened: opened, code: null, got: got,
    protocol: ws.protocol, location: location.href}), 15000));
  return await Promise.race([done, late]);
}"""


@pytest.fixture
def echo_job(cluster: Cluster) -> Iterator[int]:
    r = cluster.api(
        "POST",
        "/jobs",
        json={
            "command": [JOB_PYTHON, str(ECHO_APP)],
            "port": free_port(),
            "env": {"PYTHONPATH": JOB_PYTHONPATH},
            "name": "ws-echo",
        },
    )
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    wait_for(lambda: cluster.api("GET", f"/jobs/{job}").json()["state"] == "RUNNING", 30, "echo job running")
    yield job
    cluster.api("POST", f"/jobs/{job}/cancel")
    wait_for(lambda: cluster.api("GET", f"/jobs/{job}").json()["state"] == "CANCELLED", 30, "echo job cancelled")


@pytest.fixture
def other_origin() -> Iterator[str]:
    """A page on the same host as Corral, another port: another origin, but the same site."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b'<!doctype html><link rel="icon" href="data:,"><p>another app on this host</p>'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_browser_websocket_with_the_session_cookie(
    admin_tab: Tab, cluster: Cluster, echo_job: int, other_origin: str
) -> None:
    url = f"ws://127.0.0.1:{cluster.ui_port}/proxy/jobs/{echo_job}/ws"
    page = admin_tab.page
    admin_tab.goto(f"/jobs/{echo_job}")  # logs in: the session cookie is the host's, on every port

    def job_page() -> bool:  # the job's own page, on the job-UI origin, as its app would open its socket
        return page.goto(f"{cluster.ui_url}/proxy/jobs/{echo_job}/page").status == 200  # type: ignore[union-attr]

    # Until the app listens the proxy says 409; the app's plain-text page has no icon (favicon.ico is 404).
    admin_tab.allowed += [re.compile(r"status of 409"), re.compile(r"/proxy/jobs/\d+/page: .*status of 404")]
    wait_for(job_page, 30, "the job's app serves its page through the proxy")
    result = page.evaluate(ROUND_TRIP, url)
    assert result == {"opened": True, "code": 4003, "got": ["from the browser", [0, 1, 255]], "protocol": "corral-test"}

    # Another origin on the same host sends the cookie too, and is refused (403). (The portal's own pages may
    # not even try: their Content-Security-Policy allows connections to the portal's origin only.)
    admin_tab.allowed.append(re.compile(r"WebSocket connection to .* failed"))
    page.goto(other_origin)
    result = page.evaluate(ROUND_TRIP, url)
    assert result["opened"] is False and result["code"] == 1006
    refusals = [e for e in admin_tab.errors if "WebSocket connection to" in e]
    assert refusals and all("403" in e for e in refusals), refusals


# Run in a job's page: what can it do with the session of the user who opened it?
PROBE_API = """async (api) => {
  const out = {};
  const csrf = (document.cookie.match(/corral_csrf=([^;]+)/) || [])[1] || "";
  out.sameOriginApi = (await fetch("/api/v1/jobs")).status;
  try { await fetch(api + "/api/v1/jobs", {credentials: "include"}); out.readApi = "read"; }
  catch (e) { out.readApi = "blocked"; }
  try {
    await fetch(api + "/api/v1/tenants", {method: "POST", credentials: "include",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}, body: JSON.stringify({name: "evil"})});
    out.writeApi = "sent";
  } catch (e) { out.writeApi = "blocked"; }
  return out;
}"""


def test_a_jobs_page_cannot_use_the_session_of_who_opens_it(admin_tab: Tab, cluster: Cluster, echo_job: int) -> None:
    page = admin_tab.page
    admin_tab.goto(f"/jobs/{echo_job}")
    admin_tab.allowed += [
        re.compile(r"status of 409"),
        re.compile(r"status of 404"),
        re.compile(r"CORS"),
        re.compile(r"Failed to load resource"),
    ]
    wait_for(
        lambda: page.goto(f"{cluster.ui_url}/proxy/jobs/{echo_job}/page").status == 200,
        30,  # type: ignore[union-attr]
        "the job's page",
    )
    got = page.evaluate(PROBE_API, cluster.url)
    assert got == {"sameOriginApi": 404, "readApi": "blocked", "writeApi": "blocked"}, got
    assert "evil" not in {t["name"] for t in cluster.api("GET", "/tenants").json()}
