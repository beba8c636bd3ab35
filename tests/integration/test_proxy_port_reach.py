"""The job proxy reaches only the port Corral assigned to the job, and only while the job's node vouches that the
job's own processes listen there. Against the old proxy, which connected to whatever port a job declared, a
member's job declaring the Corral API's port (or another job's, or sshd's) read it through the proxy: here a real
HTTP server plays that port, and the proxy never reaches it. The app over a real SQLite store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from corral.api.schemas import WebPortReport
from corral.core.webports import parse_port_range
from corral.server.services.agents import compute_assignments
from corral.server.services.webports import REPORT_TTL_S


class _Secret(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"the node's own service: not a job's UI"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def node_service() -> Iterator[int]:
    """A port of the node that is no job's (the Corral API, the agent, sshd ...): a real HTTP server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Secret)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _submit_and_place(s: Any, **body: Any) -> int:
    """Submit through the API as the admin, then place the job on node-a (no scheduler runs here)."""
    r = s.api.post("/api/v1/jobs", json={"command": ["serve"], **body}, headers=s.admin)
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    assert s.store.assign_job(job, "node-a", [], datetime.now(UTC))
    return job


def _hand_over(s: Any) -> dict[int, dict[str, str]]:
    """What node-a's agent would receive now: each new run's environment, by job id."""
    node = s.store.get_node("node-a")
    assignments, _ = compute_assignments(s.store, node, set(), job_ports=parse_port_range("20000-20009"))
    return {a.job_id: a.env for a in assignments}


def test_a_job_declaring_a_port_of_the_node_does_not_reach_it(
    proxy_app: Callable[[int], Any], node_service: int
) -> None:
    s = proxy_app(node_service)  # (its own job's UI: any port; this test's jobs are new ones)
    thief = _submit_and_place(s, port=node_service)
    env = _hand_over(s)[thief]
    assigned = int(env["CORRAL_JOB_PORT"])
    assert env["PORT"] == str(assigned) and 20000 <= assigned <= 20009 and assigned != node_service
    assert s.api.get(f"/api/v1/jobs/{thief}", headers=s.admin).json()["port"] == assigned
    r = s.ui.get(f"/proxy/jobs/{thief}/", headers=s.admin)
    assert r.status_code == 409 and "not listening" in r.json()["error"]["message"], r.text
    assert "node's own service" not in r.text


def test_jobs_of_one_node_never_share_a_port_and_a_hand_over_repeats_it(
    proxy_app: Callable[[int], Any], node_service: int
) -> None:
    s = proxy_app(node_service)
    first = _submit_and_place(s, web_ui=True)
    port = int(_hand_over(s)[first]["CORRAL_JOB_PORT"])
    assert int(_hand_over(s)[first]["CORRAL_JOB_PORT"]) == port  # a second sync before delivery: the same port
    copycat = _submit_and_place(s, port=port)  # declares the first job's port
    assert int(_hand_over(s)[copycat]["CORRAL_JOB_PORT"]) not in (port, node_service)
    plain = _submit_and_place(s)  # no web UI: no port, and nothing to proxy
    assert "CORRAL_JOB_PORT" not in _hand_over(s)[plain]
    assert s.ui.get(f"/proxy/jobs/{plain}/", headers=s.admin).status_code == 404


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (None, "has not confirmed"),
        ({"listening": False, "detail": "nothing listens on port P"}, "nothing listens on port P"),
        ({"listening": True, "attempt": 2}, "has not checked port"),
        ({"listening": True, "port": 1}, "has not checked port"),
    ],
    ids=["no-report", "not-listening", "another-attempt", "another-port"],
)
def test_the_proxy_connects_only_to_what_the_node_vouches_for(
    proxy_app: Callable[[int], Any], node_service: int, report: dict[str, Any] | None, why: str
) -> None:
    """A node_service on the job's own assigned port, and the agent does not vouch for it: refused."""
    s = proxy_app(node_service)
    web_ports = s.api.app.state.ctx.web_ports
    vouched = {"job_id": s.job, "attempt": 1, "port": node_service, "listening": True}
    web_ports.record("node-a", [] if report is None else [WebPortReport(**vouched | report)])
    r = s.ui.get(f"/proxy/jobs/{s.job}/", headers=s.admin)
    assert r.status_code == 409 and why in r.json()["error"]["message"], r.text
    web_ports.record("node-a", [WebPortReport(job_id=s.job, attempt=1, port=node_service, listening=True)])
    assert s.ui.get(f"/proxy/jobs/{s.job}/", headers=s.admin).text == "the node's own service: not a job's UI"


def test_a_report_counts_for_a_bounded_time(proxy_app: Callable[[int], Any], node_service: int) -> None:
    s = proxy_app(node_service)
    web_ports = s.api.app.state.ctx.web_ports
    assert web_ports.why_not("node-a", s.job, 1, node_service) is None
    later = time.monotonic() + REPORT_TTL_S + 1  # the agent went silent: its word no longer holds
    assert "has not confirmed" in (web_ports.why_not("node-a", s.job, 1, node_service, now=later) or "")
