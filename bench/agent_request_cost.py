"""What one agent request costs the server: its CPU time per mutual-TLS connection, per sync (wait_s=0, no work)
and per telemetry batch (host + 8 GPU samples), each sent one at a time so that nothing queues, against a store of
finished and pending jobs, on SQLite and on PostgreSQL.

The same set-up as bench/api_load.py (its fill, server and joined agents, 8 simulated H100s each): that one
measures latency with everything at once; this one the work per request, which decides how many agents one server
process can carry (1,000 agents ticking every 5 s: 200 connections, syncs and batches a second). CPU time is read
from /proc for the server process; its idle use, measured first, is taken off.

    .venv/bin/python bench/agent_request_cost.py [--db sqlite|postgres|both] [--agents 20] [--requests 300]
        [--finished 20000] [--pending 2000] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import api_load as load

from corral.sdk.join import trust_ssl_context


def measure(kind: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="corral-agent-cost-"))
    (root / "data").mkdir()
    with ExitStack() as stack:
        url = stack.enter_context(load.database(kind, root, args.postgres_admin_url))
        load.fill(url, args.finished, args.pending, args.agents)
        server, api, agent_url, token = load.start_server(root, url)
        try:
            names, ca = load.join_agents(api, agent_url, token, root / "certs", args.agents)
            host, port = agent_url.removeprefix("https://").split(":")
            contexts = {}
            for n in names:
                ctx = trust_ssl_context(ca)
                ctx.load_cert_chain(root / "certs" / f"{n}.crt", root / "certs" / f"{n}.key")
                contexts[n] = ctx
            time.sleep(3)
            c0, t0 = load.cpu_seconds(server.pid), time.monotonic()
            time.sleep(args.idle_s)
            idle = (load.cpu_seconds(server.pid) - c0) / (time.monotonic() - t0)
            rows = [{"db": kind, "request": "idle server", "cpu_ms": None, "wall_ms": None, "idle_cpu_pct": idle * 100}]

            def run(label: str, one: Callable[[str], None]) -> None:
                c0, t0 = load.cpu_seconds(server.pid), time.monotonic()
                for i in range(args.requests):
                    one(names[i % len(names)])
                wall = time.monotonic() - t0
                cpu = load.cpu_seconds(server.pid) - c0 - idle * wall
                rows.append(
                    {
                        "db": kind,
                        "request": label,
                        "cpu_ms": round(cpu / args.requests * 1000, 2),
                        "wall_ms": round(wall / args.requests * 1000, 2),
                        "idle_cpu_pct": None,
                    }
                )

            def connect(n: str) -> None:
                conn = http.client.HTTPSConnection(host, int(port), context=contexts[n], timeout=60)
                conn.connect()
                conn.close()

            conns = {n: http.client.HTTPSConnection(host, int(port), context=contexts[n], timeout=60) for n in names}

            def post(n: str, path: str, body: bytes) -> None:
                conns[n].request("POST", path, body=body, headers={"Content-Type": "application/json"})
                r = conns[n].getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit(f"{path}: HTTP {r.status}")

            batches = {n: json.loads((root / "certs" / f"{n}.json").read_text()) for n in names}

            def telemetry(n: str) -> None:
                batch, now = batches[n], time.time()
                batch["ts"] = batch["host"]["ts"] = now
                for g in batch["gpus"]:
                    g["ts"] = now
                post(n, f"/api/v1/agents/{n}/telemetry", json.dumps(batch).encode())

            run("mutual-TLS connection", connect)
            run("POST /agents/{node}/sync", lambda n: post(n, f"/api/v1/agents/{n}/sync", load.SYNC_BODY))
            run("POST /agents/{node}/telemetry", telemetry)
            for c in conns.values():
                c.close()
            return rows
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--requests", type=int, default=300, help="of each kind")
    ap.add_argument("--finished", type=int, default=20_000)
    ap.add_argument("--pending", type=int, default=2_000)
    ap.add_argument("--idle-s", type=float, default=10.0, help="how long the idle server's CPU use is read")
    ap.add_argument("--postgres-admin-url", default=load.PG_ADMIN_URL)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.agents < 1 or args.requests < 1:
        ap.error("--agents and --requests: at least 1")
    rows: list[dict[str, Any]] = []
    for kind in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        rows += measure(kind, args)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    print(f"{args.agents} agents, {args.finished} finished + {args.pending} pending jobs, {args.requests} of each")
    print(f"{'db':9} {'request':32} {'server CPU ms':>14} {'wall ms':>8}")
    for r in rows:
        if r["cpu_ms"] is None:
            print(f"{r['db']:9} {r['request']:32} {'(' + format(r['idle_cpu_pct'], '.1f') + '% of a core)':>14}")
        else:
            print(f"{r['db']:9} {r['request']:32} {r['cpu_ms']:>14.2f} {r['wall_ms']:>8.2f}")


if __name__ == "__main__":
    main()
