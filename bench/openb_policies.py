"""Placement quality on every openb pod list (issue 3): unallocated GPU % at 100% arrived load, the
median over seeds, per policy, next to the FGD paper's published figures.

Runs the simulator's protocol (corral.sim.placement, the same code as `corral simulate openb`) for each
pod list x policy x seed in a process pool and prints a Markdown table (or JSON with --json).

    python bench/openb_policies.py                                   # 13 lists, 5 policies, seeds 42-51
    python bench/openb_policies.py --lists default,gpushare60 --policies corral,fgd --seeds 42-43
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from corral.sim.openb import load_nodes, load_pods
from corral.sim.placement import parse_seeds, run_seed

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-openb"
LISTS = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "multigpu20",
    "multigpu30",
    "multigpu40",
)
# Weng et al., ATC'23 artifact, median of seeds 42-51 (../shared/traces/README.md).
PUBLISHED = {
    "fgd": (4.77, 5.00, 4.79, 5.18, 6.05, 8.70, 10.91, 5.30, 5.31, 6.08, 4.47, 3.61, 3.10),
    "bestfit": (7.09, 6.42, 6.72, 7.85, 8.53, 10.91, 13.26, 6.88, 11.53, 14.30, 6.27, 5.47, 4.91),
    "packing": (8.19, 6.47, 7.44, 9.87, 10.19, 12.75, 15.28, 7.76, 10.65, 13.22, 6.49, 5.23, 4.44),
    "clustering": (8.42, 6.52, 7.46, 10.25, 10.18, 13.03, 15.45, 8.06, 10.87, 13.59, 6.62, 5.45, 4.53),
    "dotprod": (9.44, 6.94, 8.22, 12.24, 10.66, 13.17, 15.89, 9.75, 11.68, 14.55, 8.19, 6.98, 5.91),
    "random": (13.75, 11.02, 12.56, 17.00, 15.04, 17.22, 19.35, 13.69, 13.90, 14.59, 13.16, 13.43, 14.76),
}

_cache: dict[str, object] = {}


def _unallocated(args: tuple[str, str, str, int]) -> float:
    nodes_csv, pods_csv, policy, seed = args
    if nodes_csv not in _cache:
        _cache[nodes_csv] = load_nodes(Path(nodes_csv))
    if pods_csv not in _cache:
        _cache[pods_csv] = load_pods(Path(pods_csv))[0]
    result = run_seed(_cache[nodes_csv], _cache[pods_csv], policy, seed)  # type: ignore[arg-type]
    return round(100.0 - result.alloc_pct[100], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--lists", default=",".join(LISTS))
    parser.add_argument("--policies", default="corral,fgd,bestfit,packing,random")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print {list: {policy: {median, per_seed}}}")
    parser.add_argument("--table-from", type=Path, help="print the table of a saved --json output instead of running")
    args = parser.parse_args()
    if args.table_from:
        table = json.loads(args.table_from.read_text())
        lists = [x for x in LISTS if x in table] + [x for x in table if x not in LISTS]
        policies = list(next(iter(table.values())))
        print_table(table, lists, policies, len(next(iter(next(iter(table.values())).values()))["per_seed"]), "saved")
        return
    if not args.traces.is_dir():
        sys.exit(f"error: traces not found at {args.traces}")
    lists = [x.strip() for x in args.lists.split(",") if x.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    seeds = parse_seeds(args.seeds)
    nodes_csv = str(args.traces / "openb_node_list_gpu_node.csv")
    jobs = [
        (nodes_csv, str(args.traces / f"openb_pod_list_{name}.csv"), p, s)
        for name in lists
        for p in policies
        for s in seeds
    ]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        values = list(pool.map(_unallocated, jobs, chunksize=1))
    table: dict[str, dict[str, dict[str, object]]] = {}
    for (_, pods_csv, policy, _), value in zip(jobs, values):
        name = Path(pods_csv).stem.removeprefix("openb_pod_list_")
        cell = table.setdefault(name, {}).setdefault(policy, {"per_seed": []})
        cell["per_seed"].append(value)  # type: ignore[union-attr]
    for cells in table.values():
        for cell in cells.values():
            cell["median"] = round(statistics.median(cell["per_seed"]), 2)  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print_table(
        table, lists, policies, len(seeds), f"seeds {args.seeds}, {len(jobs)} runs, {time.perf_counter() - start:.0f} s"
    )


def print_table(
    table: dict[str, dict[str, dict[str, object]]], lists: list[str], policies: list[str], seeds: int, note: str
) -> None:
    print(f"Unallocated GPU % at 100% arrived load, median over seeds ({note}); published figures in parentheses")
    print("| pod list | " + " | ".join(policies) + " | corral < fgd (seeds) |")
    print("|---" * (len(policies) + 2) + "|")
    for name in lists:
        row = []
        for p in policies:
            published = PUBLISHED.get(p)
            ref = f" ({published[LISTS.index(name)]:.2f})" if published and name in LISTS else ""
            row.append(f"{table[name][p]['median']:.2f}{ref}")
        wins = ""
        if "corral" in policies and "fgd" in policies:
            pairs = zip(table[name]["corral"]["per_seed"], table[name]["fgd"]["per_seed"])  # type: ignore[call-overload]
            wins = f"{sum(1 for c, f in pairs if c < f)}/{seeds}"
        print(f"| {name} | " + " | ".join(row) + f" | {wins} |")


if __name__ == "__main__":
    main()
