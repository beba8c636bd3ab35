"""Submit-to-running of a container job (a cached image, an idle node) next to a process job, in the same run.

A real `corral up` whose agent reaches the local Docker Engine; jobs are submitted over HTTP one at a time,
alternating a container job (image corral-test/busybox:1, already on the node: `make docker-deps`) and a process
job, each on one simulated GPU. Per job: the time from the POST that accepts it to the moment its command starts
(its first act creates a mark file in a directory the container mounts; the file's modification time is that
moment), and to the moment the API shows it RUNNING. Prints median and p99 of each, for both executors.

    .venv/bin/python bench/container_start.py [--jobs 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from benchlib import make_bench_root, pct, start_corral_up, stop_corral

CORRAL = str(Path(sys.executable).with_name("corral"))
IMAGE = "corral-test/busybox:1"


def _measure(c: httpx.Client, body: dict[str, Any], mark: Path) -> tuple[float, float]:
    """(submit -> command started, submit -> API RUNNING) in seconds; waits until the node is idle again."""
    t0 = time.time()
    r = c.post("/api/v1/jobs", json=body)
    if r.status_code != 201:
        sys.exit(f"submit refused: {r.text}")
    job_id = r.json()["id"]
    seen_running = None
    while not mark.exists():
        if seen_running is None and c.get(f"/api/v1/jobs/{job_id}").json()["state"] != "PENDING":
            seen_running = time.time()
        if time.time() - t0 > 60:
            job = c.get(f"/api/v1/jobs/{job_id}").json()
            sys.exit(f"job {job_id} left no mark in 60 s (state {job['state']}, reason {job['reason']!r})")
        time.sleep(0.005)
    started = mark.stat().st_mtime_ns / 1e9 - t0
    while (state := c.get(f"/api/v1/jobs/{job_id}").json()["state"]) in ("PENDING", "RUNNING"):
        time.sleep(0.01)
    if state != "SUCCEEDED":
        sys.exit(f"job {job_id} ended {state}")
    return started, (seen_running or started + t0) - t0


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values) * 1000, "p99": pct(values, 99) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30, help="jobs of each kind")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = make_bench_root(with_marks=True)
    marks = root / "marks"
    proc, url, token = start_corral_up([CORRAL], root, {"CORRAL_ALLOWED_MOUNTS": str(marks)})
    times: dict[str, tuple[list[float], list[float]]] = {"container": ([], []), "process": ([], [])}
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            while not c.get("/api/v1/nodes").json():
                time.sleep(0.1)
            node = c.get("/api/v1/nodes").json()[0]
            if "docker" not in node.get("runtimes", []):
                sys.exit("the node has no docker runtime: run `make docker-deps` (a Docker Engine and the test image)")
            for i in range(args.jobs):
                for kind in ("container", "process"):
                    mark = marks / f"{kind}-{i}"
                    if kind == "container":
                        body = {
                            "command": ["sh", "-c", f": > /marks/{mark.name}"],
                            "image": IMAGE,
                            "mounts": [f"{marks}:/marks"],
                            "gpus": 1,
                        }
                    else:
                        body = {"command": ["sh", "-c", f": > {mark}"], "gpus": 1}
                    started, running = _measure(c, body, mark)
                    times[kind][0].append(started)
                    times[kind][1].append(running)
    finally:
        stop_corral(proc)
    result: dict[str, Any] = {"jobs_each": args.jobs, "image": IMAGE}
    for kind, (started_s, running_s) in times.items():
        result[kind] = {
            "submit_to_command_start_ms": _summary(started_s),
            "submit_to_api_running_ms": _summary(running_s),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for kind in times:
        for k in ("submit_to_command_start_ms", "submit_to_api_running_ms"):
            r = result[kind][k]
            print(f"{kind:>9} {k:>27}: median {r['median']:.1f} ms, p99 {r['p99']:.1f} ms  ({args.jobs} jobs)")


if __name__ == "__main__":
    main()
