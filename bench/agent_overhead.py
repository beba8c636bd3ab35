"""Agent overhead (issue 5): CPU % of one core and RSS of telemetry collection on an 8-GPU simulated node.

Runs the Collector (host vitals through psutil, 8 simulated H100s with half of them busy, the fault
event watcher) at the given interval, serialising every batch to JSON as the agent's uploader would,
and measures this process's CPU time and memory over the run.

    python bench/agent_overhead.py                       # 5 s interval for 60 s
    python bench/agent_overhead.py --interval 5 --duration 300 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import psutil

from corral.agent.gpu import SimulatedGpuBackend
from corral.agent.metrics import Collector
from corral.core.telemetry import TelemetryBatch, batch_to_dict


def run(interval_s: float, duration_s: float, gpus: int) -> dict[str, float]:
    backend = SimulatedGpuBackend(f"sim:{gpus}xH100-80GB", "bench-node")
    backend.set_load({i: 0.9 for i in range(0, gpus, 2)})
    uploaded: list[int] = []
    pass_s: list[float] = []

    def sink(batch: TelemetryBatch) -> None:
        uploaded.append(len(json.dumps(batch_to_dict(batch))))

    collector = Collector(backend, sink, node="bench-node", interval_s=interval_s)
    # Time each pass (sampling + host read + serialisation) by wrapping collect_once.
    inner = collector.collect_once

    def timed(now: float | None = None) -> TelemetryBatch:
        t0 = time.perf_counter()
        try:
            return inner(now)
        finally:
            pass_s.append(time.perf_counter() - t0)

    collector.collect_once = timed  # type: ignore[method-assign]
    proc = psutil.Process()
    cpu0, wall0 = proc.cpu_times(), time.monotonic()
    collector.start()
    threading.Event().wait(duration_s)
    collector.stop()
    cpu1, wall1 = proc.cpu_times(), time.monotonic()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    wall_s = wall1 - wall0
    return {
        "interval_s": interval_s,
        "duration_s": round(wall_s, 1),
        "gpus": gpus,
        "batches": len(uploaded),
        "cpu_percent_of_one_core": round(100.0 * cpu_s / wall_s, 3),
        "rss_mib": round(proc.memory_info().rss / 2**20, 1),
        "mean_pass_ms": round(1000 * sum(pass_s) / len(pass_s), 3) if pass_s else 0.0,
        "batch_json_bytes": uploaded[-1] if uploaded else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=5.0, help="collection interval, seconds")
    parser.add_argument("--duration", type=float, default=60.0, help="how long to run, seconds")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs on the node")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args.interval, args.duration, args.gpus)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['gpus']} simulated GPUs, {result['interval_s']:g} s interval, {result['duration_s']:g} s, "
            f"{result['batches']} batches"
        )
        print(
            f"agent CPU: {result['cpu_percent_of_one_core']:.3f} % of one core "
            f"(mean pass {result['mean_pass_ms']:.2f} ms)"
        )
        print(f"RSS: {result['rss_mib']:.1f} MiB; batch {result['batch_json_bytes']} bytes of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
