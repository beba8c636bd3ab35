"""Leader failover of `corral server` replicas on PostgreSQL (issue 17): the time from kill -9 of the leader to
another replica leading, over several kills, and the API error rate clients see meanwhile.

Two replicas share a fresh PostgreSQL database and one data dir, and one agent (simulated GPUs) is given both
replicas' agent URLs. Clients (threads) read `GET /api/v1/jobs` in a loop through the SDK given both replicas' URLs
(CORRAL_URL may hold several: a client fails over to the replica that answers). Each round kills the leader with
SIGKILL, measures until `/api/v1/status` on the survivor names a new leader, submits a job through the survivor and
measures until it has run (the new leader placed it, and the agent, failing over too when it was on the dead
replica, ran it), then restarts the killed replica (back as a follower, on its ports) before the next round.

    .venv/bin/python bench/failover.py [--kills 10] [--clients 4] [--json]

Needs PostgreSQL (CORRAL_BENCH_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/postgres: a database is
made for the run and dropped after).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port, make_bench_root, pct

from corral.sdk.client import CorralClient
from corral.sdk.errors import CorralSDKError

CORRAL = str(Path(sys.executable).with_name("corral"))
PG_ADMIN = os.environ.get("CORRAL_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


class Replica:
    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        self.name, self.root = name, root
        self.port, self.agent_port, self.ui_port = free_port(), free_port(), free_port()
        self.gateway_port = free_port()  # each replica serves the services' gateway on a port of its own
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(
            env,
            CORRAL_PORT=str(self.port),
            CORRAL_AGENT_PORT=str(self.agent_port),
            CORRAL_JOB_UI_PORT=str(self.ui_port),
            CORRAL_GATEWAY_PORT=str(self.gateway_port),
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / f"server-{self.name}.log").open("ab")
        self.proc = subprocess.Popen([CORRAL, "server"], env=self.env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self.healthy():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                sys.exit(f"replica {self.name} did not start; see {self.root}/server-{self.name}.log")
            time.sleep(0.1)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _status(r: Replica, token: str) -> dict[str, Any] | None:
    try:
        resp = httpx.get(f"{r.url}/api/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=2)
        return resp.json() if resp.status_code == 200 else None
    except httpx.HTTPError:
        return None


class Readers:
    """Client threads reading through the SDK with both URLs; counts requests and the errors they saw."""

    def __init__(self, urls: str, token: str, count: int) -> None:
        self.urls, self.token = urls, token
        self.ok = self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def _run(self) -> None:
        with CorralClient(self.urls, self.token, timeout_s=5.0) as c:
            while not self._stop.is_set():
                try:
                    c.jobs()
                    with self._lock:
                        self.ok += 1
                except CorralSDKError:
                    with self._lock:
                        self.failed += 1
                time.sleep(0.02)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def take(self) -> tuple[int, int]:
        with self._lock:
            counts = (self.ok, self.failed)
            self.ok = self.failed = 0
            return counts

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import psycopg

    db = f"corral_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    root = make_bench_root()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_DATA_DIR=str(root / "data"),
        CORRAL_DATABASE_URL=f"{PG_ADMIN.rpartition('/')[0]}/{db}",
        CORRAL_GPUS="none",
        HOME=str(root),
    )
    replicas = [Replica("a", root, env), Replica("b", root, env)]
    agent: subprocess.Popen[bytes] | None = None
    failovers: list[float] = []
    to_running: list[float] = []
    errors: list[tuple[int, int]] = []
    readers: Readers | None = None
    try:
        for r in replicas:
            r.start()
        token = (root / "data" / "admin-token").read_text().strip()
        agent_env = dict(env, CORRAL_DATA_DIR=str(root / "agent"), CORRAL_NODE_NAME="bench-node")
        log = (root / "agent.log").open("ab")
        agent = subprocess.Popen(
            [CORRAL, "agent", "--join", ",".join(f"https://127.0.0.1:{r.agent_port}" for r in replicas),
             "--token-file", str(root / "data" / "join-token"), "--gpus", "sim:2xH100-80GB"],
            env=agent_env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        while not httpx.get(f"{replicas[0].url}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}).json():
            if agent.poll() is not None:
                sys.exit(f"the agent did not start; see {root}/agent.log")
            time.sleep(0.1)
        readers = Readers(",".join(r.url for r in replicas), token, args.clients)
        readers.start()
        for _ in range(args.kills):
            status = next(s for r in replicas if (s := _status(r, token)) and s["leader"])
            leader = next(r for r in replicas if any(x["id"] == status["leader"] and x["url"] == r.url
                                                       for x in status["replicas"]))  # fmt: skip
            survivor = next(r for r in replicas if r is not leader)
            time.sleep(1.0)  # the readers settle
            readers.take()
            leader.kill()
            killed = time.monotonic()
            while not ((s := _status(survivor, token)) and s["leader"] and s["leader"] != status["leader"]):
                time.sleep(0.02)
            failovers.append(time.monotonic() - killed)
            submitted = time.monotonic()
            job = httpx.post(
                f"{survivor.url}/api/v1/jobs",
                json={"command": ["true"]},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            ).json()["id"]
            deadline = time.monotonic() + 120
            while httpx.get(f"{survivor.url}/api/v1/jobs/{job}", headers={"Authorization": f"Bearer {token}"},
                            timeout=10).json()["state"] in ("PENDING", "RUNNING"):  # fmt: skip
                if time.monotonic() > deadline:
                    sys.exit(f"job {job} did not run within 120 s of the failover")
                time.sleep(0.02)
            to_running.append(time.monotonic() - submitted)
            errors.append(readers.take())
            leader.start()  # back as a follower
    finally:
        if readers is not None:
            readers.stop()
        for r in replicas:
            r.kill()
        if agent is not None and agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(10)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    ok = sum(o for o, _ in errors)
    failed = sum(f for _, f in errors)
    result = {
        "kills": len(failovers),
        "failover_s": {"median": statistics.median(failovers), "p90": pct(failovers, 90), "max": max(failovers)},
        "job_done_after_failover_s": {"median": statistics.median(to_running), "max": max(to_running)},
        "client_requests_during_failover": ok + failed,
        "client_errors_during_failover": failed,
        "client_error_rate": failed / max(ok + failed, 1),
        "clients": args.clients,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    f = result["failover_s"]
    print(f"leader failover after kill -9: median {f['median']:.2f} s, p90 {f['p90']:.2f} s, max {f['max']:.2f} s "
          f"({len(failovers)} kills)")  # fmt: skip
    print(f"a job submitted to the survivor once it led had run {statistics.median(to_running):.2f} s later (median)")
    print(f"client reads during failovers: {ok + failed}, errors seen {failed} ({100 * result['client_error_rate']:.2f}%"
          f", {args.clients} clients with both URLs)")  # fmt: skip


if __name__ == "__main__":
    main()
