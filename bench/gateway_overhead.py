"""The services gateway's added latency (issue 18): p50/p99 of small sequential GETs to a toy replica, direct and
through the gateway, on loopback.

The replica (a bare ASGI app answering 2 bytes) and the gateway (one public service over that replica) each run
under uvicorn in a process of their own; the client (httpx, one keep-alive connection) runs here. Both series go
to the same replica, interleaved in blocks, after a warm-up. It also gives the CPU time each server spends per
request (the gateway's own, the replica's), which a busy machine stretches less than latency.

    .venv/bin/python bench/gateway_overhead.py [--requests 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import httpx
import psutil
from benchlib import free_port, pct

BLOCK = 100  # requests per block; direct and gateway blocks alternate, so drift hits both alike


async def _replica(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve_replica(port: int) -> None:
    import uvicorn

    uvicorn.run(_replica, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def _serve_gateway(port: int, replica_port: int) -> None:
    import uvicorn

    from corral.gateway import Endpoint, Gateway, ServiceRoute, create_gateway_app

    route = ServiceRoute(
        service_id=1,
        name="bench",
        tenant_id=1,
        public=True,
        queue_limit=0,
        scale_from_zero=False,
        health_path="/healthz",
        endpoints=(Endpoint(job_id=1, attempt=1, host="127.0.0.1", port=replica_port, revision=1),),
    )

    class Routes:
        def routes(self) -> Mapping[str, ServiceRoute]:
            return {"bench": route}

    async def never(*_: Any) -> None:
        raise AssertionError("a public route is never authorized")

    gateway = Gateway(Routes(), never)
    uvicorn.run(create_gateway_app(gateway), host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)


def _wait(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    sys.exit(f"{url} did not answer 200 within {timeout_s:g} s")


def _cpu_s(pid: int | None) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _timed(client: httpx.Client, url: str, n: int, into: list[float]) -> None:
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get(url)
        into.append((time.perf_counter() - t0) * 1000)
        if r.status_code != 200:
            sys.exit(f"GET {url} answered {r.status_code}: {r.text[:200]}")


def run(requests: int) -> dict[str, Any]:
    replica_port, gateway_port = free_port(), free_port()
    procs = [
        multiprocessing.Process(target=_serve_replica, args=(replica_port,), daemon=True),
        multiprocessing.Process(target=_serve_gateway, args=(gateway_port, replica_port), daemon=True),
    ]
    for p in procs:
        p.start()
    try:
        direct_url = f"http://127.0.0.1:{replica_port}/hello"
        gateway_url = f"http://127.0.0.1:{gateway_port}/services/bench/hello"
        _wait(direct_url)
        _wait(gateway_url)  # 200 only once the replica is probed ready
        direct: list[float] = []
        through: list[float] = []
        replica_cpu_s = gateway_cpu_s = 0.0
        with httpx.Client(timeout=10) as client:
            _timed(client, direct_url, 200, [])  # warm-up
            _timed(client, gateway_url, 200, [])
            while len(direct) < requests:
                n = min(BLOCK, requests - len(direct))
                before = _cpu_s(procs[0].pid)
                _timed(client, direct_url, n, direct)
                replica_cpu_s += _cpu_s(procs[0].pid) - before
                before = _cpu_s(procs[1].pid)
                _timed(client, gateway_url, n, through)
                gateway_cpu_s += _cpu_s(procs[1].pid) - before
    finally:
        for p in procs:
            p.terminate()
            p.join(10)
    return {
        "requests": requests,
        "direct_p50_ms": round(pct(direct, 50), 3),
        "direct_p99_ms": round(pct(direct, 99), 3),
        "gateway_p50_ms": round(pct(through, 50), 3),
        "gateway_p99_ms": round(pct(through, 99), 3),
        "added_p50_ms": round(pct(through, 50) - pct(direct, 50), 3),
        "added_p99_ms": round(pct(through, 99) - pct(direct, 99), 3),
        # CPU time per request, less sensitive than latency to a busy machine: the replica's for a direct GET,
        # the gateway's own for a forwarded one
        "replica_cpu_ms_per_request": round(1000 * replica_cpu_s / requests, 3),
        "gateway_cpu_ms_per_request": round(1000 * gateway_cpu_s / requests, 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="GETs per series (direct, through the gateway)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args.requests)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['requests']} sequential small GETs per series, loopback, one keep-alive connection")
        print(f"direct:          p50 {result['direct_p50_ms']:.3f} ms   p99 {result['direct_p99_ms']:.3f} ms")
        print(f"through gateway: p50 {result['gateway_p50_ms']:.3f} ms   p99 {result['gateway_p99_ms']:.3f} ms")
        print(f"added:           p50 {result['added_p50_ms']:.3f} ms   p99 {result['added_p99_ms']:.3f} ms")
        print(
            f"CPU per request: gateway {result['gateway_cpu_ms_per_request']:.3f} ms, replica "
            f"{result['replica_cpu_ms_per_request']:.3f} ms ({result['cpus']} CPUs, load {result['load_average_1m']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
