"""Burst submission: N one-GPU jobs that end at once, submitted in three ways; time until all of them started.

Forms, each on a fresh cluster of 4 nodes x 8 simulated H100s (`corral up` for the first node plus three
`corral agent` processes that join with one-use tokens, as tests/e2e/conftest.py does):

- loop:   a bash loop of N `corral submit --gpus 1 -- sh -c '...'` calls (one process per job)
- array:  one `corral submit --array 0-(N-1) --gpus 1 -- sh -c '...'`
- api16:  16 threads, each with its own HTTP connection, POSTing /api/v1/jobs until N jobs are in
- sbatch: (with --slurm) a bash loop of N `sbatch --gres=gpu:1 -o /dev/null --wrap '...'` on a throw-away Slurm
          22.05 with the same shape (4 nodes x gpu:8, ../shared/recipes/slurm-local.sh)

Every job's command appends its own wall-clock start (`date +%s.%N`) to one shared file. Per form:
submit_s is the submission phase alone (first call to last answer); all_started_s runs from the first
submission to the last job's own start mark; jobs_per_s = jobs that wrote a mark / all_started_s. For Corral the
API's view (max `started_at` - time of the first submission) is printed too (api_started_s), and `failed`: jobs
that ended FAILED or CANCELLED instead (e.g. "lost: the agent on n3 no longer runs it"); the run goes on.

    .venv/bin/python bench/burst.py [--jobs 500] [--forms loop,array,api16] [--slurm] [--json]

Target (issue 13): the `corral submit` loop starts all jobs at least as fast as the sbatch loop on the same
machine, and the array at least 10x faster than that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port, wait_for

CORRAL = str(Path(sys.executable).with_name("corral"))
REPO = Path(__file__).resolve().parent.parent
SLURM_RECIPES = REPO.parent / "shared" / "recipes"
NODES = 4
GPUS_PER_NODE = 8
API_CLIENTS = 16
START_TIMEOUT_S = 600.0


def read_marks(path: Path) -> list[float]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(float(line))
    return out


def make_marks(root: Path) -> Path:
    """A file every job may append to: the jobs run as their users' own Unix identities (root agent)."""
    d = root / "marks"
    d.mkdir()
    d.chmod(0o1777)
    f = d / "starts"
    f.touch()
    f.chmod(0o666)
    return f


def job_argv(marks: Path) -> list[str]:
    return ["sh", "-c", f"date +%s.%N >> {marks}"]


class Cluster:
    """`corral up` (node n1) plus agents n2..n4, each with GPUS_PER_NODE simulated H100s, in a fresh dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.agent_url = f"https://127.0.0.1:{free_port()}"
        jobs_dir = root / "jobs"
        jobs_dir.mkdir()
        jobs_dir.chmod(0o711)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        # as installed: from .pyc files (a shell with PYTHONDONTWRITEBYTECODE, as this machine's, would have every
        # `corral submit` of the loop compile corral's modules anew)
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env.update(
            HOME=str(root / "home"),
            XDG_CONFIG_HOME=str(root / "home" / ".config"),
            CORRAL_PORT=str(self.port),
            CORRAL_JOB_UI_PORT=str(free_port()),
            CORRAL_GATEWAY_PORT=str(free_port()),
            CORRAL_AGENT_PORT=self.agent_url.rsplit(":", 1)[1],
            CORRAL_DATA_DIR=str(root / "data"),
            CORRAL_JOBS_DIR=str(jobs_dir),
            CORRAL_GPUS=f"sim:{GPUS_PER_NODE}xH100-80GB",
            CORRAL_NODE_NAME="n1",
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        self.token = ""

    def spawn(self, argv: list[str], env: dict[str, str], log: str) -> None:
        out = open(self.root / f"{log}.log", "wb")  # noqa: SIM115  (the process keeps it)
        self.procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self) -> None:
        self.spawn([CORRAL, "up"], self.env, "up")

        def healthy() -> bool:
            if self.procs[0].poll() is not None:
                raise SystemExit(f"`corral up` exited {self.procs[0].returncode}: see {self.root}/up.log")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 60, "server healthy")
        self.token = wait_for(lambda: self._admin_token(), 30, "admin token")
        self.env.update(CORRAL_URL=self.url, CORRAL_TOKEN=self.token)
        for n in range(2, NODES + 1):
            node = f"n{n}"
            r = subprocess.run(
                [CORRAL, "tokens", "join", "create", "--ttl", "10m", "--uses", "1"],
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
            )
            if r.returncode:
                raise SystemExit(f"join token: {r.stderr}")
            tf = self.root / f"join-{node}"
            fd = os.open(tf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(r.stdout.strip() + "\n")
            argv = [CORRAL, "agent", "--join", self.agent_url, "--gpus", f"sim:{GPUS_PER_NODE}xH100-80GB"]
            argv += ["--node-name", node, "--token-file", str(tf)]
            self.spawn(argv, dict(self.env, CORRAL_DATA_DIR=str(self.root / f"agent-{node}")), f"agent-{node}")
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=10) as c:

            def ready() -> bool:
                nodes = c.get("/api/v1/nodes").json()
                return bool(sum(n["state"] == "READY" for n in nodes) == NODES)

            wait_for(ready, 90, f"{NODES} nodes READY")

    def _admin_token(self) -> str:
        p = self.root / "data" / "admin-token"
        return p.read_text().strip() if p.exists() else ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def jobs(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=30) as c:
            r = c.get("/api/v1/jobs", params={"all": "true", "limit": 500})
            while True:
                r.raise_for_status()
                out += r.json()
                nxt = r.links.get("next", {}).get("url")
                if not nxt:
                    return out
                r = c.get(nxt)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        # jobs run under a shim in a session of their own: end any left, found by this run's dir on their argv
        me = os.getpid()
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit() or int(pid_dir.name) == me:
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.root).encode() in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)


def wait_started(marks: Path, n: int, what: str, failed: Any = None) -> tuple[list[float], int]:
    """The start marks once all n jobs wrote theirs; (marks, jobs that ended FAILED or CANCELLED). A job that
    failed may never write its mark: then the wait ends once the marks and the failures add up to n and no mark
    came for 5 s."""
    deadline = time.monotonic() + START_TIMEOUT_S
    next_check = time.monotonic() + 5
    bad, last_count, last_change = 0, -1, time.monotonic()
    while True:
        got = read_marks(marks)
        if len(got) != last_count:
            last_count, last_change = len(got), time.monotonic()
        if len(got) >= n:
            return got, (failed() if failed is not None else 0)
        if got and bad and len(got) + bad >= n and time.monotonic() - last_change > 5:
            return got, bad
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: {len(got)} of {n} jobs started within {START_TIMEOUT_S:.0f} s ({bad} failed)")
        if failed is not None and time.monotonic() > next_check:
            bad = failed()
            next_check = time.monotonic() + 2
        time.sleep(0.02)


def run_loop(argv_of_one: list[str], n: int, env: dict[str, str]) -> tuple[float, float]:
    """A bash loop of n calls of argv_of_one; returns (time of the first call, time the loop ended)."""
    one = " ".join(shlex.quote(a) for a in argv_of_one)
    script = f"for i in $(seq {n}); do {one} >/dev/null || exit 1; done"
    t0 = time.time()
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    t1 = time.time()
    if r.returncode:
        raise SystemExit(f"submission loop failed: {r.stderr.strip()[-2000:]}")
    return t0, t1


def corral_form(form: str, n: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"corral-burst-{form}-"))
    root.chmod(0o711)
    marks = make_marks(root)
    cluster = Cluster(root)
    try:
        cluster.start()
        cmd = job_argv(marks)
        if form == "loop":
            t0, t1 = run_loop([CORRAL, "submit", "--gpus", "1", "--", *cmd], n, cluster.env)
        elif form == "array":
            t0 = time.time()
            r = subprocess.run(
                [CORRAL, "submit", "--array", f"0-{n - 1}", "--gpus", "1", "--", *cmd],
                env=cluster.env,
                capture_output=True,
                text=True,
                check=False,
            )
            t1 = time.time()
            if r.returncode:
                raise SystemExit(f"array submit failed: {r.stderr}")
        else:
            t0, t1 = api_clients(cluster, cmd, n)

        def failed() -> int:
            bad = [j for j in cluster.jobs() if j["state"] in ("FAILED", "CANCELLED")]
            if bad:
                print(f"{form}: {len(bad)} jobs ended {bad[0]['state']}: {bad[0].get('reason')}", file=sys.stderr)
            return len(bad)

        starts, bad = wait_started(marks, n, form, failed)
        api_last = wait_for(lambda: api_started(cluster, n - bad), 60, "API shows every job started")
    finally:
        cluster.close()
    shutil.rmtree(root, ignore_errors=True)
    return row(form, n, t0, t1, starts, api_last, bad)


def api_started(cluster: Cluster, n: int) -> float | None:
    jobs = [j for j in cluster.jobs() if j.get("started_at")]
    if len(jobs) < n:
        return None
    return max(datetime.fromisoformat(j["started_at"]).timestamp() for j in jobs)


def api_clients(cluster: Cluster, cmd: list[str], n: int) -> tuple[float, float]:
    left = [n]
    lock = threading.Lock()
    errors: list[str] = []
    go = threading.Barrier(API_CLIENTS + 1)

    def client() -> None:
        with httpx.Client(base_url=cluster.url, headers=cluster.headers, timeout=60) as c:
            c.get("/healthz")  # connect before the clock starts
            go.wait()
            while True:
                with lock:
                    if left[0] <= 0 or errors:
                        return
                    left[0] -= 1
                r = c.post("/api/v1/jobs", json={"command": cmd, "gpus": 1})
                if r.status_code != 201:
                    errors.append(f"{r.status_code} {r.text[:300]}")
                    return

    threads = [threading.Thread(target=client) for _ in range(API_CLIENTS)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    t1 = time.time()
    if errors:
        raise SystemExit(f"API submission failed: {errors[0]}")
    return t0, t1


def slurm_form(n: int) -> dict[str, Any]:
    for tool in ("sbatch", "slurmctld", "slurmd", "munge"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(
                f"--slurm: {tool} not found; apt-get install -y --no-install-recommends "
                "slurmctld slurmd slurm-client munge"
            )
    root = Path(tempfile.mkdtemp(prefix="corral-burst-slurm-"))
    root.chmod(0o755)
    marks = make_marks(root)
    sdir = root / "slurm"
    env = dict(os.environ, SLURM_CONF=str(sdir / "slurm.conf"))
    start = subprocess.run(
        ["bash", str(SLURM_RECIPES / "slurm-local.sh"), str(sdir), str(NODES), str(GPUS_PER_NODE)],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if start.returncode:
            raise SystemExit(f"slurm-local.sh failed: {start.stdout}{start.stderr}")
        wrap = f"date +%s.%N >> {marks}"
        t0, t1 = run_loop(["sbatch", "--gres=gpu:1", "-o", "/dev/null", "--wrap", wrap], n, env)
        starts, _ = wait_started(marks, n, "sbatch")
    finally:
        subprocess.run(["bash", str(SLURM_RECIPES / "slurm-local-stop.sh"), str(sdir)], check=False)
    shutil.rmtree(root, ignore_errors=True)
    return row("sbatch", n, t0, t1, starts, None, 0)


def row(
    form: str, n: int, t0: float, t1: float, starts: list[float], api_last: float | None, failed: int
) -> dict[str, Any]:
    all_started = max(starts) - t0
    r = {
        "form": form,
        "jobs": n,
        "submit_s": round(t1 - t0, 3),
        "all_started_s": round(all_started, 3),
        "jobs_per_s": round(len(starts) / all_started, 1),
        "api_started_s": None if api_last is None else round(api_last - t0, 3),
        "failed": failed,
    }
    print(json.dumps(r), file=sys.stderr, flush=True)  # as each form ends: a later failure keeps what was measured
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--slurm", action="store_true", help="Also time an sbatch loop on a local Slurm (root only).")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--forms", default="loop,array,api16", help="Corral forms to time, comma-separated (loop, array, api16)."
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # so the clusters are stopped on the way out
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    forms = [f for f in args.forms.split(",") if f]
    if not set(forms) <= {"loop", "array", "api16"}:
        ap.error(f"--forms: unknown form in {args.forms!r} (loop, array, api16)")
    rows = [corral_form(form, args.jobs) for form in forms]
    if args.slurm:
        rows.append(slurm_form(args.jobs))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'form':>7} {'jobs':>5} {'submit_s':>9} {'all_started_s':>14} {'jobs/s':>8} {'api_started_s':>14} {'failed':>7}"
    )
    for r in rows:
        api = "" if r["api_started_s"] is None else f"{r['api_started_s']:.2f}"
        print(
            f"{r['form']:>7} {r['jobs']:>5} {r['submit_s']:>9.2f} {r['all_started_s']:>14.2f} "
            f"{r['jobs_per_s']:>8.1f} {api:>14} {r['failed']:>7}"
        )
    if not args.slurm:
        print("sbatch: skipped (run with --slurm)")
        return
    by = {r["form"]: r for r in rows}
    slurm = by["sbatch"]["jobs_per_s"]
    if "loop" in by:
        print(f"loop >= sbatch loop: {'yes' if by['loop']['jobs_per_s'] >= slurm else 'NO'}")
    if "array" in by:
        print(f"array >= 10x sbatch loop: {'yes' if by['array']['jobs_per_s'] >= 10 * slurm else 'NO'}")


if __name__ == "__main__":
    main()
