"""The closed loop with real processes: a fault on a simulated GPU takes it out of the pool, its job runs
again on healthy GPUs, and an alert reaches a local webhook as firing, then resolved."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Corral, free_port, wait_for

pytestmark = pytest.mark.e2e


class Receiver:
    """A webhook receiver on loopback that keeps every JSON body it gets."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length", 0))
                outer.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def states(self, rule: str) -> list[str]:
        return [a["status"] for b in self.bodies for a in b.get("alerts", []) if a.get("rule") == rule]


def test_xid_fault_requeues_job_on_healthy_gpus_and_alerts(corral_factory: Any) -> None:
    hook = Receiver()
    c: Corral = corral_factory(gpus="sim:4xH100-80GB", node="node-a")
    c.env.update(
        CORRAL_METRICS_INTERVAL_S="1",
        CORRAL_ALERT_INTERVAL_S="1",
        CORRAL_ALERT_WEBHOOKS=hook.url,
        CORRAL_HEALTH_RECOVERY_CHECKS="2",
    )
    c.start()
    c.start_agent("node-b", "sim:4xH100-80GB")
    wait_for(lambda: len(c.cli_json("nodes")) == 2, 30, "two nodes")

    job = c.submit("--gpus", "4", "--", "sh", "-c", "echo attempt $CORRAL_ATTEMPT on $CUDA_VISIBLE_DEVICES; sleep 600")
    first = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 30, "job running")
    bad_node, bad_gpu = first["node"], first["gpus"][1]
    assert c.cli("sim", "fault", bad_node, str(bad_gpu), "--xid", "79").returncode == 0

    def gpu_health() -> str:
        return next(g["health"] for g in c.cli_json("gpus") if g["node"] == bad_node and g["index"] == bad_gpu)

    wait_for(lambda: gpu_health() == "UNHEALTHY", 10, "GPU marked unhealthy within 10 s")
    again = wait_for(
        lambda: (j := c.job(job))["state"] == "RUNNING" and j["attempt"] == 2 and j, 30, "job running again within 30 s"
    )
    assert again["node"] != bad_node  # the only node with 4 healthy GPUs
    kinds = [e["kind"] for e in c.cli_json("nodes", "events", bad_node)]
    assert "gpu_unhealthy" in kinds
    wait_for(lambda: "firing" in hook.states("gpu_unhealthy"), 20, "firing alert at the webhook")
    alerts = c.cli_json("alerts")
    assert any(a["rule"] == "gpu_unhealthy" and a["state"] == "firing" for a in alerts)

    # /metrics needs a token; with a metrics token (as Prometheus scrapes) it parses and carries the DCGM-named
    # series for every GPU
    assert httpx.get(f"{c.url}/metrics").status_code == 401
    made = c.cli("tokens", "create", "--metrics", "--name", "prometheus")
    assert made.returncode == 0, made.stderr
    scrape = {"Authorization": f"Bearer {made.stdout.strip()}"}
    body = httpx.get(f"{c.url}/metrics", headers=scrape).text
    families = {f.name: f for f in text_string_to_metric_families(body)}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert {s.labels["Hostname"] for s in util.samples} == {"node-a", "node-b"}
    assert {"gpu", "UUID", "modelName", "Hostname"} <= set(util.samples[0].labels)
    assert "DCGM_FI_DEV_FB_USED" in families and "DCGM_FI_DEV_GPU_TEMP" in families

    # enabling it while the fault stands is refused, saying so (it would flip back to unhealthy a second later)
    r = c.cli("gpus", "enable", bad_node, str(bad_gpu))
    assert r.returncode != 0 and "still reports fatal Xid 79" in r.stderr and "--clear" in r.stderr, r.stderr
    assert gpu_health() != "HEALTHY"

    # the fault clears: the GPU comes back after clean checks and the alert resolves
    assert c.cli("sim", "fault", bad_node, str(bad_gpu), "--clear").returncode == 0
    wait_for(lambda: gpu_health() == "HEALTHY", 30, "GPU healthy again")
    wait_for(lambda: "resolved" in hook.states("gpu_unhealthy"), 30, "resolved alert at the webhook")
    assert c.cli("cancel", str(job)).returncode == 0


def test_fault_injection_is_refused_for_bad_input(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:2xA100-40GB", node="node-a")
    c.start()
    cases = [
        (["sim", "fault", "node-a", "9", "--xid", "79"], "gpu_index"),
        (["sim", "fault", "ghost", "0", "--xid", "79"], "ghost"),
        (["sim", "fault", "node-a", "0", "--xid", "79", "--clear"], "clear"),
    ]
    for args, needle in cases:
        r = c.cli(*args)
        assert r.returncode != 0 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
