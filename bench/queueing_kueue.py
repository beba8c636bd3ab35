"""Kueue-style baseline scenario (cohorts of queues with nominal quotas and borrowing limits; small /
medium / large workloads at fixed rates) in the job simulator: admission waits per class.

    .venv/bin/python bench/queueing_kueue.py [--hours 1] [--json]
"""

from __future__ import annotations

import argparse
import json

from corral.scheduler.queueing import get_queueing_policy
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_metrics import compute_report
from corral.sim.jobs_scenarios import compute_class_waits, kueue_baseline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sc = kueue_baseline(horizon_s=args.hours * 3600)
    result = simulate_jobs(sc.trace, sc.cluster, SimConfig(get_queueing_policy("corral"), quotas=sc.quotas))
    waits = compute_class_waits(result, sc.job_class)
    report = compute_report(result)
    if args.json:
        print(json.dumps({"classes": waits, "gpu_util_pct": report["gpu_util_pct"], "jobs": report["jobs"]}, indent=2))
        return
    print(f"{sc.cluster.describe()}; {len(sc.quotas.quotas)} queues in 2 cohorts; util {report['gpu_util_pct']}%")
    print(f"{'class':<8}{'jobs':>6}{'mean s':>9}{'p50 s':>8}{'p90 s':>8}{'max s':>8}")
    for name, w in waits.items():
        print(f"{name:<8}{w['jobs']:>6}{w['mean_s']:>9}{w['p50_s']:>8}{w['p90_s']:>8}{w['max_s']:>8}")


if __name__ == "__main__":
    main()
