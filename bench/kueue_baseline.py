"""Kueue's baseline scheduler-performance scenario, end to end on a real `corral server` with simulated agents.

Kueue's test/performance/scheduler/configs/baseline (generator.yaml, rangespec.yaml; kubernetes-sigs/kueue at
ff69552e) specifies:

    5 cohorts x 6 ClusterQueues = 30 queues; each queue: nominalQuota 20 (cpu), borrowingLimit 100,
    preemption reclaimWithinCohort: Any, withinClusterQueue: LowerPriority. Per queue, three workload sets
    created concurrently, each one workload every creationIntervalMs (the first after one interval):

    | class  | per queue | all 30 | creationIntervalMs | request (cpu) | runtimeMs | priority | threshold (avg) |
    |--------|-----------|--------|--------------------|---------------|-----------|----------|-----------------|
    | small  | 350       | 10,500 | 100 (35 s)         | 1             | 200       | 50       | 215.5 s (<260)  |
    | medium | 100       | 3,000  | 500 (50 s)         | 5             | 500       | 100      | 76.8 s (<90)    |
    | large  | 50        | 1,500  | 1200 (60 s)        | 20            | 1000      | 200      | 16.5 s (<23)    |

    15,000 workloads in all; wall time 351.1 s on average (maxWallMs 425,000); ClusterQueue usage >= 50 %
    (55.9 % measured). Time to admission = creation -> Admitted. Kueue runs no pods: its runner marks a workload
    Finished runtimeMs after admission, so only quota counts (no nodes).

Mapping to Corral:
- a cohort -> a parent tenant `kb-c<C>` (a tenant's parent is its cohort: borrowing only from idle guarantees
  of the cohort); a ClusterQueue -> a child tenant `kb-c<C>-q<Q>` with a total quota guaranteed = nominal (20)
  and max = nominal + borrowing limit (120), a member user and its API token, which submits its workloads;
- one Kueue cpu unit -> one simulated GPU (scale 1:1): the pool is exactly the sum of the nominal quotas,
  600 GPUs, as --nodes x --gpus-per-node (default 10 x 60, `sim:60xH100-80GB`; a node holds at most 64, and a
  large workload's 20 GPUs must fit on one node, as Corral places whole GPUs on one node);
- a workload -> a job `sleep <runtime>` (priority = the class's priority, name `<class>-<tenant>-<k>`), submitted
  over HTTP on Kueue's timetable (per queue and class, the k-th at k x interval, all queues at once; a job
  submitted late because the server is busy is still measured from its own creation);
- time to admission = the job's created_at -> started_at (the scheduler's placement, which is Kueue's
  admission); "from due" measures from the job's planned creation time instead (the two differ when the server
  accepts submissions more slowly than the timetable); wall time = first submission -> last job finished (as the
  runner's, which starts with generation). The jobs really run (a shim and a `sleep` process per job on the
  agent), unlike Kueue's runner. Preemption differs: Corral has no exact twin of withinClusterQueue:
  LowerPriority; its reclaim of borrowed GPUs within the cohort matches reclaimWithinCohort.
The report adds CPU seconds per component (server, agents, the jobs with their shims, this client, and the whole
machine: a busy machine shared with other work shows as machine_busy far above the sum of the parts).

    .venv/bin/python bench/kueue_baseline.py [--scale 1.0] [--nodes 10] [--gpus-per-node 60]
        [--threads 16] [--telemetry-s 5] [--database-url URL] [--replicas 1] [--timeout-s 1800] [--keep]
        [--py-spy PATH] [--json]

--scale F keeps the 30 queues, quotas and intervals and submits F x the workloads of each set (at least one).
--database-url must name an empty database you can throw away (e.g. postgresql://...). --replicas N starts N
`corral server` replicas on it (PostgreSQL only): the first leads (it schedules), agent k and submitting thread k
talk to replica k mod N. On PostgreSQL the report adds the database's CPU seconds (a local server's).
Scratch goes to /tmp/kueue_baseline/ (removed at the end unless --keep). --py-spy PATH samples the server's
GIL holder at 10 Hz into <scratch>/server.folded (py-spy's raw format) while the jobs run (for diagnosis).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from benchlib import free_port, pct

CORRAL = str(Path(sys.executable).with_name("corral"))
SCRATCH = Path("/tmp/kueue_baseline")


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    name: str
    count: int  # per queue
    interval_ms: int
    request: int  # cpu units in Kueue, GPUs here
    runtime_ms: int
    priority: int
    kueue_avg_admission_s: float  # the average Kueue measured (rangespec.yaml)
    kueue_max_admission_s: float  # the threshold its check enforces


CLASSES = (
    WorkloadClass("small", 350, 100, 1, 200, 50, 215.468, 260.0),
    WorkloadClass("medium", 100, 500, 5, 500, 100, 76.768, 90.0),
    WorkloadClass("large", 50, 1200, 20, 1000, 200, 16.501, 23.0),
)

COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL = 20
BORROWING_LIMIT = 100
KUEUE_WALL_S = 351.1164
KUEUE_MAX_WALL_S = 425.0


@dataclass(frozen=True, slots=True)
class Planned:
    due_s: float  # after the start of generation
    tenant: str
    cls: WorkloadClass
    k: int


def tenant_names() -> list[tuple[str, str]]:
    """(tenant, cohort) for every ClusterQueue."""
    return [(f"kb-c{c}-q{q}", f"kb-c{c}") for c in range(COHORTS) for q in range(QUEUES_PER_COHORT)]


def compute_plan(scale: float) -> list[Planned]:
    """Kueue's timetable: per queue and class the k-th workload (k from 1) is created at k x interval."""
    plan = [
        Planned(k * wc.interval_ms / 1000, tenant, wc, k)
        for tenant, _ in tenant_names()
        for wc in CLASSES
        for k in range(1, max(1, round(wc.count * scale)) + 1)
    ]
    plan.sort(key=lambda p: (p.due_s, p.tenant, p.cls.name))
    return plan


class Cluster:
    """A real `corral server` and `corral agent` processes with simulated GPUs, in a scratch dir."""

    def __init__(
        self, root: Path, nodes: int, gpus_per_node: int, database_url: str, telemetry_s: float, replicas: int = 1
    ) -> None:
        self.root = root
        self.nodes = [f"kb-n{i:02d}" for i in range(nodes)]
        self.gpus = f"sim:{gpus_per_node}xH100-80GB"
        # (API port, agent port) per server replica; the first one starts first, migrates and leads
        self.ports = [(free_port(), free_port()) for _ in range(replicas)]
        self.port, self.agent_port = self.ports[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.urls = [f"http://127.0.0.1:{p}" for p, _ in self.ports]
        self.jobs_dir = root / "jobs"  # jobs run as their users' uids: reachable by them, 0711 above
        self.jobs_dir.mkdir(parents=True)
        self.jobs_dir.chmod(0o711)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        self.env.update(
            HOME=str(root),
            XDG_CONFIG_HOME=str(root / ".config"),
            CORRAL_PORT=str(self.port),
            CORRAL_AGENT_PORT=str(self.agent_port),
            CORRAL_JOB_UI_PORT="0",
            CORRAL_GATEWAY_PORT="0",
            CORRAL_DATA_DIR=str(root / "data"),
            CORRAL_JOBS_DIR=str(self.jobs_dir),
            CORRAL_METRICS_INTERVAL_S=str(telemetry_s),
        )
        self.database_url = database_url
        if database_url:
            self.env["CORRAL_DATABASE_URL"] = database_url
        self.server: subprocess.Popen[bytes] | None = None
        self.servers: list[subprocess.Popen[bytes]] = []
        self.agents: list[subprocess.Popen[bytes]] = []
        self.admin = ""

    def _spawn(self, args: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        with open(self.root / f"{log}.log", "wb") as out:
            return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> None:
        for i, (port, agent_port) in enumerate(self.ports):
            env = dict(self.env, CORRAL_PORT=str(port), CORRAL_AGENT_PORT=str(agent_port))
            log = "server" if i == 0 else f"server-{i}"
            proc = self._spawn([CORRAL, "server"], env, log)
            self.servers.append(proc)
            self.server = self.server or proc
            deadline = time.monotonic() + 60
            token_file = self.root / "data" / "admin-token"
            while not token_file.exists() or not self._healthy(self.urls[i]):
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit(f"server did not start: see {self.root / (log + '.log')}")
                time.sleep(0.1)
        self.admin = token_file.read_text().strip()
        join = httpx.post(
            f"{self.url}/api/v1/join-tokens",
            json={"ttl_s": 3600, "uses": len(self.nodes)},
            headers=self.headers(self.admin),
        )
        join.raise_for_status()
        join_file = self.root / "join-token"
        fd = os.open(join_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(join.json()["token"] + "\n")
        for k, node in enumerate(self.nodes):
            env = dict(self.env, CORRAL_DATA_DIR=str(self.root / f"agent-{node}"))
            # agent k talks to replica k mod N first (the others are its failover)
            order = self.ports[k % len(self.ports) :] + self.ports[: k % len(self.ports)]
            join_urls = ",".join(f"https://127.0.0.1:{a}" for _, a in order)
            args = [CORRAL, "agent", "--join", join_urls, "--token-file", str(join_file)]
            self.agents.append(self._spawn([*args, "--gpus", self.gpus, "--node-name", node], env, f"agent-{node}"))
        deadline = time.monotonic() + 120
        while True:
            nodes = httpx.get(f"{self.url}/api/v1/nodes", headers=self.headers(self.admin)).json()
            if sum(1 for n in nodes if n["name"] in self.nodes and n["state"] == "READY") == len(self.nodes):
                return
            if time.monotonic() > deadline:
                sys.exit(f"agents did not register: {[(n['name'], n['state']) for n in nodes]}")
            time.sleep(0.2)

    @staticmethod
    def headers(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    @staticmethod
    def _healthy(url: str) -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far: the server, the agents, and the jobs with their shims: the agents' reaped children,
        and the shim fork servers (an agent's live child) with the shims they forked and reaped."""
        out: dict[str, float] = {}
        for name, procs in (("server", self.servers), ("agents", self.agents)):
            own = children = 0.0
            for p in procs:
                try:
                    proc = psutil.Process(p.pid) if p is not None else None
                    t = proc.cpu_times() if proc is not None else None
                    live = proc.children() if proc is not None and name == "agents" else []
                except psutil.Error:
                    t, live = None, []
                if t is not None:
                    own += t.user + t.system
                    children += t.children_user + t.children_system
                for child in live:  # the fork server: its own time and its reaped shims'
                    try:
                        c = child.cpu_times()
                    except psutil.Error:
                        continue
                    children += c.user + c.system + c.children_user + c.children_system
            out[name] = round(own, 1)
            if name == "agents":
                out["jobs_and_shims"] = round(children, 1)
        if self.database_url:
            out["database"] = round(_postgres_cpu_s(), 1)
        return out

    def close(self) -> None:
        for p in [*self.agents, *self.servers]:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        for p in [*self.agents, *self.servers]:
            if p is None:
                continue
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        # Shims run in sessions of their own (they outlive an agent by design): end those of this run, found by
        # this run's scratch dir on their command line.
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(str(self.root) in arg for arg in proc.info["cmdline"] or ()):
                    for child in proc.children(recursive=True):
                        child.kill()
                    proc.kill()
            except psutil.Error:
                pass


def _postgres_cpu_s() -> float:
    """CPU time of the local PostgreSQL: the postmaster's own and its reaped backends', and its live children's
    (0 when it is not on this machine or not readable)."""
    total = 0.0
    for proc in psutil.process_iter(["name", "ppid"]):
        try:
            if proc.info["name"] not in ("postgres", "postmaster"):
                continue
            parent = proc.parent()
            if parent is not None and parent.name() in ("postgres", "postmaster"):
                t = proc.cpu_times()
                total += t.user + t.system  # a backend or worker, alive now
            else:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def create_tenants(c: Cluster) -> dict[str, str]:
    """Cohorts (parent tenants), queues (child tenants with quotas), a member and its token each: tenant -> token."""
    tokens: dict[str, str] = {}
    with httpx.Client(base_url=c.url, headers=c.headers(c.admin), timeout=60) as h:
        for cohort in sorted({co for _, co in tenant_names()}):
            h.post("/api/v1/tenants", json={"name": cohort}).raise_for_status()
        for tenant, cohort in tenant_names():
            h.post("/api/v1/tenants", json={"name": tenant, "parent": cohort}).raise_for_status()
            quota = {"gpu_model": "", "guaranteed_gpus": NOMINAL, "max_gpus": NOMINAL + BORROWING_LIMIT}
            h.put(f"/api/v1/tenants/{tenant}/quotas", json=quota).raise_for_status()
            user = f"u-{tenant}"
            h.post("/api/v1/users", json={"name": user, "role": "member", "tenant": tenant}).raise_for_status()
            r = h.post("/api/v1/tokens", json={"name": "kueue-baseline", "user": user})
            r.raise_for_status()
            tokens[tenant] = r.json()["token"]
    return tokens


class Submitter:
    """Threads that submit the planned jobs at their due times (late ones at once)."""

    def __init__(self, urls: list[str], tokens: dict[str, str], plan: list[Planned], threads: int) -> None:
        self.urls = urls  # thread k submits to urls[k mod len]
        self.tokens = tokens
        self.plan = plan
        self.threads = threads
        self.lock = threading.Lock()
        self.next = 0
        self.lag_s: list[float] = []  # actual POST start - due
        self.post_s: list[float] = []  # POST round trip
        self.errors: list[str] = []
        self.t0 = 0.0

    def run(self, t0: float) -> None:
        self.t0 = t0
        workers = [
            threading.Thread(target=self._work, args=(self.urls[k % len(self.urls)],), daemon=True)
            for k in range(self.threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def _work(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=120) as h:
            while True:
                with self.lock:
                    if self.next >= len(self.plan):
                        return
                    p = self.plan[self.next]
                    self.next += 1
                wait = self.t0 + p.due_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                body = {
                    "command": ["sleep", f"{p.cls.runtime_ms / 1000:g}"],
                    "name": f"{p.cls.name}-{p.tenant}-{p.k}",
                    "gpus": p.cls.request,
                    "priority": p.cls.priority,
                }
                start = time.monotonic()
                try:
                    r = h.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {self.tokens[p.tenant]}"})
                    ok = r.status_code in (200, 201)
                    err = "" if ok else f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    ok, err = False, f"{type(e).__name__}: {e}"
                end = time.monotonic()
                with self.lock:
                    self.lag_s.append(start - self.t0 - p.due_s)
                    self.post_s.append(end - start)
                    if not ok:
                        self.errors.append(err)


def count_active(h: httpx.Client) -> int:
    r = h.get("/api/v1/jobs", params={"state": ["PENDING", "RUNNING"], "limit": 1})
    r.raise_for_status()
    return int(r.headers["X-Total-Count"])


def fetch_jobs(h: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    before: int | None = None
    while True:
        params: dict[str, Any] = {"all": "true", "limit": 10_000, "newest_first": "true"}
        if before is not None:
            params["before_id"] = before
        page = h.get("/api/v1/jobs", params=params, timeout=300).json()
        jobs += page
        if len(page) < 10_000:
            return jobs
        before = min(j["id"] for j in page)


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def summarize(jobs: list[dict[str, Any]], t0_wall: float) -> dict[str, Any]:
    """Per class: created_at -> started_at, and (from_due) Kueue's planned creation time -> started_at."""
    intervals = {wc.name: wc.interval_ms / 1000 for wc in CLASSES}
    by_class: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    from_due: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    states: dict[str, int] = {}
    preemptions = restarted = 0
    for j in jobs:
        states[j["state"]] = states.get(j["state"], 0) + 1
        preemptions += j.get("preemptions", 0)
        restarted += j["attempt"] > 1
        cls = j["name"].split("-", 1)[0]
        if j["started_at"] and cls in by_class:
            by_class[cls].append(ts(j["started_at"]) - ts(j["created_at"]))
            due = t0_wall + int(j["name"].rsplit("-", 1)[1]) * intervals[cls]
            from_due[cls].append(ts(j["started_at"]) - due)
    classes = {}
    for wc in CLASSES:
        w = by_class[wc.name]
        classes[wc.name] = {
            "jobs": len(w),
            "mean_s": round(statistics.fmean(w), 2) if w else None,
            "p50_s": round(pct(w, 50), 2) if w else None,
            "p90_s": round(pct(w, 90), 2) if w else None,
            "max_s": round(max(w), 2) if w else None,
            "mean_from_due_s": round(statistics.fmean(from_due[wc.name]), 2) if w else None,
            "kueue_avg_s": wc.kueue_avg_admission_s,
            "kueue_threshold_s": wc.kueue_max_admission_s,
        }
    created = [ts(j["created_at"]) for j in jobs]
    finished = [ts(j["finished_at"]) for j in jobs if j["finished_at"]]
    return {
        "states": states,
        "preemptions": preemptions,
        "restarted_jobs": restarted,
        "classes": classes,
        "server_span_s": round(max(finished) - min(created), 1) if finished else None,
    }


def compute_usage_pct(jobs: list[dict[str, Any]], pool: int) -> float | None:
    """GPU-seconds held (started -> finished) over pool x span: Kueue's ClusterQueue usage, summed over queues."""
    held = [
        (ts(j["started_at"]), ts(j["finished_at"]), int(j["gpu_count"]))
        for j in jobs
        if j["started_at"] and j["finished_at"]
    ]
    if not held:
        return None
    span = max(h[1] for h in held) - min(ts(j["created_at"]) for j in jobs)
    return round(100 * sum((e - s) * g for s, e, g in held) / (pool * span), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each workload set to submit")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--gpus-per-node", type=int, default=60)
    ap.add_argument("--threads", type=int, default=16, help="submitting threads")
    ap.add_argument("--telemetry-s", type=float, default=5.0, help="agents' telemetry interval (0: none)")
    ap.add_argument("--database-url", default="")
    ap.add_argument(
        "--replicas", type=int, default=1, help="server replicas on the one database (more than 1: PostgreSQL)"
    )
    ap.add_argument("--queueing", default="", help="the server's CORRAL_QUEUEING (default: the server's default)")
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, database)")
    ap.add_argument("--py-spy", default="", help="a py-spy binary: sample the server while jobs run (diagnosis)")
    ap.add_argument("--py-spy-rate", type=int, default=10, help="py-spy's samples per second")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pool = args.nodes * args.gpus_per_node
    if pool < COHORTS * QUEUES_PER_COHORT * NOMINAL or args.gpus_per_node < max(wc.request for wc in CLASSES):
        sys.exit(f"the pool must hold the {COHORTS * QUEUES_PER_COHORT * NOMINAL} GPUs of the nominal quotas")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    SCRATCH.chmod(0o711)
    root = Path(tempfile.mkdtemp(prefix="run-", dir=SCRATCH))
    root.chmod(0o711)
    plan = compute_plan(args.scale)
    if args.replicas < 1 or (args.replicas > 1 and not args.database_url.startswith("postgresql")):
        sys.exit("--replicas: at least 1, and more than 1 needs --database-url postgresql://...")
    cluster = Cluster(root, args.nodes, args.gpus_per_node, args.database_url, args.telemetry_s, args.replicas)
    if args.queueing:
        cluster.env["CORRAL_QUEUEING"] = args.queueing
    progress: list[dict[str, Any]] = []
    try:
        setup0 = time.monotonic()
        cluster.start()
        tokens = create_tenants(cluster)
        setup_s = time.monotonic() - setup0
        cpu0 = cluster.cpu_seconds()
        self0 = resource.getrusage(resource.RUSAGE_SELF)

        def say(message: str) -> None:
            if not args.json:
                print(message, file=sys.stderr, flush=True)

        say(f"setup {setup_s:.1f} s ({args.nodes} agents); submitting {len(plan)} jobs")
        submitter = Submitter(cluster.urls, tokens, plan, args.threads)
        spy = None
        if args.py_spy and cluster.server is not None:
            spy_args = [
                args.py_spy,
                "record",
                "--pid",
                str(cluster.server.pid),
                "--format",
                "raw",
                "--threads",
                "--gil",
            ]
            spy_out = open(root / "py-spy.log", "wb")  # noqa: SIM115 (closed with the process below)
            spy = subprocess.Popen(
                [*spy_args, "-r", str(args.py_spy_rate), "-o", str(root / "server.folded")],
                stdout=spy_out,
                stderr=spy_out,
            )
        machine0 = psutil.cpu_times()
        t0, t0_wall = time.monotonic(), time.time()
        sub = threading.Thread(target=submitter.run, args=(t0,), daemon=True)
        sub.start()
        submit_end = None
        with httpx.Client(base_url=cluster.url, headers=cluster.headers(cluster.admin), timeout=120) as h:
            while True:
                time.sleep(1.0)
                if submit_end is None and not sub.is_alive():
                    submit_end = time.monotonic() - t0
                active = count_active(h)
                now = time.monotonic() - t0
                done = len(submitter.post_s)
                if not progress or now - progress[-1]["t_s"] >= 10:
                    progress.append({"t_s": round(now, 1), "submitted": done, "active": active})
                    say(f"  t={now:6.1f} s submitted {done:6d}  pending+running {active:6d}")
                if submit_end is not None and active == 0:
                    break
                if now > args.timeout_s:
                    say("timed out")
                    break
            wall_s = time.monotonic() - t0
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            cpu1 = cluster.cpu_seconds()
            machine1 = psutil.cpu_times()
            self1 = resource.getrusage(resource.RUSAGE_SELF)
            jobs = fetch_jobs(h)
    finally:
        cluster.close()
    summary = summarize(jobs, t0_wall)
    cpu = {k: round(cpu1[k] - cpu0[k], 1) for k in cpu1}
    cpu["bench_client"] = round(self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime, 1)
    busy = sum(getattr(machine1, f) - getattr(machine0, f) for f in ("user", "system", "nice", "irq", "softirq"))
    cpu["machine_busy"] = round(busy, 1)  # all processes: what this run did not use, others on the machine did
    cpu["machine_capacity"] = round(wall_s * (psutil.cpu_count() or 1), 1)
    result = {
        "scale": args.scale,
        "jobs_planned": len(plan),
        "jobs_seen": len(jobs),
        "cluster": f"{args.nodes} nodes x {args.gpus_per_node} simulated GPUs",
        "database": args.database_url.split("@")[-1] if args.database_url else "sqlite",
        "replicas": args.replicas,
        "setup_s": round(setup_s, 1),
        "wall_s": round(wall_s, 1),
        "kueue_wall_s": KUEUE_WALL_S,
        "kueue_max_wall_s": KUEUE_MAX_WALL_S,
        "submission": {
            "timetable_s": max(p.due_s for p in plan),
            "done_s": round(submit_end, 1) if submit_end is not None else None,
            "rate_per_s": round(len(plan) / submit_end, 1) if submit_end else None,
            "lag_p50_s": round(pct(submitter.lag_s, 50), 2),
            "lag_max_s": round(max(submitter.lag_s), 2),
            "post_p50_ms": round(pct(submitter.post_s, 50) * 1000, 1),
            "post_p99_ms": round(pct(submitter.post_s, 99) * 1000, 1),
            "errors": len(submitter.errors),
            "first_error": submitter.errors[0] if submitter.errors else "",
        },
        "gpu_usage_pct": compute_usage_pct(jobs, pool),
        "cpu_s": cpu,
        **summary,
        "progress": progress,
    }
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        result["scratch"] = str(root)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    s = result["submission"]
    print(
        f"Kueue baseline x{args.scale:g}: {len(plan)} jobs, 30 tenants in 5 cohorts, {result['cluster']}, "
        f"{args.replicas} server replica(s) on {result['database']}"
    )
    print(
        f"wall {result['wall_s']} s (Kueue {KUEUE_WALL_S:.0f} s at full scale, limit {KUEUE_MAX_WALL_S:.0f} s); "
        f"server span {result['server_span_s']} s; GPU usage {result['gpu_usage_pct']}%"
    )
    print(
        f"submission: timetable {s['timetable_s']} s, done at {s['done_s']} s ({s['rate_per_s']}/s), lag p50 "
        f"{s['lag_p50_s']} s max {s['lag_max_s']} s, POST p50 {s['post_p50_ms']} ms p99 {s['post_p99_ms']} ms, "
        f"{s['errors']} errors"
    )
    print(f"states {result['states']}; preemptions {result['preemptions']}; restarted {result['restarted_jobs']}")
    print(f"cpu s: {result['cpu_s']}")
    print(
        f"{'class':<8}{'jobs':>7}{'mean s':>9}{'p50 s':>8}{'p90 s':>8}{'max s':>8}{'from due':>10}"
        f"{'Kueue avg':>11}{'limit':>7}"
    )
    for name, w in result["classes"].items():
        print(
            f"{name:<8}{w['jobs']:>7}{w['mean_s']!s:>9}{w['p50_s']!s:>8}{w['p90_s']!s:>8}{w['max_s']!s:>8}"
            f"{w['mean_from_due_s']!s:>10}"
            f"{w['kueue_avg_s']:>11}{w['kueue_threshold_s']:>7}"
        )


if __name__ == "__main__":
    main()
