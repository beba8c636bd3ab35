"""The overhead Corral adds in front of Slurm: the same one-GPU jobs sent through a Corral slurm pool and sent with
`sbatch` directly, side by side in one run, on one throw-away Slurm 22.05 (4 nodes x gpu:8, tests/slurm_cluster.py;
root, `make slurm-deps`) with `corral up` in front of it (its own node has no GPUs, so every job goes to Slurm).

- submit-to-start: 20 jobs, one after another: from the submitting call (`corral submit --gpus 1` / `sbatch
  --gres=gpu:1`) to the job's own first instruction (it writes `date +%s.%N`); median and p99.
- burst: 500 jobs that end at once, submitted as fast as the tool allows (`corral submit --array 0-499`, a loop of
  500 `corral submit` calls, a loop of 500 `sbatch` calls); time from the first call until every job has started,
  and jobs/s.

    .venv/bin/python bench/slurm_pool.py [--jobs 500] [--samples 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port, wait_for

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from slurm_cluster import PACKAGES, SlurmCluster, missing_tools  # noqa: E402

CORRAL = str(Path(sys.executable).with_name("corral"))
NODES, GPUS = 4, 8
TIMEOUT_S = 900.0


def marks(d: Path) -> list[float]:
    out = []
    for f in d.iterdir():
        try:
            out.append(float(f.read_text().split()[0]))
        except (ValueError, IndexError, OSError):
            pass
    return out


class Front:
    """`corral up` with no GPUs of its own and a slurm pool `hpc` over the cluster (every job runs as `nobody`)."""

    def __init__(self, root: Path, slurm: SlurmCluster) -> None:
        self.root = root
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        jobs = root / "jobs"
        jobs.mkdir(parents=True)
        jobs.chmod(0o711)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        self.env.update(
            HOME=str(root / "home"), XDG_CONFIG_HOME=str(root / "home" / ".config"), CORRAL_PORT=str(port),
            CORRAL_JOB_UI_PORT=str(free_port()), CORRAL_GATEWAY_PORT=str(free_port()),
            CORRAL_AGENT_PORT=str(free_port()), CORRAL_DATA_DIR=str(root / "data"), CORRAL_JOBS_DIR=str(jobs),
            CORRAL_GPUS="none", CORRAL_NODE_NAME="front",
        )  # fmt: skip
        log = open(root / "up.log", "wb")  # noqa: SIM115  (the process keeps it)
        self.proc = subprocess.Popen([CORRAL, "up"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        wait_for(self._healthy, 90, "corral up")
        self.cli("pool", "create", "hpc", "--kind", "slurm", "--setting", f"slurm_conf={slurm.conf}",
                 "--setting", f"log_dir={root / 'slurm-out'}", "--setting", "submit_as=service", "--setting", "service_user=nobody")  # fmt: skip
        wait_for(lambda: len([n for n in self.nodes() if n["source"] == "slurm"]) == NODES, 60, "slurm nodes read")

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def cli(self, *args: str) -> str:
        r = subprocess.run([CORRAL, *args], env=self.env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"corral {' '.join(args)}: {r.stderr}")
        return r.stdout

    def nodes(self) -> list[dict[str, Any]]:
        return json.loads(self.cli("nodes", "--json"))  # type: ignore[no-any-return]

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def mark_command(d: Path, name: str) -> str:
    return f"date +%s.%N > {shlex.quote(str(d / name))}"


def submit_to_start(front: Front, slurm: SlurmCluster, root: Path, samples: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for form in ("corral", "sbatch"):
        d = root / f"sts-{form}"
        d.mkdir()
        d.chmod(0o1777)
        waits = []
        for i in range(samples):
            cmd = mark_command(d, str(i))
            t0 = time.time()
            if form == "corral":
                front.cli("submit", "--gpus", "1", "--", "sh", "-c", cmd)
            else:
                slurm.sbatch("--gres=gpu:1", "-o", "/dev/null", script=f"#!/bin/sh\n{cmd}\n")
            f = d / str(i)
            wait_for(lambda f=f: f.exists() and f.read_text().strip(), TIMEOUT_S, f"{form} job {i} starts")
            waits.append(float(f.read_text().split()[0]) - t0)
        waits.sort()
        out[form] = {
            "median_s": round(statistics.median(waits), 3),
            "p99_s": round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3),
        }
    return out


def burst(front: Front, slurm: SlurmCluster, root: Path, jobs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for form in ("corral-array", "corral-loop", "sbatch-loop"):
        d = root / f"burst-{form}"
        d.mkdir()
        d.chmod(0o1777)
        t0 = time.time()
        if form == "corral-array":
            cmd = f'date +%s.%N > {shlex.quote(str(d))}/"$CORRAL_ARRAY_INDEX"'
            front.cli("submit", "--array", f"0-{jobs - 1}", "--gpus", "1", "--", "sh", "-c", cmd)
        elif form == "corral-loop":
            for i in range(jobs):
                front.cli("submit", "--gpus", "1", "--", "sh", "-c", mark_command(d, str(i)))
        else:
            for i in range(jobs):
                slurm.sbatch("--gres=gpu:1", "-o", "/dev/null", script=f"#!/bin/sh\n{mark_command(d, str(i))}\n")
        submitted = time.time() - t0
        wait_for(lambda d=d: len(list(d.iterdir())) >= jobs, TIMEOUT_S, f"{form}: all {jobs} start")
        last = max(marks(d))
        out[form] = {
            "submit_s": round(submitted, 2),
            "all_started_s": round(last - t0, 2),
            "jobs_per_s": round(jobs / (last - t0), 1),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=500, help="Jobs in the burst (default 500).")
    ap.add_argument("--samples", type=int, default=20, help="Submit-to-start samples per form (default 20).")
    ap.add_argument("--json", action="store_true", help="Print JSON.")
    args = ap.parse_args()
    missing = missing_tools()
    if missing:
        raise SystemExit(f"Slurm is missing ({', '.join(missing)}): make slurm-deps (apt-get install {PACKAGES})")
    if os.geteuid() != 0:
        raise SystemExit("run as root: the throw-away Slurm cluster's slurmd runs jobs as their users")
    root = Path(tempfile.mkdtemp(prefix="corral-bench-slurm-", dir="/tmp"))
    root.chmod(0o755)
    slurm = SlurmCluster(root / "slurm", nodes=NODES, gpus=GPUS)
    front = None
    try:
        slurm.start()
        front = Front(root / "corral", slurm)
        result = {
            "slurm": f"{NODES} nodes x gpu:{GPUS} (Slurm 22.05, local)",
            "submit_to_start": submit_to_start(front, slurm, root, args.samples),
            "burst": burst(front, slurm, root, args.jobs),
            "jobs": args.jobs,
        }
    finally:
        if front is not None:
            front.close()
        slurm.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    sts = result["submit_to_start"]
    print(f"Slurm: {result['slurm']}; {args.samples} one-GPU jobs one after another, then a burst of {args.jobs}")
    print(f"{'submit-to-start':<18}{'median':>10}{'p99':>10}")
    for form, v in sts.items():  # type: ignore[union-attr]
        print(f"{form:<18}{v['median_s']:>9.2f}s{v['p99_s']:>9.2f}s")
    print(f"{'burst':<18}{'submit':>10}{'all started':>14}{'jobs/s':>10}")
    for form, v in result["burst"].items():  # type: ignore[union-attr]
        print(f"{form:<18}{v['submit_s']:>9.1f}s{v['all_started_s']:>13.1f}s{v['jobs_per_s']:>10.1f}")


if __name__ == "__main__":
    main()
