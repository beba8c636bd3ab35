"""Submit-to-running latency on an idle node: real `corral up` process, jobs submitted over HTTP.

Measures, per job, the time from the POST that accepts the job to the moment the job's own process
starts on the node (it writes a wall-clock timestamp as its first act), and the time until the API
shows it RUNNING. Prints median and p99.

    .venv/bin/python bench/submit_latency.py [--jobs 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from benchlib import make_bench_root, pct, start_corral_up, stop_corral

CORRAL = str(Path(sys.executable).with_name("corral"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = make_bench_root(with_marks=True)
    marks = root / "marks"
    proc, url, token = start_corral_up([CORRAL], root, {})
    try:
        h = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=h, timeout=30) as c:
            while not c.get("/api/v1/nodes").json():
                time.sleep(0.1)
            to_process, to_running = [], []
            for i in range(args.jobs):
                mark = marks / f"start-{i}"
                t0 = time.time()
                job = c.post("/api/v1/jobs", json={"command": ["sh", "-c", f"date +%s.%N > {mark}"], "gpus": 1}).json()
                seen_running = None
                while True:
                    if seen_running is None:
                        state = c.get(f"/api/v1/jobs/{job['id']}").json()["state"]
                        if state != "PENDING":
                            seen_running = time.time()
                    if time.time() - t0 > 60:
                        state = c.get(f"/api/v1/jobs/{job['id']}").json()["state"]
                        sys.exit(f"job {job['id']} wrote no start mark in 60 s (state {state}): see `corral show`")
                    if mark.exists() and mark.stat().st_size:
                        break
                    time.sleep(0.005)
                to_process.append(float(mark.read_text()) - t0)
                to_running.append((seen_running or time.time()) - t0)
                while c.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "RUNNING":  # idle node again
                    time.sleep(0.01)
    finally:
        stop_corral(proc)
    result = {
        "jobs": args.jobs,
        "submit_to_process_start_ms": {
            "median": statistics.median(to_process) * 1000,
            "p99": pct(to_process, 99) * 1000,
        },
        "submit_to_api_running_ms": {"median": statistics.median(to_running) * 1000, "p99": pct(to_running, 99) * 1000},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k in ("submit_to_process_start_ms", "submit_to_api_running_ms"):
            print(f"{k:>30}: median {result[k]['median']:.1f} ms, p99 {result[k]['p99']:.1f} ms  ({args.jobs} jobs)")


if __name__ == "__main__":
    main()
