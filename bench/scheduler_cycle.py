"""Time of one scheduling cycle (issue 12): `compute_plan` over a snapshot as work grows.

1,000 / 10,000 / 100,000 pending jobs on 100 / 1,000 / 10,000 nodes (8 GPUs each, mixed models), with
mixed request sizes (shares, 1-8 GPUs, a few 2-node gangs, some held to a model, CPU and host memory),
20 tenants, and about 60% of the GPUs held by running jobs. The default placement and queueing policies
(the server's), explanations on (reasons and ETAs for every pending job, as the server asks). Each row
prints the seconds of one cycle and its growth over the row with a tenth of the work.

    python bench/scheduler_cycle.py                      # all nine sizes
    python bench/scheduler_cycle.py --sizes 10000x1000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import time

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState
from corral.scheduler.plan import Plan, Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueState, RunningJob

MODELS = (("H100-80GB", 81920, 0.3), ("A100-80GB", 81920, 0.4), ("L40S-48GB", 49152, 0.2), ("T4-16GB", 16384, 0.1))
SHARES = (250, 500)
TENANTS = tuple(f"tenant{i}" for i in range(20))
SIZES = tuple((p, n) for n in (100, 1_000, 10_000) for p in (1_000, 10_000, 100_000))
NOW_S = 1_000_000.0


def make_cluster(count: int, rng: random.Random) -> tuple[list[NodeState], list[RunningJob]]:
    """Nodes with part of their GPUs (and CPU) held by running jobs, and those jobs."""
    nodes: list[NodeState] = []
    running: list[RunningJob] = []
    for i in range(count):
        model, mem, _ = rng.choices(MODELS, weights=[w for *_, w in MODELS])[0]
        info = NodeInfo(
            f"node{i:05d}", tuple(GpuInfo(g, f"n{i}-{g}", model, mem) for g in range(8)), 128_000, 1_048_576
        )
        held = rng.choice((0, 2, 4, 6, 8, 8))
        used = [1000] * held + [0] * (8 - held)
        if held:
            job = QueuedJob(
                f"r{i}", rng.choice(TENANTS), gpus=held, model=model, time_limit_s=rng.choice((3600.0, 86400.0))
            )
            running.append(RunningJob(job, NOW_S - rng.uniform(0, 3600), model))
        nodes.append(NodeState(info, tuple(used), held * 8_000, held * 65_536))
    return nodes, running


def make_pending(count: int, rng: random.Random) -> list[QueuedJob]:
    jobs = []
    for i in range(count):
        kind = rng.random()
        share = kind < 0.3
        gpus = 1 if share else rng.choices((1, 2, 4, 8), weights=(50, 25, 15, 10))[0]
        model = rng.choice(MODELS)[0] if rng.random() < 0.2 else ""
        req = ResourceRequest(
            gpus=gpus,
            gpu_milli=rng.choice(SHARES) if share else 1000,
            gpu_models=(model,) if model else (),
            cpu_milli=gpus * rng.choice((2_000, 8_000)),
            memory_mib=gpus * rng.choice((16_384, 65_536)),
        )
        nodes = 2 if not share and gpus == 8 and rng.random() < 0.3 else 1
        jobs.append(
            QueuedJob(
                f"p{i}",
                rng.choice(TENANTS),
                gpus=gpus,
                gpu_milli=req.gpu_milli,
                model=model,
                nodes=nodes,
                priority=rng.choice((0, 0, 0, 10)),
                submit_s=NOW_S - count + i,
                time_limit_s=rng.choice((None, 3600.0)),
                request=req,
            )
        )
    return jobs


def run_one(pending: int, nodes: int, seed: int) -> dict[str, float | int]:
    rng = random.Random(seed)
    states, running = make_cluster(nodes, rng)
    snapshot = Snapshot(states, QueueState(make_pending(pending, rng), running))
    start, start_cpu = time.perf_counter(), time.process_time()
    plan: Plan = compute_plan(snapshot, NOW_S, rng=random.Random(seed))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    # Wall-clock seconds; on a shared machine the CPU seconds say what the code itself does.
    return {
        "pending": pending,
        "nodes": nodes,
        "cycle_s": round(elapsed, 4),
        "cycle_cpu_s": round(cpu, 4),
        "admitted": len(plan.admit),
        "preempted": len(plan.preempt),
    }


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        p, _, n = part.strip().partition("x")
        out.append((int(p.replace("_", "")), int(n.replace("_", ""))))
    return out


def _growth(now: float, before: float | None) -> str:
    return f"{now / before:.1f}x" if before else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(SIZES),
        help="comma-separated PENDINGxNODES (default: all nine of 1e3..1e5 x 1e2..1e4)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help='a list of {"pending", "nodes", "cycle_s", ...}')
    args = parser.parse_args()
    rows = []
    if not args.json:
        print(
            f"{'pending':>8} {'nodes':>7} {'cycle s':>9} {'CPU s':>7} {'x per 10x pending':>18} {'x per 10x nodes':>16} {'admitted':>9} {'preempted':>10}"
        )
    for pending, nodes in args.sizes:
        row = run_one(pending, nodes, args.seed)
        rows.append(row)
        if not args.json:
            by = {(r["pending"], r["nodes"]): r["cycle_s"] for r in rows}
            per_p = by.get((pending // 10, nodes))
            per_n = by.get((pending, nodes // 10))
            print(
                f"{pending:>8,} {nodes:>7,} {row['cycle_s']:>9.3f} {row['cycle_cpu_s']:>7.3f} {_growth(row['cycle_s'], per_p):>18} "
                f"{_growth(row['cycle_s'], per_n):>16} "
                f"{row['admitted']:>9,} {row['preempted']:>10,}",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
