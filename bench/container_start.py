"""Submit-to-running of a container job (a cached image, an idle node) next to a process job, in the same run.

A real `corral up` whose agent reaches the local Docker Engine; jobs are submitted over HTTP one at a time,
alternating a container job (image corral-test/busybox:1, already on the node: `make docker-deps`) and a process
job, each on one simulated GPU. Per job: the time from the POST that accepts it to the moment its command starts
(its first act creates a mark file in a directory the container mounts; the file's modification time is that
moment), and to the moment the API shows it RUNNING. Prints median and p99 of each, for both executors.

Then the pull: the time to pull the test image 127.0.0.1:5055/team/busybox:1 from the local private registry of
`make docker-deps` (password auth) through the engine, the image removed before each try, and submit-to-command-start
of a container job that must pull it first with its tenant's registry secret.

    .venv/bin/python bench/container_start.py [--jobs 30] [--pulls 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import docker
import httpx
from benchlib import make_bench_root, pct, start_corral_up, stop_corral
from docker.errors import ImageNotFound

from corral.executors.base import RegistryLogin
from corral.executors.image_pull import pull_image

CORRAL = str(Path(sys.executable).with_name("corral"))
IMAGE = "corral-test/busybox:1"
REGISTRY = "127.0.0.1:5055"
PRIVATE = f"{REGISTRY}/team/busybox:1"
LOGIN = RegistryLogin(REGISTRY, "alice", "s3cret")  # the test registry's (tests/docker_deps.sh)


def _drop(engine: docker.DockerClient, image: str) -> None:
    try:
        engine.images.remove(image, force=True)
    except ImageNotFound:
        pass


def _pulls(c: httpx.Client, marks: Path, count: int) -> dict[str, Any]:
    """The engine's pull of the private test image alone, and a job's submit -> command start with that pull."""
    engine = docker.from_env()
    raw: list[float] = []
    for _ in range(count):
        _drop(engine, PRIVATE)
        t0 = time.perf_counter()
        pull_image(engine, PRIVATE, LOGIN, lambda _: None, lambda: False)
        raw.append(time.perf_counter() - t0)
    secret = {"name": "bench-registry", "value": LOGIN.password, "kind": "registry", "host": REGISTRY}
    r = c.post("/api/v1/secrets", json={**secret, "username": LOGIN.username})
    if r.status_code not in (201, 409):
        sys.exit(f"registry secret refused: {r.text}")
    job: list[float] = []
    for i in range(count):
        _drop(engine, PRIVATE)
        mark = marks / f"pulled-{i}"
        body = {
            "command": ["sh", "-c", f": > /marks/{mark.name}"],
            "image": PRIVATE,
            "registry_secret": "bench-registry",
            "mounts": [f"{marks}:/marks"],
            "gpus": 1,
        }
        job.append(_measure(c, body, mark)[0])
    _drop(engine, PRIVATE)
    return {
        "image": PRIVATE,
        "pulls": count,
        "engine_pull_ms": _summary(raw),
        "submit_to_command_start_ms": _summary(job),
    }


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
    ap.add_argument("--pulls", type=int, default=5, help="pulls of the private test image (0: none)")
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
            pulled = _pulls(c, marks, args.pulls) if args.pulls else None
    finally:
        stop_corral(proc)
    result: dict[str, Any] = {"jobs_each": args.jobs, "image": IMAGE}
    for kind, (started_s, running_s) in times.items():
        result[kind] = {
            "submit_to_command_start_ms": _summary(started_s),
            "submit_to_api_running_ms": _summary(running_s),
        }
    result["pull"] = pulled
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for kind in times:
        for k in ("submit_to_command_start_ms", "submit_to_api_running_ms"):
            r = result[kind][k]
            print(f"{kind:>9} {k:>27}: median {r['median']:.1f} ms, p99 {r['p99']:.1f} ms  ({args.jobs} jobs)")
    if pulled:
        for k, what in (("engine_pull_ms", "pull alone"), ("submit_to_command_start_ms", "submit -> start, pulling")):
            r = pulled[k]
            print(f"{what:>37}: median {r['median']:.1f} ms, p99 {r['p99']:.1f} ms  ({args.pulls} pulls of {PRIVATE})")


if __name__ == "__main__":
    main()
