"""A container job's web UI end to end on the real engine: `corral up` whose agent has Docker (or Podman through
CORRAL_DOCKER_HOST), `corral submit --image --web-ui --container-port`, the page through the server's
/proxy/jobs/ID/; and a hostile node where another process holds the job's ports first: the container cannot publish
them and the proxy answers 409, never the squatter's page."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from container_engine import DOCKER_HOST, TEST_IMAGE, engine_node, remove_node_containers, require_engine

from .conftest import Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.xdist_group("container-engine")]
NODE = engine_node("e2e-webui")
SERVE = "mkdir -p /tmp/w && echo inside=$PORT > /tmp/w/index.html && exec busybox httpd -f -p 8000 -h /tmp/w"


def _two_free_ports() -> int:
    """P such that P and P+1 are free now (the cluster's whole web-UI range)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            port = int(s.getsockname()[1])
        if port < 65535:
            try:
                with socket.socket() as t:
                    t.bind(("0.0.0.0", port + 1))
                return port
            except OSError:
                continue
    raise AssertionError("no two adjacent free ports")


def test_a_container_web_ui_through_the_proxy_and_a_squatted_port(corral_factory: Any) -> None:
    engine = require_engine()
    remove_node_containers(engine, NODE)
    first = _two_free_ports()
    c: Corral = corral_factory(gpus="none", node=NODE)
    c.env.update(CORRAL_DOCKER_HOST=DOCKER_HOST, CORRAL_JOB_PORTS=f"{first}-{first + 1}", CORRAL_LONG_POLL_S="1")
    c.start()
    try:
        _run(c, first)
    finally:
        remove_node_containers(engine, NODE)


def _run(c: Corral, first: int) -> None:
    auth = {"Authorization": f"Bearer {(c.data_dir / 'admin-token').read_text().strip()}"}

    def proxied(job: int) -> httpx.Response:
        return httpx.get(f"{c.ui_url}/proxy/jobs/{job}/index.html", headers=auth, timeout=10)

    job = c.submit("--image", TEST_IMAGE, "--web-ui", "--container-port", "8000", "--", "sh", "-c", SERVE)
    r = wait_for(lambda: (r := proxied(job)).status_code == 200 and r, 60, "the container's UI through the proxy")
    assert r.text.strip() == "inside=8000"  # PORT inside is the image's port; the node port is Corral's
    assert c.job(job)["port"] in (first, first + 1)
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 60, "cancelled")

    # Hostile: another process (not the job's, not the engine's) listens on every port the job may get, first.
    with ExitStack() as stack:
        for port in (first, first + 1):
            squatter = stack.enter_context(socket.socket())
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("0.0.0.0", port))
            squatter.listen()
        victim = c.submit("--image", TEST_IMAGE, "--web-ui", "--container-port", "8000", "--", "sh", "-c", SERVE)
        wait_for(lambda: c.job(victim)["state"] in ("RUNNING", "FAILED"), 60, "the job handed to its node")
        wait_for(lambda: proxied(victim).status_code == 409, 60, "the proxy refusing the squatted port")
        shown = wait_for(lambda: (j := c.job(victim))["state"] == "FAILED" and j, 60, "the container could not start")
        assert shown["exit_code"] == 125, shown
        r = proxied(victim)
        message = r.json()["error"]["message"]
        assert r.status_code == 409 and ("not listening" in message or "only open while it runs" in message), r.text
