"""The cost of TLS on the agent sync path: round trips of a sync with no work (wait_s=0), plain HTTP vs mutual TLS.

Both listeners serve the same agent app of one real server (uvicorn, loopback) and run the same identity check:
the plain one is given the node's certificate in the ASGI TLS extension, as the mutual-TLS one gets it from the
handshake, so the difference is the transport alone. Measured on kept-alive connections (what an agent uses) and,
for mutual TLS, with a new connection (a full handshake) per sync.

    .venv/bin/python bench/agent_sync_tls.py [--syncs 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from benchlib import free_port

from corral.sdk.join import trust_ssl_context
from corral.server.app import create_agent_app
from corral.server.runtime import ServerThread, provision_node_files
from corral.server.settings import Settings

NODE = "bench-node"


class PresentCert:
    """The plain-HTTP baseline: the node's certificate in the TLS extension, as the mutual-TLS listener sets it."""

    def __init__(self, app: Any, pem: str) -> None:
        self.app, self.pem = app, pem

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = dict(scope, extensions={"tls": {"client_cert_chain": [self.pem], "client_cert_error": None}})
        await self.app(scope, receive, send)


def timed(n: int, call: Any) -> list[float]:
    for _ in range(20):  # warm up
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def interleaved(n: int, a: Any, b: Any) -> tuple[list[float], list[float]]:
    """a and b measured turn about, so a load spike on the machine hits both alike."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(20):
        a(), b()
    for _ in range(n):
        for call, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            call()
            out.append((time.perf_counter() - t0) * 1000)
    return ta, tb


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "median_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=500)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="corral-sync-tls-"))
    settings = Settings(
        data_dir=root / "data", port=free_port(), agent_port=free_port(), job_ui_port=0, metrics_interval_s=0
    )
    srv = ServerThread(settings)
    srv.start()
    tls = root / "tls"
    provision_node_files(srv.store, srv.ca, NODE, tls, timedelta(hours=1))
    pem = (tls / "node.crt").read_text()
    plain_port = free_port()
    plain = uvicorn.Server(
        uvicorn.Config(
            PresentCert(create_agent_app(srv.app), pem),
            host="127.0.0.1",
            port=plain_port,
            lifespan="off",
            log_level="warning",
            access_log=False,
        )
    )
    threading.Thread(target=plain.run, daemon=True).start()
    while not plain.started:
        time.sleep(0.05)
    ctx = trust_ssl_context(srv.ca.cert_pem)
    ctx.load_cert_chain(tls / "node.crt", tls / "node.key")
    body = {"running": [], "exits": [], "wait_s": 0}
    register = {"name": NODE, "backend": "simulated"}
    results: dict[str, Any] = {"syncs": args.syncs}
    try:
        with (
            httpx.Client(base_url=f"https://127.0.0.1:{settings.effective_agent_port}", verify=ctx) as mtls,
            httpx.Client(base_url=f"http://127.0.0.1:{plain_port}") as http,
        ):
            mtls.post("/api/v1/agents/register", json=register).raise_for_status()
            sync = f"/api/v1/agents/{NODE}/sync"
            plain_ms, mtls_ms = interleaved(
                args.syncs,
                lambda: http.post(sync, json=body).raise_for_status(),
                lambda: mtls.post(sync, json=body).raise_for_status(),
            )
            results["plain_http_keepalive"] = summary(plain_ms)
            results["mtls_keepalive"] = summary(mtls_ms)

        def fresh() -> None:
            with httpx.Client(base_url=f"https://127.0.0.1:{settings.effective_agent_port}", verify=ctx) as c:
                c.post(f"/api/v1/agents/{NODE}/sync", json=body).raise_for_status()

        results["mtls_new_connection"] = summary(timed(max(args.syncs // 5, 20), fresh))
    finally:
        plain.should_exit = True
        srv.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name in ("plain_http_keepalive", "mtls_keepalive", "mtls_new_connection"):
        r = results[name]
        print(f"{name:22s} median {r['median_ms']:7.3f} ms   p99 {r['p99_ms']:7.3f} ms")
    extra = results["mtls_keepalive"]["median_ms"] - results["plain_http_keepalive"]["median_ms"]
    print(f"mutual TLS adds {extra:+.3f} ms to the median sync on a kept-alive connection", file=sys.stdout)


if __name__ == "__main__":
    main()
