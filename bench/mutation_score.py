"""Mutation score (issue 21): killed / tested mutants of the last `mutmut run`, per package, and every survivor.

Reads mutmut's results (run `make mutate` first; it calls this script and writes artifacts/mutation/report.txt).
A mutant counts as tested when it was killed, survived, or timed out (a timeout is a kill: the tests noticed);
"no tests" (no fast test reaches the function) and "not checked" (outside the pattern) are listed, not scored.

    python bench/mutation_score.py                         # every mutant mutmut knows about
    python bench/mutation_score.py 'corral.core.states*'   # those matching a pattern
    python bench/mutation_score.py --json --diffs
    python bench/mutation_score.py --sample 300 --seed 1 --names 'corral.scheduler*'   # a seeded sample, to run
    python bench/mutation_score.py --sample 300 --seed 1 'corral.scheduler*'           # the score on that sample

A sample (`make mutate-sample`) estimates the score where the full run takes hours on two cores: the same seed
picks the same mutants again (from mutmut's names, sorted), and with 300 mutants the estimate is within about
5 points (95%).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import random
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

MUTMUT = str(Path(sys.executable).with_name("mutmut"))
KILLS = {"killed", "timeout", "caught by type check"}
SCORED = KILLS | {"survived", "suspicious", "segfault"}


def load_statuses(patterns: list[str]) -> dict[str, str]:
    """Mutant name -> status, from `mutmut results --all true`, kept when it matches a pattern (none: all)."""
    out = subprocess.run([MUTMUT, "results", "--all", "true"], capture_output=True, text=True, check=True).stdout
    statuses: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, status = line.strip().partition(": ")
        if sep and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            statuses[name] = status
    return statuses


def package_of(mutant: str) -> str:
    """corral.scheduler.queueing.quota.x_is_borrowing__mutmut_3 -> corral.scheduler (core, scheduler, store)."""
    return ".".join(mutant.split(".")[:2])


@dataclass
class Summary:
    packages: dict[str, dict[str, object]]
    survivors: list[str]
    no_tests: list[str]
    diffs: dict[str, str] = field(default_factory=dict)


def compute_summary(statuses: dict[str, str]) -> Summary:
    by_package: dict[str, Counter[str]] = {}
    for name, status in statuses.items():
        by_package.setdefault(package_of(name), Counter())[status] += 1
    packages: dict[str, dict[str, object]] = {}
    for pkg, counts in sorted(by_package.items()):
        tested = sum(n for s, n in counts.items() if s in SCORED)
        killed = sum(n for s, n in counts.items() if s in KILLS)
        packages[pkg] = {
            "mutants": sum(counts.values()),
            "tested": tested,
            "killed": killed,
            "score_pct": round(100.0 * killed / tested, 1) if tested else None,
            "statuses": dict(counts),
        }
    survivors = sorted(n for n, s in statuses.items() if s in SCORED - KILLS)
    return Summary(packages, survivors, sorted(n for n, s in statuses.items() if s == "no tests"))


def pick_sample(statuses: dict[str, str], size: int, seed: int) -> list[str]:
    """`size` mutant names drawn without replacement by `seed` (all of them when there are fewer)."""
    names = sorted(statuses)
    return sorted(random.Random(seed).sample(names, min(size, len(names))))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="mutmut name patterns, e.g. 'corral.core.states*'")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--diffs", action="store_true", help="show each survivor's diff (mutmut show)")
    parser.add_argument("--sample", type=int, default=0, help="only a seeded random sample of this many mutants")
    parser.add_argument("--seed", type=int, default=1, help="the sample's seed")
    parser.add_argument("--names", action="store_true", help="print the (sampled) mutant names, one per line")
    args = parser.parse_args()
    statuses = load_statuses(args.patterns)
    if args.sample:
        statuses = {n: statuses[n] for n in pick_sample(statuses, args.sample, args.seed)}
    if args.names:
        print("\n".join(sorted(statuses)))
        return 0
    if not statuses:
        print("no mutation results: run `make mutate` first", file=sys.stderr)
        return 1
    summary = compute_summary(statuses)
    if args.diffs:
        summary.diffs = {
            n: subprocess.run([MUTMUT, "show", n], capture_output=True, text=True).stdout for n in summary.survivors
        }
    if args.json:
        print(json.dumps(asdict(summary), indent=2))
        return 0
    for pkg, p in summary.packages.items():
        score = "n/a" if p["score_pct"] is None else f"{p['score_pct']}%"
        print(
            f"{pkg}: {p['killed']} of {p['tested']} tested mutants killed ({score}); {p['mutants']} in all: {p['statuses']}"
        )
    print(f"\nsurviving mutants ({len(summary.survivors)}):")
    for name in summary.survivors:
        print(f"  {name}")
        if name in summary.diffs:
            print("    " + summary.diffs[name].rstrip().replace("\n", "\n    "))
    if summary.no_tests:
        print(f"\nno fast test reaches ({len(summary.no_tests)}):")
        for name in summary.no_tests:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
