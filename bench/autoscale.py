"""Cloud-pool scale-up latency (issue 19), `local` provider: `corral up` with one static node of 2 simulated L4s and
a pool `burst` (one instance type g4 = 4 x A100-80GB, at most 1 node, a short idle time) whose nodes are real
`corral agent` processes started by the server's autoscaler, loopback only.

Each run submits a 4-GPU A100 job that fits no node and measures the time from the POST that accepts it to the API
showing it RUNNING on a node the pool started for it (and to the pool's `joined` event for that node); then it
waits until the node is released (the pool has no node) so that the next run starts a fresh one. Prints the
median, p90, min and max over the runs.

Second part (`--skip-local` runs it alone, `--skip-trace` leaves it out): the what-if simulator (sim/pools.py, the
autoscaler's own decide() in simulated time) replays a Philly-derived window (bench/queueing_windows.py's MIX1-a;
its first hour by default, `--full` for the whole 2.8 h) twice with queueing `corral`: on a cloud pool alone (8 x
V100-32GB nodes at PRICE_PER_NODE_H per hour, boot 120 s, idle 300 s, at most twice the window's 100%-load
cluster), then on a static cluster of the pooled run's average size (its time-averaged GPUs, in whole 8-GPU
nodes). Prints cost and average JCT of both, the static cluster priced at the same per-GPU-hour price over its run
(first submission to last job end).

    .venv/bin/python bench/autoscale.py [--runs 10] [--idle 1] [--skip-local] [--skip-trace] [--full] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from benchlib import make_bench_root, pct, start_corral_up, stop_corral

CORRAL = str(Path(sys.executable).with_name("corral"))
JOB_PYTHON = "/usr/bin/python3"  # jobs run as unprivileged users when the agent runs as root: not the venv's
POOL = "burst"
PRICE_PER_NODE_H = 24.48  # an 8 x V100 on-demand node (AWS p3.16xlarge's list price, us-east-1): 3.06 per GPU-hour
BOOT_S, IDLE_S = 120.0, 300.0
TRACE_WINDOW = "MIX1-a"


def wait(what: str, timeout_s: float, check: Any, every_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(every_s)


def stop_leftovers(root: Path) -> list[str]:
    """Whatever still runs with this run's root in its command line after `corral up` stopped (pool agents, jobs):
    ended, and named so the report can say so."""
    import psutil

    left: list[str] = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or ()
            if any(str(root) in arg for arg in cmd):
                left.append(" ".join(cmd)[:160])
                p.kill()
        except psutil.Error:
            pass
    return left


def _first(events: list[dict[str, Any]], kind: str) -> float | None:
    """The wall-clock time of the earliest event of `kind` (the API lists newest first or oldest first)."""
    ats = [datetime.fromisoformat(e["at"]).timestamp() for e in events if e["kind"] == kind]
    return min(ats) if ats else None


def _s(at: float | None, t0: float) -> str:
    return "?" if at is None else f"{at - t0:.2f} s"


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 2),
        "p90": round(pct(values, 90), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def trace_part(full: bool) -> dict[str, Any]:
    """Cost and average JCT of the Philly window on a cloud pool alone and on a static cluster of its average size."""
    from queueing_windows import GPUS_PER_NODE, cut_window

    from corral.scheduler.queueing import get_queueing_policy
    from corral.sim.jobs import SimConfig, simulate_jobs
    from corral.sim.jobs_metrics import compute_report
    from corral.sim.jobs_trace import SimCluster, parse_cluster_spec
    from corral.sim.pools import compute_pool_report, parse_pools

    jobs, full_load = cut_window(TRACE_WINDOW, quick=not full)
    max_nodes = 2 * int(full_load.split("x")[0])
    pool = {
        "name": "cloud",
        "instance_types": [
            {"name": "p3", "gpus": GPUS_PER_NODE, "gpu_model": "V100-32GB", "price_per_hour": PRICE_PER_NODE_H}
        ],
        "max_nodes": max_nodes,
        "idle_s": IDLE_S,
    }
    pools = parse_pools({"boot_s": BOOT_S, "pools": [pool]}, "bench")
    policy = get_queueing_policy("corral")
    first = min(tj.job.submit_s for tj in jobs)
    t0 = time.perf_counter()
    pooled = simulate_jobs(jobs, SimCluster(0, {}), SimConfig(policy, pools=pools))
    pooled_s = time.perf_counter() - t0
    pooled_jct = compute_report(pooled)["avg_jct_s"]
    figures = compute_pool_report(pooled.pool_nodes, first, pooled.end_s, pooled.unfinished)
    avg_gpus = float(figures["avg_gpus"])  # type: ignore[arg-type]
    nodes = max(round(avg_gpus / GPUS_PER_NODE), 1)
    t0 = time.perf_counter()
    static = simulate_jobs(jobs, parse_cluster_spec(f"{nodes}x{GPUS_PER_NODE}xV100-32GB"), SimConfig(policy))
    static_s = time.perf_counter() - t0
    static_report = compute_report(static)
    span_h = float(static_report["makespan_s"]) / 3600  # type: ignore[arg-type]
    per_gpu_h = PRICE_PER_NODE_H / GPUS_PER_NODE
    return {
        "window": TRACE_WINDOW + ("" if full else " (first hour)"),
        "jobs": len(jobs),
        "queueing": "corral",
        "pool": f"p3 = {GPUS_PER_NODE} x V100-32GB at {PRICE_PER_NODE_H:g}/h, boot {BOOT_S:g} s, idle {IDLE_S:g} s, "
        f"at most {max_nodes} nodes, no static node",
        "pooled": {
            "avg_jct_s": pooled_jct,
            "jobs_done": len(pooled.records),
            "cost": figures["cost"],
            "avg_gpus": avg_gpus,
            "peak_gpus": figures["peak_gpus"],
            "launches": figures["launches"],
            "hours": round((pooled.end_s - first) / 3600, 3),
            "unscheduled": figures["unscheduled"],
            "sim_wall_s": round(pooled_s, 1),
        },
        "static": {
            "nodes": nodes,
            "gpus": nodes * GPUS_PER_NODE,
            "avg_jct_s": static_report["avg_jct_s"],
            "jobs_done": len(static.records),
            "cost": round(nodes * GPUS_PER_NODE * per_gpu_h * span_h, 4),
            "hours": round(span_h, 3),
            "sim_wall_s": round(static_s, 1),
        },
        "price_per_gpu_hour": per_gpu_h,
    }


def print_trace(t: dict[str, Any]) -> None:
    p, s = t["pooled"], t["static"]
    print(f"what-if, Philly {t['window']}, {t['jobs']} jobs, queueing {t['queueing']}; pool {t['pool']}")
    print(f"  cloud pool:   avg JCT {p['avg_jct_s']:.1f} s, cost {p['cost']:.2f} ({p['hours']:.2f} h, "
          f"{p['avg_gpus']:.1f} GPUs on average, peak {p['peak_gpus']}, {p['launches']} launches, "
          f"{p['unscheduled']} never ran)")  # fmt: skip
    print(f"  static {s['gpus']} GPUs ({s['nodes']} nodes, the pool's average): avg JCT {s['avg_jct_s']:.1f} s, "
          f"cost {s['cost']:.2f} at {t['price_per_gpu_hour']:.2f} per GPU-hour over {s['hours']:.2f} h")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--idle", type=float, default=1.0, help="the pool's idle time before a node is released (s)")
    ap.add_argument("--skip-local", action="store_true", help="leave out the local-provider part")
    ap.add_argument("--skip-trace", action="store_true", help="leave out the replayed-trace cost/JCT part")
    ap.add_argument("--full", action="store_true", help="the trace part: the whole window, not its first hour")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    if not args.skip_local:
        out["local"] = local_part(args)
    if not args.skip_trace:
        out["trace"] = trace_part(args.full)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    if "local" in out:
        print_local(out["local"], args)
    if "trace" in out:
        print_trace(out["trace"])


def local_part(args: argparse.Namespace) -> dict[str, Any]:
    root = make_bench_root()
    proc, url, token = start_corral_up([CORRAL], root, {"CORRAL_GPUS": "sim:2xL4-24GB"}, log=root / "up.log")
    to_running: list[float] = []
    to_joined: list[float] = []
    to_launch: list[float] = []
    to_agent_joined: list[float] = []
    to_released: list[float] = []
    nodes_used: list[str] = []
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
            wait("the static node registers", 60, lambda: api.get("/api/v1/nodes").json())
            body = {
                "name": POOL,
                "provider": "local",
                "instance_types": [{"name": "g4", "gpus": 4, "gpu_model": "A100-80GB", "price_per_hour": 2.5}],
                "max_nodes": 1,
                "idle_s": args.idle,
                "join_timeout_s": 120,
            }
            r = api.post("/api/v1/pools", json=body)
            if r.status_code != 201:
                sys.exit(f"pool create failed: {r.status_code} {r.text}")

            def pool() -> dict[str, Any]:
                return api.get(f"/api/v1/pools/{POOL}").json()  # type: ignore[no-any-return]

            for i in range(args.runs):
                wait("the pool has no node left", 90, lambda: not pool()["nodes"], 0.2)
                job_body = {
                    "name": f"autoscale-{i}",
                    "command": [JOB_PYTHON, "-c", "import time; time.sleep(1)"],
                    "gpus": 4,
                    "gpu_model": "A100",
                }
                t0 = time.time()
                r = api.post("/api/v1/jobs", json=job_body)
                if r.status_code not in (200, 201):
                    sys.exit(f"submit failed: {r.status_code} {r.text}")
                jid = r.json()["id"]

                def running(jid: int = jid) -> dict[str, Any] | None:
                    j = api.get(f"/api/v1/jobs/{jid}").json()
                    if j["state"] not in ("PENDING", "RUNNING"):
                        raise RuntimeError(f"job {jid} ended {j['state']} before it was seen RUNNING: {j}")
                    return j if j["state"] == "RUNNING" else None  # type: ignore[no-any-return]

                job = wait(f"job {jid} RUNNING", 120, running, 0.02)
                t_running = time.time() - t0
                node = job["node"]
                if not str(node).startswith(f"{POOL}-") or node in nodes_used:
                    sys.exit(f"job {jid} ran on {node}, not on a new node of the pool (earlier: {nodes_used})")
                nodes_used.append(node)
                to_running.append(t_running)
                wait(f"job {jid} ends", 60, lambda jid=jid: api.get(f"/api/v1/jobs/{jid}").json()["state"]
                     not in ("PENDING", "RUNNING"), 0.1)  # fmt: skip
                t_end = time.time()
                # the node's own events before it leaves the inventory; the pool's once it is released (its
                # `joined` comes on an autoscaler tick, every 2 s, often after the job already ran)
                agent_joined = _first(api.get(f"/api/v1/nodes/{node}/events").json(), "joined")
                wait(f"node {node} released", 90, lambda: not pool()["nodes"], 0.2)
                to_released.append(time.time() - t_end)
                events = [e for e in pool()["events"] if e["node"] == node]
                at = {k: _first(events, k) for k in ("launch", "joined")}
                at["agent"] = agent_joined
                for k, into in (("launch", to_launch), ("agent", to_agent_joined), ("joined", to_joined)):
                    if at[k] is not None:
                        into.append(at[k] - t0)
                print(f"  run {i + 1}/{args.runs}: {node} RUNNING after {t_running:.2f} s (launch "
                      f"{_s(at['launch'], t0)}, agent joined {_s(at['agent'], t0)}, pool joined "
                      f"{_s(at['joined'], t0)})", file=sys.stderr, flush=True)  # fmt: skip
            final = pool()
    finally:
        stop_corral(proc)
        time.sleep(1)
        leftovers = stop_leftovers(root)

    result = {
        "provider": "local",
        "static_node": "2 x L4-24GB (simulated)",
        "instance_type": "g4 = 4 x A100-80GB (simulated)",
        "idle_s": args.idle,
        "runs": len(to_running),
        "submit_to_running_s": summary(to_running),
        "submit_to_launch_s": summary(to_launch),
        "submit_to_agent_joined_s": summary(to_agent_joined),
        "submit_to_pool_joined_s": summary(to_joined),
        "job_end_to_node_released_s": summary(to_released),
        "failed_launches": final.get("failed_launches"),
        "processes_left_after_stop": leftovers,
    }
    return result


def print_local(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"local pool, {result['instance_type']}, idle {args.idle:g} s; static node {result['static_node']}")
    for key, label in (
        ("submit_to_running_s", "submit (fits no node) -> RUNNING on a new node"),
        ("submit_to_launch_s", "submit -> the pool's `launch` event"),
        ("submit_to_agent_joined_s", "submit -> the node's own `joined` event (agent's TLS join)"),
        ("submit_to_pool_joined_s", "submit -> the pool's `joined` event (autoscaler tick, every 2 s)"),
        ("job_end_to_node_released_s", "job end -> node released (pool empty)"),
    ):
        s = result[key]
        if s is None:
            print(f"  {label}: no data")
        else:
            print(f"  {label}: median {s['median']:.2f} s, p90 {s['p90']:.2f} s, min {s['min']:.2f} s, "
                  f"max {s['max']:.2f} s  ({result['runs']} runs)")  # fmt: skip
    print(f"  failed launches: {result['failed_launches']}")
    if result["processes_left_after_stop"]:
        print(
            f"  processes still running after `corral up` stopped (killed): {len(result['processes_left_after_stop'])}"
        )


if __name__ == "__main__":
    main()
