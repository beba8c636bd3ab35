"""Cost of the agent's job web-UI port check (issue 11): one look at who listens on each watched port.

Starts `--jobs` listeners in process groups of their own (as jobs' servers would be) and times the agent's
refresh over them: the socket tables, the process table and each job's open files, once per WEB_PORT_CHECK_S.

    python bench/job_port_check.py                 # 8 jobs, 50 rounds
    python bench/job_port_check.py --jobs 32 --rounds 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import psutil
from benchlib import free_port

from corral.agent.webports import WEB_PORT_CHECK_S, WebPortWatch
from corral.api.schemas import WebPortCheck

LISTEN = (
    "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
    "print('up', flush=True); time.sleep(600)"
)


def run(jobs: int, rounds: int) -> dict[str, float]:
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for j in range(1, jobs + 1):
            port = free_port()
            p = subprocess.Popen(
                [sys.executable, "-c", LISTEN, str(port)], stdout=subprocess.PIPE, start_new_session=True
            )
            assert p.stdout is not None and p.stdout.readline() == b"up\n"
            procs[f"{j}.1"] = (p, port)
        watch = WebPortWatch(lambda key: procs[key][0].pid if key in procs else None, interval_s=0.0)
        watch.set_checks(
            [WebPortCheck(job_id=int(k.split(".")[0]), attempt=1, port=port) for k, (_, port) in procs.items()]
        )
        times, cpu = [], []
        for _ in range(rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            watch.refresh()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        assert all(r.listening for r in watch.reports()), watch.reports()
    finally:
        for p, _ in procs.values():
            p.kill()
            p.wait()
    cpu_ms = statistics.median(cpu) * 1000  # user + system time of the check: what it costs the node
    return {
        "jobs": jobs,
        "processes": len(psutil.pids()),
        "check_cpu_ms_median": round(cpu_ms, 2),
        "check_wall_ms_median": round(statistics.median(times) * 1000, 2),
        "check_wall_ms_p95": round(sorted(times)[int(len(times) * 0.95) - 1] * 1000, 2),
        "cpu_percent_of_a_core": round(cpu_ms / (WEB_PORT_CHECK_S * 1000) * 100, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.jobs, args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['jobs']} jobs' web-UI ports, {result['processes']} processes on the host: one check "
            f"{result['check_cpu_ms_median']} ms CPU (wall {result['check_wall_ms_median']} ms, p95 "
            f"{result['check_wall_ms_p95']} ms at load {result['load_average_1m']}), every {WEB_PORT_CHECK_S:g} s "
            f"= {result['cpu_percent_of_a_core']} % of a core"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
