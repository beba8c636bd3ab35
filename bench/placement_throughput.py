"""Placement throughput of the indexed scheduler (issue 3): placements/s and peak RSS per policy.

10,000 nodes x 8 GPUs of mixed models and a queue of 100,000 jobs of mixed sizes (shares, 1, 2, 4 and
8 GPUs, some limited to a model), placed one at a time with no departures, as the simulator does.
Each policy runs in a fresh process so its peak RSS is its own.

    python bench/placement_throughput.py                 # default policy (corral), full size
    python bench/placement_throughput.py --policy corral,fgd,bestfit --nodes 1000 --jobs 10000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo
from corral.scheduler.cluster import Cluster
from corral.scheduler.cycle import Unschedulable
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY
from corral.scheduler.workload import compute_workload_profile

MODELS = (("H100-80GB", 81920, 0.3), ("A100-80GB", 81920, 0.4), ("L40S-48GB", 49152, 0.2), ("T4-16GB", 16384, 0.1))
SHARES = (100, 250, 500, 750)


def make_nodes(count: int, rng: random.Random) -> list[NodeInfo]:
    nodes = []
    for i in range(count):
        model, mem, _ = rng.choices(MODELS, weights=[w for *_, w in MODELS])[0]
        gpus = tuple(GpuInfo(g, f"n{i}-g{g}", model, mem) for g in range(8))
        nodes.append(NodeInfo(f"node-{i:05d}", gpus, cpu_milli=128_000, memory_mib=1_048_576))
    return nodes


def make_jobs(count: int, rng: random.Random) -> list[ResourceRequest]:
    jobs = []
    for _ in range(count):
        kind = rng.random()
        models = (rng.choice(MODELS)[0].split("-")[0],) if rng.random() < 0.2 else ()
        if kind < 0.3:
            milli = rng.choice(SHARES)
            jobs.append(ResourceRequest(gpus=1, gpu_milli=milli, gpu_models=models, cpu_milli=2000, memory_mib=8192))
        else:
            gpus = rng.choices((1, 2, 4, 8), weights=(50, 25, 15, 10))[0]
            jobs.append(ResourceRequest(gpus=gpus, gpu_models=models, cpu_milli=8000 * gpus, memory_mib=65536 * gpus))
    return jobs


def run_one(policy: str, node_count: int, job_count: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    nodes = make_nodes(node_count, rng)
    jobs = make_jobs(job_count, rng)
    ctx = ScoreContext(workload=compute_workload_profile(jobs))
    cluster = Cluster(nodes, policy, ctx, random.Random(seed))
    start, start_cpu = time.perf_counter(), time.process_time()
    placed = 0
    for job in jobs:
        if not isinstance(cluster.place(job), Unschedulable):
            placed += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return {
        "placements_per_s": round(job_count / elapsed, 1),
        # Wall-clock rate above; on a shared machine the CPU-time rate says what the code itself does.
        "placements_per_cpu_s": round(job_count / cpu, 1),
        "placed": placed,
        "failed": job_count - placed,
        "seconds": round(elapsed, 2),
        "gpu_allocated_pct": round(100 * cluster.gpu_allocated_milli / cluster.gpu_capacity_milli, 2),
        "classes_at_end": cluster.class_count,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="comma-separated policies (default: corral)")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object keyed by policy")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process mode
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.policy, args.nodes, args.jobs, args.seed)))
        return
    results = {}
    for policy in [p.strip() for p in args.policy.split(",") if p.strip()]:
        cmd = [
            sys.executable,
            __file__,
            "--one",
            "--policy",
            policy,
            "--nodes",
            str(args.nodes),
            "--jobs",
            str(args.jobs),
            "--seed",
            str(args.seed),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: policy {policy!r} failed: {done.stderr.strip().splitlines()[-1:]}")
        results[policy] = json.loads(done.stdout)
        if not args.json:
            r = results[policy]
            print(
                f"{policy:>12}: {r['placements_per_s']:>9,.0f} placements/s ({r['placements_per_cpu_s']:,.0f} per CPU s)  "
                f"peak RSS {r['peak_rss_mib']:,.0f} MiB  "
                f"({r['placed']:,} placed, {r['failed']:,} unplaceable, GPUs {r['gpu_allocated_pct']}% allocated, "
                f"{r['classes_at_end']:,} node classes, {args.nodes:,} nodes, {args.jobs:,} jobs)"
            )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
