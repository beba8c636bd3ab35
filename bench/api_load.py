"""API latency under load: 1,000 simulated agents syncing and sending telemetry every 5 s, plus 32 API clients
listing and showing jobs, against a store of 100,000 finished and 10,000 pending jobs; p50 and p99 per endpoint,
on SQLite and on PostgreSQL.

Per database: a fresh store is migrated and filled with bulk INSERTs (the jobs table directly, seconds for
110,000 rows), then a real `corral server` (no local agent) is started on free ports. Every simulated agent joins
like a real one (join token, CSR, its own certificate) and registers 8 simulated H100s. Then, for --duration
seconds after a warm-up:

- agents: one load-generator process drives all of them from a pool of threads. Each agent ticks every 5 s, the
  ticks spread evenly over the interval: `POST /agents/{node}/sync` with wait_s=0 (no long poll), then
  `POST /agents/{node}/telemetry` (host + 8 GPU samples, as the agent's collector makes them), on the agent's
  mutual-TLS connection to the agent port, kept from tick to tick as a real agent keeps it (the agent port keeps
  idle connections AGENT_KEEP_ALIVE_S); a new connection's handshake is timed as `agent TLS connect`.
  `--fresh-connections`: a new connection every tick (what agents did while the port closed idle connections after
  5 s). An agent whose thread falls behind ticks late (the achieved tick rate is printed next to the target);
- clients: another process, 32 threads, each on its own keep-alive HTTP connection to the API port with the
  admin token, looping back to back (no think time unless --think-s) over `GET /api/v1/jobs` (the default
  page: pending and running jobs, up to 1000), `GET /api/v1/jobs/{id}` (a random job) and `GET /api/v1/nodes`.

Before the load, each client endpoint is called --idle-requests times alone (rows marked `(idle)`: the service
time without queueing). The server's CORRAL_NODE_LOST_AFTER_S is 300 s, so that the agents that joined first
are not LOST by the time the last one has joined.

The nodes run nothing, and the pending jobs ask for a GPU model the fleet does not have, so all 10,000 stay
pending (the scheduler still considers them every pass) and sync replies carry no assignments.
Everything (server, PostgreSQL, load generators) shares this machine's cores: the figures include that
contention. The server's CPU use over the window is printed (100% = one core).

    .venv/bin/python bench/api_load.py [--db sqlite|postgres|both] [--agents 1000] [--clients 32]
        [--finished 100000] [--pending 10000] [--duration 60] [--think-s 0] [--fresh-connections] [--workers 1]
        [--json]

PostgreSQL: a throwaway database is created through --postgres-admin-url (default $CORRAL_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/postgres) and dropped afterwards.
"""

from __future__ import annotations

import argparse
import heapq
import http.client
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port, pct, temp_pg_database
from sqlalchemy import insert, text

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.agent.identity import new_key_and_csr
from corral.agent.metrics import collect_host_sample
from corral.core.telemetry import TelemetryBatch, batch_to_dict
from corral.sdk.client import AgentClient
from corral.sdk.join import join_cluster, trust_ssl_context
from corral.store.sql import open_store
from corral.store.tables import JobRow

CORRAL = str(Path(sys.executable).with_name("corral"))
INTERVAL_S = 5.0
WARMUP_S = 8.0
GPUS = 8
NODE_LOST_AFTER_S = 300  # the first agents to join wait out the 1-2 minute join phase without being LOST
ABSENT_MODEL = "B200-192GB"  # no simulated node has it: pending jobs stay pending
SYNC_BODY = json.dumps({"running": [], "exits": [], "web_ports": [], "wait_s": 0}).encode()
CLIENT_ENDPOINTS = ("GET /api/v1/jobs", "GET /api/v1/jobs/{id}", "GET /api/v1/nodes")
AGENT_ENDPOINTS = ("agent TLS connect", "POST /agents/{node}/sync", "POST /agents/{node}/telemetry")
Samples = dict[str, list[float]]
PG_ADMIN_URL = os.environ.get("CORRAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


# ---- the store ----------------------------------------------------------------------------------------------


@contextmanager
def database(kind: str, root: Path, admin_url: str) -> Iterator[str]:
    """The URL of an empty database: a SQLite file under `root`, or a throwaway PostgreSQL database."""
    if kind == "sqlite":
        yield f"sqlite:///{root / 'data' / 'corral.db'}"
        return
    with temp_pg_database(admin_url) as url:
        yield url


def fill(url: str, finished: int, pending: int, agents: int) -> int:
    """Migrate, then bulk-insert `finished` finished jobs (spread over the nodes' names, oldest first) and
    `pending` pending ones. Returns the number of jobs."""
    store = open_store(url)
    try:
        tenant = store.find_tenant("default")
        tenant_id = tenant.id if tenant else None
        now = datetime.now(UTC)
        total = finished + pending
        table: Any = JobRow.__table__
        rows: list[dict[str, Any]] = []

        def flush() -> None:
            with store.engine.begin() as conn:
                conn.execute(insert(table), rows)
            rows.clear()

        for k in range(total):
            if k == finished and rows:  # one INSERT's rows share their columns: the finished ones go first
                flush()
            created = now - timedelta(seconds=(total - k) * 10)
            row: dict[str, Any] = {
                "name": f"job-{k}",
                "command": ["python", "train.py", f"--seed={k}"],
                "env": {},
                "gpus": 1,
                "gpu_milli": 1000,
                "priority": k % 11 - 5,
                "tenant_id": tenant_id,
                "queue": "default",
                "time_limit_s": 3600,
                "created_at": created,
            }
            if k < finished:
                node, gpu = f"sim-{k % max(agents, 1):04d}", k % GPUS
                ok = k % 7 != 0
                row |= {
                    "gpu_models": [],
                    "state": "SUCCEEDED" if ok else "FAILED",
                    "exit_code": 0 if ok else 1,
                    "node": node,
                    "gpu_indices": [gpu],
                    "parts": [[node, [gpu]]],
                    "node_list": f",{node},",
                    "started_at": created + timedelta(seconds=2),
                    "finished_at": created + timedelta(seconds=8),
                    "attempt": 1,
                    "delivered": True,
                }
            else:
                row |= {"gpu_models": [ABSENT_MODEL], "state": "PENDING", "gpu_indices": [], "parts": []}
            rows.append(row)
            if len(rows) == 5000:
                flush()
        if rows:
            flush()
        if not store.is_sqlite:
            with store.engine.connect() as conn:
                conn.execute(text("ANALYZE"))
                conn.commit()
        return total
    finally:
        store.close()


# ---- the server and the agents' identities --------------------------------------------------------------------


def start_server(root: Path, url: str, workers: int = 1) -> tuple[subprocess.Popen[bytes], str, str, str]:
    """A `corral server` on free ports (`workers`: its CORRAL_WORKERS): (process, API URL, agent URL, admin token)."""
    port, agent_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_PORT=str(port),
        CORRAL_AGENT_PORT=str(agent_port),
        CORRAL_JOB_UI_PORT="0",
        CORRAL_GATEWAY_PORT="0",
        CORRAL_DATA_DIR=str(root / "data"),
        CORRAL_DATABASE_URL=url,
        CORRAL_NODE_LOST_AFTER_S=str(NODE_LOST_AFTER_S),
        CORRAL_WORKERS=str(workers),
        HOME=str(root),
        XDG_CONFIG_HOME=str(root / ".config"),
    )
    log = (root / "server.log").open("wb")
    server = subprocess.Popen([CORRAL, "server"], env=env, stdout=log, stderr=log, start_new_session=True)
    api = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not (root / "data" / "admin-token").exists() or not _up(api) or not _listening(agent_port):
        if time.monotonic() > deadline or server.poll() is not None:
            sys.exit(f"server did not start (exit {server.poll()}, log {root / 'server.log'})")
        time.sleep(0.1)
    token = (root / "data" / "admin-token").read_text().strip()
    return server, api, f"https://127.0.0.1:{agent_port}", token


def _listening(port: int) -> bool:
    """Something accepts connections on the port (with CORRAL_WORKERS, the agents' port opens after the API's)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def join_agents(api: str, agent_url: str, token: str, certs: Path, count: int) -> tuple[list[str], str]:
    """Join and register `count` nodes with 8 simulated GPUs each; (names, CA PEM). Key, certificate and a
    telemetry template of each node are written under `certs`."""
    admin = {"Authorization": f"Bearer {token}"}
    join_token = httpx.post(
        f"{api}/api/v1/join-tokens", json={"ttl_s": 3600, "uses": count}, headers=admin, timeout=60
    ).json()["token"]
    certs.mkdir(parents=True, exist_ok=True)
    host = collect_host_sample(time.time())
    ca_pem: list[str] = []

    def one(i: int) -> str:
        name = f"sim-{i:04d}"
        key_pem, csr = new_key_and_csr(name)
        reply = join_cluster(agent_url, join_token, name, csr)
        (certs / f"{name}.key").write_bytes(key_pem)
        (certs / f"{name}.crt").write_text(reply.cert)
        if not ca_pem:
            ca_pem.append(reply.ca)
        ctx = trust_ssl_context(reply.ca)
        ctx.load_cert_chain(certs / f"{name}.crt", certs / f"{name}.key")
        backend = SimulatedGpuBackend(f"sim:{GPUS}xH100-80GB", name)
        backend.set_load({g: 0.5 for g in range(GPUS // 2)})
        gpus = [
            {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib} for g in backend.discover()
        ]
        with httpx.Client(base_url=agent_url, verify=ctx, timeout=60) as c:
            c.post(
                "/api/v1/agents/register", json={"name": name, "backend": "simulated", "gpus": gpus}
            ).raise_for_status()
        now = time.time()
        readout = backend.sample(now)
        batch = TelemetryBatch(
            node=name, ts=now, host=host, gpus=readout.samples, events=readout.events, gpu_count=len(readout.samples)
        )
        (certs / f"{name}.json").write_text(json.dumps(batch_to_dict(batch)))
        return name

    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(one, range(count)))
    return names, ca_pem[0]


# ---- load generators (each in its own process) ----------------------------------------------------------------


def _record(out: Samples, key: str, t0: float, window: tuple[float, float], started: float) -> None:
    if window[0] <= started < window[1]:
        out.setdefault(key, []).append((time.perf_counter() - t0) * 1000)


def await_window(ready: Any, go: Any, box: Any) -> tuple[float, float]:
    """Say this load process is ready, then wait for the window both share (see `run_db`)."""
    ready.put(os.getpid())
    go.wait()
    return float(box[0]), float(box[1])


def run_agents(
    agent_url: str,
    ca_pem: str,
    certs: str,
    names: list[str],
    threads: int,
    fresh: bool,
    ready: Any,
    go: Any,
    box: Any,
    results: Any,
) -> None:
    """Every agent ticks every INTERVAL_S from (wall-clock) window[0] - WARMUP_S until window[1]; the window is
    set once both load processes are ready (1,000 TLS contexts take longer to load than any fixed lead time)."""
    host, port = agent_url.removeprefix("https://").split(":")
    contexts = {}
    templates = {}
    for n in names:
        ctx = trust_ssl_context(ca_pem)
        ctx.load_cert_chain(f"{certs}/{n}.crt", f"{certs}/{n}.key")
        contexts[n] = ctx
        templates[n] = json.loads(Path(f"{certs}/{n}.json").read_text())
    window = await_window(ready, go, box)
    begin = window[0] - WARMUP_S
    merged: Samples = {}
    errors: dict[str, int] = {}
    counts = {"ticks": 0, "late_ms_sum": 0}
    lock = threading.Lock()

    def worker(k: int) -> None:
        out: Samples = {}
        errs: dict[str, int] = {}
        conns: dict[str, tuple[http.client.HTTPSConnection, float]] = {}  # agent -> (its connection, last used)
        ticks, late = 0, 0.0
        due = [(begin + i * INTERVAL_S / len(names), n) for i, n in enumerate(names) if i % threads == k]
        heapq.heapify(due)
        while due:
            at, name = heapq.heappop(due)
            if at >= window[1] or time.time() >= window[1]:
                break
            pause = at - time.time()
            if pause > 0:
                time.sleep(pause)
            started = time.time()
            in_window = window[0] <= started < window[1]
            if in_window:
                ticks += 1
                late += max(0.0, started - at)
            heapq.heappush(due, (at + INTERVAL_S, name))
            batch = templates[name]
            batch["ts"] = batch["host"]["ts"] = started
            for g in batch["gpus"]:
                g["ts"] = started
            body = json.dumps(batch).encode()
            kept = conns.pop(name, None)
            conn = None
            if kept is not None and time.monotonic() - kept[1] < AgentClient.keepalive_s:
                conn = kept[0]
            elif kept is not None:  # idle longer than a real agent keeps a connection: it drops it, so does this
                kept[0].close()
            try:
                for key, path, data in (
                    (AGENT_ENDPOINTS[1], f"/api/v1/agents/{name}/sync", SYNC_BODY),
                    (AGENT_ENDPOINTS[2], f"/api/v1/agents/{name}/telemetry", body),
                ):
                    if conn is None:  # a new connection: its TLS handshake is timed
                        conn = http.client.HTTPSConnection(host, int(port), context=contexts[name], timeout=120)
                        t0 = time.perf_counter()
                        conn.connect()
                        _record(out, AGENT_ENDPOINTS[0], t0, window, started)
                    t0 = time.perf_counter()
                    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                    r = conn.getresponse()
                    r.read()
                    if r.status != 200:
                        errs[key] = errs.get(key, 0) + 1
                    else:
                        _record(out, key, t0, window, started)
                    if r.will_close:  # the server closes it: the next request opens a new one
                        conn.close()
                        conn = None
                if conn is not None and not fresh:  # kept for the agent's next tick, as a real agent keeps it
                    conns[name], conn = (conn, time.monotonic()), None
            except (OSError, http.client.HTTPException):
                errs["agent connection"] = errs.get("agent connection", 0) + 1
            finally:
                if conn is not None:
                    conn.close()
        for c, _ in conns.values():
            c.close()
        with lock:
            for key, v in out.items():
                merged.setdefault(key, []).extend(v)
            for key, c in errs.items():
                errors[key] = errors.get(key, 0) + c
            counts["ticks"] += ticks
            counts["late_ms_sum"] += int(late * 1000)

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    results.put({"samples": merged, "errors": errors, **counts})


def run_clients(
    api: str, token: str, jobs: int, clients: int, think_s: float, ready: Any, go: Any, box: Any, results: Any
) -> None:
    """`clients` threads, back to back over CLIENT_ENDPOINTS (each starts at another one) until window[1]."""
    host, port = api.removeprefix("http://").split(":")
    window = await_window(ready, go, box)
    merged: Samples = {}
    errors: dict[str, int] = {}
    lock = threading.Lock()
    begin = window[0] - WARMUP_S

    def worker(k: int) -> None:
        rng = random.Random(k)
        out: Samples = {}
        errs: dict[str, int] = {}
        headers = {"Authorization": f"Bearer {token}"}
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        i = k
        time.sleep(max(0.0, begin - time.time()) + rng.random())
        while (started := time.time()) < window[1]:
            key = CLIENT_ENDPOINTS[i % len(CLIENT_ENDPOINTS)]
            i += 1
            path = {
                CLIENT_ENDPOINTS[0]: "/api/v1/jobs",
                CLIENT_ENDPOINTS[1]: f"/api/v1/jobs/{rng.randint(1, jobs)}",
                CLIENT_ENDPOINTS[2]: "/api/v1/nodes",
            }[key]
            t0 = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                errs[key] = errs.get(key, 0) + 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                continue
            if r.status != 200:
                errs[key] = errs.get(key, 0) + 1
            else:
                _record(out, key, t0, window, started)
            if think_s:
                time.sleep(think_s)
        conn.close()
        with lock:
            for key, v in out.items():
                merged.setdefault(key, []).extend(v)
            for key, c in errs.items():
                errors[key] = errors.get(key, 0) + c

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    results.put({"samples": merged, "errors": errors})


def idle_latencies(api: str, token: str, jobs: int, count: int) -> Samples:
    """Each client endpoint `count` times, one request at a time, before the load starts (agents registered,
    none ticking): the service time without queueing."""
    out: Samples = {}
    rng = random.Random(0)
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=120) as c:
        for _ in range(count):
            for key, path in zip(
                CLIENT_ENDPOINTS, ("/api/v1/jobs", f"/api/v1/jobs/{rng.randint(1, jobs)}", "/api/v1/nodes"), strict=True
            ):
                t0 = time.perf_counter()
                c.get(path).raise_for_status()
                out.setdefault(key, []).append((time.perf_counter() - t0) * 1000)
    return out


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds of the server process and of its workers (CORRAL_WORKERS: its children)."""
    children = [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    return cpu_seconds(pid) + sum(cpu_seconds(c) for c in children)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- one database ---------------------------------------------------------------------------------------------


def run_db(kind: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix=f"corral-api-load-{kind}-"))
    (root / "data").mkdir()
    with database(kind, root, args.postgres_admin_url) as url:
        t0 = time.monotonic()
        jobs = fill(url, args.finished, args.pending, args.agents)
        fill_s = time.monotonic() - t0
        server, api, agent_url, token = start_server(root, url, args.workers)
        try:
            t0 = time.monotonic()
            names, ca_pem = join_agents(api, agent_url, token, root / "certs", args.agents)
            join_s = time.monotonic() - t0
            log(args, f"{kind}: filled {jobs} jobs in {fill_s:.1f} s, joined {len(names)} agents in {join_s:.1f} s")
            idle = idle_latencies(api, token, jobs, args.idle_requests)
            ctx = multiprocessing.get_context("spawn")
            results: Any = ctx.Queue()
            # the window starts once both load processes are ready (the agents' one loads every certificate first)
            ready, go, box = ctx.Queue(), ctx.Event(), ctx.Array("d", 2)
            threads = max(1, min(args.agents, args.agent_threads))
            procs = [
                ctx.Process(
                    target=run_agents,
                    args=(
                        agent_url,
                        ca_pem,
                        str(root / "certs"),
                        names,
                        threads,
                        args.fresh_connections,
                        ready,
                        go,
                        box,
                        results,
                    ),
                ),
                ctx.Process(
                    target=run_clients, args=(api, token, jobs, args.clients, args.think_s, ready, go, box, results)
                ),
            ]
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=1800)
            start = time.time() + WARMUP_S
            window = (start, start + args.duration)
            box[0], box[1] = window
            go.set()
            log(args, f"{kind}: load processes ready; measuring for {args.duration:g} s after a {WARMUP_S:g} s warm-up")
            time.sleep(max(0.0, window[0] - time.time()))
            cpu0 = server_cpu_seconds(server.pid)
            time.sleep(max(0.0, window[1] - time.time()))
            server_cpu = (server_cpu_seconds(server.pid) - cpu0) / args.duration * 100
            parts = [results.get(timeout=args.duration + 600) for _ in procs]
            for p in procs:
                p.join()
            pending = int(
                httpx.get(
                    f"{api}/api/v1/jobs?state=PENDING&limit=1", headers={"Authorization": f"Bearer {token}"}, timeout=60
                ).headers["X-Total-Count"]
            )
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
    samples: Samples = {f"{key} (idle)": v for key, v in idle.items()}
    errors: dict[str, int] = {}
    ticks = late_ms = 0
    for part in parts:
        samples |= part["samples"]
        for key, c in part["errors"].items():
            errors[key] = errors.get(key, 0) + c
        ticks += part.get("ticks", 0)
        late_ms += part.get("late_ms_sum", 0)
    rows = [
        {
            "db": kind,
            "endpoint": key,
            "requests": len(samples.get(key, [])),
            "rps": round(len(samples.get(key, [])) / args.duration, 1) if "(idle)" not in key else None,
            "p50_ms": round(pct(samples[key], 50), 1) if samples.get(key) else None,
            "p99_ms": round(pct(samples[key], 99), 1) if samples.get(key) else None,
        }
        for key in (*CLIENT_ENDPOINTS, *AGENT_ENDPOINTS, *(f"{k} (idle)" for k in CLIENT_ENDPOINTS))
        if key in samples or "(idle)" not in key
    ]
    summary = {
        "db": kind,
        "server_cpu_percent": round(server_cpu),
        "workers": args.workers,
        "agent_ticks_per_s": round(ticks / args.duration, 1),
        "agent_ticks_target_per_s": round(args.agents / INTERVAL_S, 1),
        "agent_mean_late_ms": round(late_ms / max(ticks, 1)),
        "errors": errors,
        "pending_after": pending,
        "fill_s": round(fill_s, 1),
        "join_s": round(join_s, 1),
    }
    return rows, summary


def log(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--finished", type=int, default=100_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds measured (after a warm-up)")
    ap.add_argument("--agent-threads", type=int, default=100, help="threads driving the agents")
    ap.add_argument(
        "--fresh-connections",
        action="store_true",
        help="each agent tick on a new TLS connection (as agents did while the agent port closed idle connections "
        "after 5 s)",
    )
    ap.add_argument(
        "--workers", type=int, default=1, help="the server's CORRAL_WORKERS (processes sharing its ports; PostgreSQL)"
    )
    ap.add_argument("--idle-requests", type=int, default=20, help="each client endpoint alone first (0: none)")
    ap.add_argument("--think-s", type=float, default=0.0, help="pause of each client between its requests")
    ap.add_argument(
        "--postgres-admin-url",
        default=PG_ADMIN_URL,
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kinds = ("sqlite", "postgres") if args.db == "both" else (args.db,)
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        db_rows, summary = run_db(kind, args)
        rows += db_rows
        processes = args.workers + 1 if args.workers > 1 else 1  # CORRAL_WORKERS: and the loops' process
        log(
            args,
            f"{kind}: server CPU {summary['server_cpu_percent']}% of a core ({processes} process(es)); agent ticks "
            f"{summary['agent_ticks_per_s']}/s (target {summary['agent_ticks_target_per_s']}/s, mean "
            f"{summary['agent_mean_late_ms']} ms late); errors {summary['errors'] or 'none'}; "
            f"{summary['pending_after']} jobs pending after",
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"\n{args.agents} agents every {INTERVAL_S:g} s, {args.clients} clients, {args.finished} finished + "
        f"{args.pending} pending jobs, {args.duration:g} s measured; clients' think time {args.think_s:g} s; agents "
        + ("on a new connection each tick" if args.fresh_connections else "keep their connections")
    )
    print(f"{'db':<9} {'endpoint':<39} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for r in rows:
        rps = "-" if r["rps"] is None else r["rps"]
        p50 = "-" if r["p50_ms"] is None else r["p50_ms"]
        p99 = "-" if r["p99_ms"] is None else r["p99_ms"]
        print(f"{r['db']:<9} {r['endpoint']:<39} {r['requests']:>9} {rps:>8} {p50:>8} {p99:>8}")


if __name__ == "__main__":
    main()
