"""A service autoscaled on request rate (issue 18): a load ramp 0 -> 200 requests/s -> 0 through the gateway
against a toy service that takes 50 ms per request and serves 4 at a time per replica (80 requests/s at most per
replica), on `corral up` with simulated GPUs (one GPU per replica), loopback only.

Prints the replicas over time (desired and ready, a line every 5 s; a PNG with --plot), the time to scale up
(from the moment the offered rate passes what the replicas serve to the first scale-up decision, and to the
replicas the peak needs being ready), p50/p99 latency through the gateway against direct calls to a replica at
the same light rate (the gateway's added p50), and failed requests (must be 0).

    .venv/bin/python bench/service_autoscale.py [--peak 200] [--target 40] [--ramp-s 60] [--hold-s 60] [--json]
        [--plot replicas.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port, make_bench_root, pct, start_corral_up, stop_corral

ROOT = Path(__file__).resolve().parents[1]
CORRAL = str(Path(sys.executable).with_name("corral"))
TOY = ROOT / "tests" / "e2e" / "toy_service.py"  # the same toy the e2e tests use (standard library only)
JOB_PYTHON = "/usr/bin/python3"


class Watch(threading.Thread):
    """Samples the service's desired and ready replicas every 0.5 s."""

    def __init__(self, api: httpx.Client, name: str) -> None:
        super().__init__(daemon=True)
        self.api, self.name = api, name
        self.points: list[tuple[float, int, int]] = []  # (monotonic, desired, ready)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                s = self.api.get(f"/api/v1/services/{self.name}").json()
                self.points.append((time.monotonic(), int(s["desired"]), int(s["ready"])))
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.5)


async def offered_load(
    url: str, headers: dict[str, str], rate_at: Any, duration_s: float, lat: list[tuple[float, float]], fails: list[str]
) -> int:
    """Open-loop load: request i goes out at its time whatever the answers do (bounded by the schedule)."""
    sent = 0
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        tasks: set[asyncio.Task[None]] = set()
        start = time.monotonic()

        async def one() -> None:
            t0 = time.monotonic()
            try:
                r = await http.get(url)
                if r.status_code == 200:
                    lat.append((t0, (time.monotonic() - t0) * 1000))
                else:
                    fails.append(f"{r.status_code} {r.text[:120]}")
            except httpx.HTTPError as e:
                fails.append(repr(e))

        t = 0.0
        next_note = 5.0
        while t < duration_s:
            if t >= next_note:
                next_note += 5.0
                print(f"  [{t:5.0f} s] offered {rate_at(t):5.0f}/s, sent {sent}, answered {len(lat)}, failed "
                      f"{len(fails)}, in flight {len(tasks)}", file=sys.stderr, flush=True)  # fmt: skip
            rate = rate_at(t)
            wait = 1.0 / rate if rate > 0 else 0.1
            if rate > 0:
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            t += wait
            delay = start + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if tasks:
            await asyncio.gather(*tasks)
    return sent


def sequential(url: str, headers: dict[str, str], n: int) -> list[float]:
    out: list[float] = []
    with httpx.Client(headers=headers, timeout=30) as http:
        for _ in range(n):
            t0 = time.perf_counter()
            r = http.get(url)
            out.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200, r.text
    return out


def stop_jobs(root: Path) -> None:
    """Replicas run in sessions of their own (jobs outlive their agent by design): end those of this run."""
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(root) in arg for arg in p.info["cmdline"] or ()):
                p.kill()
        except psutil.Error:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peak", type=float, default=200.0, help="peak offered requests/s")
    ap.add_argument("--target", type=float, default=40.0, help="target requests/s per replica")
    ap.add_argument("--ramp-s", type=float, default=60.0)
    ap.add_argument("--hold-s", type=float, default=60.0)
    ap.add_argument("--down-s", type=float, default=30.0)
    ap.add_argument("--idle-s", type=float, default=45.0, help="watch this long after the load for the scale-down")
    ap.add_argument("--scale-down-delay", type=float, default=30.0)
    ap.add_argument("--plot", default="", help="write the replicas over time to this PNG (needs corral[plot])")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    root = make_bench_root()
    toy = root / "toy_service.py"
    shutil.copy(TOY, toy)
    toy.chmod(0o644)
    gateway_port = free_port()
    proc, url, token = start_corral_up(
        [CORRAL],
        root,
        {"CORRAL_GPUS": "sim:8xH100-80GB", "CORRAL_GATEWAY_PORT": str(gateway_port), "CORRAL_JOBS_DIR": str(root)},
        log=root / "up.log",
    )
    headers = {"Authorization": f"Bearer {token}"}
    api = httpx.Client(base_url=url, headers=headers, timeout=10)
    gw = f"http://127.0.0.1:{gateway_port}/services/toy"
    watch = Watch(api, "toy")
    result: dict[str, Any] = {}
    try:
        body = {
            "name": "toy",
            "command": [JOB_PYTHON, str(toy)],
            "env": {"TOY_CONCURRENCY": "4"},
            "port": 8000,
            "gpus": 1,
            "health_path": "/healthz",
            "min_replicas": 1,
            "max_replicas": 8,
            "target_rps": args.target,
            "scale_down_delay_s": args.scale_down_delay,
            "queue_limit": 2000,
        }
        r = api.post("/api/v1/services", json=body)
        if r.status_code != 201:
            sys.exit(f"create failed: {r.status_code} {r.text}")
        deadline = time.monotonic() + 90
        while api.get("/api/v1/services/toy").json()["ready"] < 1:
            if time.monotonic() > deadline:
                sys.exit(f"no replica became ready in 90 s; see {root}/up.log")
            time.sleep(0.2)

        # the ramp
        watch.start()
        peak, ramp, hold, down = float(args.peak), float(args.ramp_s), float(args.hold_s), float(args.down_s)

        def rate_at(t: float) -> float:
            if t < ramp:
                return max(peak * t / ramp, 1.0)
            if t < ramp + hold:
                return peak
            return max(peak * (1 - (t - ramp - hold) / down), 0.0)

        lat: list[tuple[float, float]] = []
        fails: list[str] = []
        load_start = time.monotonic()
        sent = asyncio.run(offered_load(f"{gw}/work?ms=50", headers, rate_at, ramp + hold + down, lat, fails))
        load_end = time.monotonic()
        time.sleep(args.idle_s)
        watch.stop.set()
        watch.join(5)

        # then the gateway's added latency: sequential light calls, through the gateway and straight to a replica
        replica = next(r for r in api.get("/api/v1/services/toy").json()["replicas"] if r["ready"])
        direct = f"http://127.0.0.1:{replica['port']}"
        sequential(f"{gw}/work?ms=0", headers, 50)  # warm both paths
        sequential(f"{direct}/work?ms=0", {}, 50)
        via_gw = sequential(f"{gw}/work?ms=0", headers, 1000)
        via_direct = sequential(f"{direct}/work?ms=0", {}, 1000)

        # time to scale up: the offered rate passes one replica's target at t1 (ramp fraction target/peak)
        t_over = load_start + ramp * args.target / peak
        first_up = next((t for t, d, _ in watch.points if t >= load_start and d > 1), None)
        # the longest stretch during which fewer replicas were ready than the offered rate needed (ceil(rate/target))
        longest = run = 0.0
        prev: float | None = None
        for t, _, rd in watch.points:
            offered = rate_at(t - load_start) if t - load_start < ramp + hold + down else 0.0
            short = rd < min(max(math.ceil(offered / args.target - 1e-9), 1), 8)
            run = run + (t - prev) if short and prev is not None else 0.0
            longest = max(longest, run)
            prev = t
        last_down = max((t for t, d, _ in watch.points if t >= load_end and d == 1), default=None)
        series = [
            {"t_s": round(t - load_start, 1), "offered_rps": round(rate_at(t - load_start), 1)
             if t - load_start < ramp + hold + down else 0.0, "desired": d, "ready": rd}
            for t, d, rd in watch.points
        ]  # fmt: skip
        ramp_lat = [ms for _, ms in lat]
        result = {
            "peak_rps": peak,
            "target_rps_per_replica": args.target,
            "requests_sent": sent,
            "requests_failed": len(fails),
            "failures_sample": fails[:5],
            "max_desired": max((d for _, d, _ in watch.points), default=0),
            "max_ready": max((rd for _, _, rd in watch.points), default=0),
            "scale_up_decision_s": None if first_up is None else round(first_up - t_over, 1),
            "longest_shortfall_s": round(longest, 1),
            "scale_down_to_1_after_load_s": None if last_down is None else round(last_down - load_end, 1),
            "ramp_latency_p50_ms": round(pct(ramp_lat, 50), 1) if ramp_lat else None,
            "ramp_latency_p99_ms": round(pct(ramp_lat, 99), 1) if ramp_lat else None,
            "gateway_p50_ms": round(statistics.median(via_gw), 2),
            "gateway_p99_ms": round(pct(via_gw, 99), 2),
            "direct_p50_ms": round(statistics.median(via_direct), 2),
            "direct_p99_ms": round(pct(via_direct, 99), 2),
            "gateway_added_p50_ms": round(statistics.median(via_gw) - statistics.median(via_direct), 2),
            "series": series,
        }
    finally:
        watch.stop.set()
        api.close()
        stop_corral(proc)
        stop_jobs(root)

    if args.plot:
        try:
            import matplotlib
        except ImportError:
            sys.exit("--plot needs matplotlib: pip install 'corral[plot]'")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4))
        xs = [p["t_s"] for p in result["series"]]
        ax.step(xs, [p["desired"] for p in result["series"]], where="post", label="desired replicas")
        ax.step(xs, [p["ready"] for p in result["series"]], where="post", label="ready replicas")
        ax2 = ax.twinx()
        ax2.plot(xs, [p["offered_rps"] for p in result["series"]], color="grey", alpha=0.5, label="offered rps")
        ax.set_xlabel("s since the load began")
        ax.set_ylabel("replicas")
        ax2.set_ylabel("requests/s")
        ax.legend(loc="upper left")
        fig.tight_layout()
        fig.savefig(args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"load 0 -> {result['peak_rps']:g} -> 0 requests/s, target {result['target_rps_per_replica']:g} per replica")
    print(f"  requests: {result['requests_sent']} sent, {result['requests_failed']} failed")
    print(f"  replicas: at most {result['max_desired']} desired, {result['max_ready']} ready")
    print(f"  scale-up decision {result['scale_up_decision_s']} s after the rate passed one replica's target")
    print(
        f"  longest time with fewer ready replicas than ceil(offered rate / target): {result['longest_shortfall_s']} s"
    )
    print(f"  back to 1 replica {result['scale_down_to_1_after_load_s']} s after the load ended")
    print(f"  latency during the ramp (50 ms of work): p50 {result['ramp_latency_p50_ms']} ms, "
          f"p99 {result['ramp_latency_p99_ms']} ms")  # fmt: skip
    print(f"  a small GET: gateway p50 {result['gateway_p50_ms']} ms / p99 {result['gateway_p99_ms']} ms; direct "
          f"p50 {result['direct_p50_ms']} ms / p99 {result['direct_p99_ms']} ms; added p50 "
          f"{result['gateway_added_p50_ms']} ms")  # fmt: skip
    print("  t_s  offered  desired  ready")
    last = -10.0
    for p in result["series"]:
        if p["t_s"] - last >= 5:
            last = p["t_s"]
            print(f"  {p['t_s']:5.0f}  {p['offered_rps']:7.0f}  {p['desired']:7d}  {p['ready']:5d}")


if __name__ == "__main__":
    main()
