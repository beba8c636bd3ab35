"""Wall time of everyday `corral` CLI calls: `--version`, `submit`, `jobs`, each a fresh process.

Starts a real `corral up` process (temp data dir, free port, simulated GPUs), then times each command N times
as a new subprocess with CORRAL_URL/CORRAL_TOKEN pointing at it, wall clock around the whole call (interpreter
start, imports, the HTTP round trip, exit). `corral submit -- true` submits a trivial job each time, so by the end
about N jobs exist (plain `corral jobs` shows only the pending and running ones; most have finished by then).
`python -c pass` with the same interpreter is timed too: the floor no Python command can beat. One warm-up call of each comes first (page cache) and is not counted. Prints median
and p95 per command. Targets (issue 13), on an idle machine: `corral submit` under 100 ms, `corral --version`
under 50 ms.

    .venv/bin/python bench/cli_speed.py [--runs 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from benchlib import pct, start_corral_up, stop_corral

CORRAL = str(Path(sys.executable).with_name("corral"))

# (name shown, argv)
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("corral --version", [CORRAL, "--version"]),
    ("corral submit", [CORRAL, "submit", "--", "true"]),
    ("corral jobs", [CORRAL, "jobs"]),
]


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds of wall time for one fresh process running argv; exits loudly if it fails."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stderr}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    root.chmod(0o711)  # jobs run as their own Unix users (root agent)
    proc, url, token = start_corral_up([CORRAL], root, {})
    times: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(HOME=str(root), XDG_CONFIG_HOME=str(root / ".config"))
        # An installed corral runs from its .pyc files (pip writes them; so does a first run): a shell that sets
        # PYTHONDONTWRITEBYTECODE (this machine's does) would have every call compile corral's modules anew.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            while not c.get("/api/v1/nodes").json():
                time.sleep(0.1)
        cli_env = dict(env, CORRAL_URL=url, CORRAL_TOKEN=token)
        for _, argv in COMMANDS:  # warm-up: page cache, .pyc files; not counted
            timed(argv, cli_env)
        for _ in range(args.runs):  # interleaved, so a slow spell of the machine hits every command alike
            for name, argv in COMMANDS:
                times[name].append(timed(argv, cli_env))
    finally:
        stop_corral(proc)
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        {
            "command": name,
            "median_ms": round(statistics.median(ts) * 1000, 1),
            "p95_ms": round(pct(ts, 95) * 1000, 1),
            "runs": len(ts),
        }
        for name, ts in times.items()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['command']:>18}: median {r['median_ms']:6.1f} ms, p95 {r['p95_ms']:6.1f} ms  ({r['runs']} runs)")


if __name__ == "__main__":
    main()
