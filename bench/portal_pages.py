"""Server-side time of every portal page at scale: 100 nodes, 800 GPUs, 10,000 jobs, an hour of telemetry.

Seeds a fresh SQLite store through the store API, then replays, page by page, the requests the portal's
JavaScript makes when the page opens (the HTML shell, the session and capability checks, every API call),
in-process through FastAPI's TestClient (no network; the scheduler and alert loops are not started, so
nothing else competes for the CPU). Prints per page the median and p95 of the summed server time of its
requests, and the slowest request of each page. The target is < 300 ms per page.

    .venv/bin/python bench/portal_pages.py [--repeat 15] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store
from corral.store.telemetry import HOST_GPU, Point

NODES, GPUS_PER_NODE = 100, 8
HOST_METRICS = ("host_cpu_percent", "host_memory_used_percent", "host_disk_used_percent", "host_load_1m")
GPU_METRICS = ("gpu_utilization_percent", "gpu_memory_used_mib", "gpu_power_w", "gpu_temperature_c")


def seed_nodes(store: SqlStore, now: datetime) -> list[str]:
    names = []
    for n in range(NODES):
        model = "H100-80GB" if n % 2 == 0 else "A100-80GB"
        gpus = [
            GpuInfo(
                index=i,
                uuid=f"GPU-{n:03d}-{i}",
                model=model,
                memory_mib=81920,
                pci_bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0",
                numa_node=i // 4,
                nvlink_peers=tuple(j for j in range(GPUS_PER_NODE) if j != i),
            )
            for i in range(GPUS_PER_NODE)
        ]
        name = f"gpu-{n:03d}"
        store.upsert_node(name, name, "simulated", 64_000, 1_024_000, {"pool": f"pool-{n % 4}"}, gpus, now)
        names.append(name)
    return names


def seed_schedules(store: SqlStore, tenants: list[int], now: datetime, count: int = 50) -> list[int]:
    """Repeating jobs across the tenants (a tenth of the jobs below were started by them)."""
    exprs = ["0 2 * * *", "*/15 * * * *", "@hourly", "@every 30m", "0 9 * * MON-FRI"]
    return [
        store.create_schedule(
            tenants[i % len(tenants)],
            None,
            f"sched-{i}",
            exprs[i % len(exprs)],
            "UTC",
            "forbid",
            False,
            {"command": ["python", "eval.py"], "gpus": 1},
            now + timedelta(minutes=15),
            now,
        ).id
        for i in range(count)
    ]


def seed_jobs(
    store: SqlStore,
    nodes: list[str],
    jobs: int,
    tenants: list[int],
    rng: random.Random,
    now: datetime,
    schedules: list[int] | None = None,
) -> tuple[int, int]:
    """Most jobs finished, 600 running (one GPU each), the rest pending. Returns (a running id, a finished id)."""
    running_target, pending_target = 600, 600
    free = [(n, i) for n in nodes for i in range(GPUS_PER_NODE)]
    rng.shuffle(free)
    running_id = finished_id = 0
    for k in range(jobs):
        created = now - timedelta(seconds=(jobs - k) * 30)
        spec = JobSpec(
            command=("python", "train.py", f"--seed={k}"),
            name=f"job-{k}",
            gpus=1 + (k % 3 == 0),
            priority=rng.randint(-5, 5),
            tenant_id=tenants[k % len(tenants)],
            time_limit_s=3600,
            schedule_id=schedules[k % len(schedules)] if schedules and k % 10 == 0 else None,
        )
        job = store.create_job(spec, created)
        finished = k < jobs - running_target - pending_target
        running = not finished and k < jobs - pending_target
        if finished or running:
            node, gpu = free.pop() if running else (nodes[k % len(nodes)], k % GPUS_PER_NODE)
            if not store.assign_job(job.id, node, [gpu], created + timedelta(seconds=5)):  # re-checked: GPU free
                raise SystemExit(f"seeding: job {job.id} could not take GPU {gpu} of {node}")
            if running:
                running_id = running_id or job.id
            else:
                state = JobState.SUCCEEDED if k % 7 else JobState.FAILED
                store.finish_job(
                    job.id, state, 0 if state is JobState.SUCCEEDED else 1, "", created + timedelta(seconds=20)
                )
                finished_id = job.id
    return running_id, finished_id


def seed_telemetry(store: SqlStore, nodes: list[str], now_s: float, job_id: int) -> int:
    """An hour: every GPU's utilisation every 30 s (the fleet chart), and one node in full every 10 s."""
    points: list[Point] = []
    for t in range(int(now_s) - 3600, int(now_s), 30):
        for n in nodes:
            points += [
                Point(float(t), n, g, "gpu_utilization_percent", float((t + g) % 100)) for g in range(GPUS_PER_NODE)
            ]
    detail = nodes[0]
    for t in range(int(now_s) - 3600, int(now_s), 10):
        points += [Point(float(t), detail, HOST_GPU, m, 42.0) for m in HOST_METRICS]
        points += [
            Point(float(t), detail, g, m, 50.0, job_id if g == 0 else None)
            for g in range(GPUS_PER_NODE)
            for m in GPU_METRICS[1:]
        ]
    for i in range(0, len(points), 20_000):
        store.insert_points(points[i : i + 20_000])
    return len(points)


def page_requests(node: str, running: int, finished: int, paths: set[str]) -> dict[str, list[str]]:
    """The requests each page makes when it opens (see src/corral/server/web/static/pages/*.js)."""
    now = datetime.now(UTC)
    rng = f"start={(now - timedelta(hours=1)).isoformat()}&end={now.isoformat()}&step_s=24".replace("+", "%2B")
    boot = ["/web/session", "/openapi.json", "/static/app.js"]
    series = lambda m, sel: f"/api/v1/metrics/series?metric={m}&{sel}&{rng}".replace("&&", "&")  # noqa: E731
    # The reports page opens on the last 30 days, whole UTC days (pages/reports.js).
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    report = f"start={(day - timedelta(days=30)).isoformat()}&end={(day + timedelta(days=1)).isoformat()}".replace(
        "+", "%2B"
    )
    pages = {
        "fleet": [
            "/",
            *boot,
            "/api/v1/nodes",
            "/api/v1/jobs?state=PENDING&limit=200",
            "/api/v1/jobs?state=RUNNING&limit=1",
            "/api/v1/alerts?state=firing",
            "/api/v1/pools",
            series("gpu_util_pct", "agg=avg"),
            f"/api/v1/metrics/allocated?{rng}",
        ],
        "nodes": ["/nodes", *boot, "/api/v1/nodes"],
        "node": [
            f"/nodes/{node}",
            *boot,
            f"/api/v1/nodes/{node}",
            f"/api/v1/gpus?node={node}",
            f"/api/v1/jobs?node={node}",
            f"/api/v1/metrics/latest?node={node}",
            f"/api/v1/nodes/{node}/events",
            *(
                series(m, f"node={node}")
                for m in ("cpu_pct", "mem_used_pct", "disk_used_pct", "net_rx_bps", "net_tx_bps")
            ),
        ],
        "gpu": [
            f"/gpus/{node}/0",
            *boot,
            f"/api/v1/gpus?node={node}",
            f"/api/v1/gpus/{node}/0/events",
            *(
                series(m, f"node={node}&gpu=0")
                for m in ("gpu_util_pct", "gpu_mem_used_mib", "gpu_power_w", "gpu_temp_c")
            ),
        ],
        "jobs (queue)": [
            "/jobs",
            *boot,
            "/api/v1/jobs?state=PENDING&limit=200",
            "/api/v1/jobs?state=RUNNING&limit=200",
        ],
        "jobs (history)": ["/jobs", *boot, "/api/v1/jobs?all=true&limit=50&newest_first=true"],
        "job (running)": [
            f"/jobs/{running}",
            *boot,
            f"/api/v1/jobs/{running}",
            f"/api/v1/jobs/{running}/events",
            f"/api/v1/jobs/{running}/logs?offset=0",
            series("gpu_util_pct", f"job={running}"),
        ],
        "job (finished)": [
            f"/jobs/{finished}",
            *boot,
            f"/api/v1/jobs/{finished}",
            f"/api/v1/jobs/{finished}/events",
            f"/api/v1/jobs/{finished}/logs?offset=0",
        ],
        "submit": ["/submit", *boot, "/api/v1/queues"],
        "alerts": [
            "/alerts",
            *boot,
            "/api/v1/alerts?state=firing",
            "/api/v1/alerts?state=pending",
            "/api/v1/alerts?history=true&limit=100",
            "/api/v1/alert-rules",
            "/api/v1/silences",
        ],
        "admin": [
            "/admin",
            *boot,
            "/api/v1/tenants",
            "/api/v1/users",
            "/api/v1/quotas",
            "/api/v1/tokens",
            "/api/v1/audit?limit=100",
        ],
        "schedules": ["/schedules", *boot, "/api/v1/schedules"],
        "reports": ["/reports", *boot, f"/api/v1/reports/usage?group_by=tenant&{report}&format=json"],
    }

    # Calls to endpoints this server does not have are left out (the page shows "not available").
    def present(url: str) -> bool:
        path = url.split("?")[0]
        if not path.startswith("/api/"):
            return True
        return any(_matches(template, path) for template in paths)

    return {page: [u for u in urls if present(u)] for page, urls in pages.items()}


def _matches(template: str, path: str) -> bool:
    a, b = template.strip("/").split("/"), path.strip("/").split("/")
    return len(a) == len(b) and all(x == y or x.startswith("{") for x, y in zip(a, b, strict=True))


def explain_reports(store: SqlStore) -> None:
    """Where the usage report's time goes: the store calls its router makes, timed one by one."""
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    t0 = time.perf_counter()
    runs = store.list_runs_between(end - timedelta(days=31), end)
    t1 = time.perf_counter()
    print(
        f"\n/api/v1/reports/usage over 31 days: list_runs_between {(t1 - t0) * 1000:.0f} ms ({len(runs)} runs, "
        "columns only, GPU summaries included)"
    )


def measure(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    r = call()
    elapsed = (time.perf_counter() - t0) * 1000
    if r.status_code >= 400:
        raise SystemExit(f"{r.request.url}: {r.status_code} {r.text[:200]}")
    return elapsed


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(round(0.95 * len(values))) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=10_000)
    args = ap.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'corral.db'}"
        store = open_store(url)
        creds = ensure_credentials(store, Path(tmp))
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        tenants = [store.find_tenant("default").id] + [store.create_tenant(f"team-{i}", now).id for i in range(4)]  # type: ignore[union-attr]
        nodes = seed_nodes(store, now)
        schedules = seed_schedules(store, tenants, now) if hasattr(store, "create_schedule") else []
        running, finished = seed_jobs(store, nodes, args.jobs, tenants, rng, now, schedules)
        npoints = seed_telemetry(store, nodes, time.time(), running)
        print(
            f"seeded {len(nodes)} nodes, {len(nodes) * GPUS_PER_NODE} GPUs, {args.jobs} jobs, {len(schedules)} schedules, {npoints} telemetry "
            f"points in {time.perf_counter() - t0:.0f} s (SQLite)"
        )
        app = create_app(Settings(data_dir=Path(tmp), database_url=url), store)
        client = TestClient(app)  # no `with`: the scheduler and alert loops stay off
        client.headers["Authorization"] = f"Bearer {creds.admin_token}"
        paths = set(client.get("/openapi.json").json()["paths"])
        pages = page_requests(nodes[0], running, finished, paths)
        per_call: dict[str, list[float]] = {}
        per_page: dict[str, list[float]] = {p: [] for p in pages}
        no_series: dict[str, list[float]] = {p: [] for p in pages}
        for _ in range(args.repeat + 1):  # the first round warms caches and is dropped
            for page, urls in pages.items():
                times = [measure(lambda u=u: client.get(u)) for u in urls]  # type: ignore[misc]
                for u, t in zip(urls, times, strict=True):
                    per_call.setdefault(u, []).append(t)
                per_page[page].append(sum(times))
                no_series[page].append(sum(t for u, t in zip(urls, times, strict=True) if "/metrics/series" not in u))
        for key in per_call:
            per_call[key] = per_call[key][1:]
        print(
            "\nms per page: all its requests, and without the graphs' /metrics/series calls (which the pages load"
            "\nseparately after the rest, every 10-30 s)"
        )
        print(
            f"{'page':<16} {'requests':>8} {'median':>8} {'p95':>8} {'no-graphs':>10} {'p95':>8}   slowest request (median ms)"
        )
        for page, urls in pages.items():
            totals, rest = per_page[page][1:], no_series[page][1:]
            slow = max(urls, key=lambda u: statistics.median(per_call[u]))
            short = slow if len(slow) < 60 else slow[:57] + "..."
            print(
                f"{page:<16} {len(urls):>8} {statistics.median(totals):>8.1f} {p95(totals):>8.1f} "
                f"{statistics.median(rest):>10.1f} {p95(rest):>8.1f}   {short} ({statistics.median(per_call[slow]):.1f})"
            )
        print("\nper request (median / p95 ms):")
        for u, ts in sorted(per_call.items(), key=lambda kv: -statistics.median(kv[1])):
            short = u if len(u) < 90 else u[:87] + "..."
            print(f"  {statistics.median(ts):7.1f} {p95(ts):7.1f}  {short}")
        if "/api/v1/reports/usage" in paths:
            explain_reports(store)
        missing = [
            p
            for p in ("/api/v1/reports/usage", "/api/v1/metrics/series", "/api/v1/alerts", "/api/v1/audit")
            if p not in paths
        ]
        if missing:
            print("\nnot on this server (not measured):", ", ".join(missing))
        store.close()


if __name__ == "__main__":
    main()
