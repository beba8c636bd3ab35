"""CORRAL_WORKERS (issue 13: a server that uses more than one core): `corral server` with CORRAL_WORKERS=3 on
PostgreSQL, real processes over real HTTP. The process started serves people's ports; two it starts serve the agents'
port together, and one more runs the leader's loops and alone leads (each a replica of its own). Agents joined
through that port run the work submitted through the API, and their telemetry shows in the starter's latest values
and Prometheus gauges; why a job waits, which the loops' process works out, is what people read; a worker killed
with -9 is started again and its agents carry on, and so does the scheduling when the loops' process is killed; a
worker whose starter is killed with -9 stops by itself (no server left behind holding the agents' port)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import httpx
import pytest

from .conftest import CORRAL, Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(180)]


def _status(c: Corral, token: str) -> dict[str, Any]:
    """GET /status on a new connection (the kernel picks a worker per connection)."""
    with httpx.Client(timeout=10) as http:
        resp = http.get(f"{c.url}/api/v1/status", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _answering(c: Corral, token: str, tries: int = 60) -> set[str]:
    """The replicas that answered `tries` requests, each on a connection of its own."""
    return {_status(c, token)["replica"] for _ in range(tries)}


def _pid(replica: str) -> int:
    # host:pid:random (server/background/leadership.py); a worker's: its starter's, then /worker-<pid>
    _, worker, pid = replica.rpartition("/worker-")
    return int(pid) if worker else int(replica.split(":")[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _role(pid: int) -> str:
    """What a worker does (CORRAL_WORKER_ROLE in its environment, server/workers.py)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
    return env.get(b"CORRAL_WORKER_ROLE", b"").decode()


def _job_done(c: Corral, headers: dict[str, str], job: int) -> bool:
    return bool(httpx.get(f"{c.url}/api/v1/jobs/{job}", headers=headers).json()["state"] == "SUCCEEDED")


def test_workers_serve_the_agents_port_restart_and_stop_with_their_starter(
    corral_factory: Any, postgres_url: str
) -> None:
    c: Corral = corral_factory(gpus="none", database_url=postgres_url)
    # passes 30 s apart: the jobs below run within 20 s only because a submission (through the starter) and GPUs
    # freed (through an agents' worker) wake the loops' process's scheduler
    env = dict(c.env, CORRAL_WORKERS="3", CORRAL_SCHEDULE_INTERVAL_S="30")
    server = c.spawn([CORRAL, "server"], env=env, log_name="server")
    wait_for(lambda: (c.data_dir / "admin-token").exists() and c.healthy(), 60, "the server up")
    token = (c.data_dir / "admin-token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}

    # Four replicas: the process started answers people; two workers serve the agents' port; the loops' one leads.
    status = wait_for(
        lambda: len((s := _status(c, token))["replicas"]) == 4 and s["leader"] and s, 30, "4 replicas, one leading"
    )
    replicas = {r["id"] for r in status["replicas"]}
    (starter,) = {r for r in replicas if _pid(r) == server.pid}
    assert _answering(c, token, 10) == {starter}
    workers = replicas - {starter}
    assert all(_alive(_pid(w)) for w in workers)
    assert sorted(_role(_pid(w)) for w in workers) == ["agents", "agents", "loops"]
    assert _role(_pid(status["leader"])) == "loops"
    loops = status["leader"]
    workers -= {loops}
    # each worker's id extends its starter's
    assert all(w.startswith(starter + "/worker-") for w in workers | {loops})
    # the agents' reports wait for a core behind people's reads and the scheduler's passes (CORRAL_WORKER_NICE)
    base = os.getpriority(os.PRIO_PROCESS, server.pid)
    assert [os.getpriority(os.PRIO_PROCESS, _pid(w)) for w in sorted(workers)] == [min(base + 10, 19)] * 2
    assert os.getpriority(os.PRIO_PROCESS, _pid(loops)) == base

    # Agents joined through the workers' port run what is submitted through the API.
    env = dict(c.env, CORRAL_URL=c.url, CORRAL_TOKEN=token)
    for node in ("n1", "n2"):
        made = c.cli("tokens", "join", "create", "--ttl", "10m", "--uses", "1", env=env)
        assert made.returncode == 0, made.stderr
        token_file = c.root / f"join-token-{node}"
        token_file.write_text(made.stdout.strip() + "\n")
        os.chmod(token_file, 0o600)
        c.spawn(
            [CORRAL, "agent", "--join", c.agent_url, "--gpus", "sim:2xH100-80GB", "--node-name", node,
             "--token-file", str(token_file)],
            env=c.agent_env(node),
            log_name=f"agent-{node}",
        )  # fmt: skip
    nodes = lambda: httpx.get(f"{c.url}/api/v1/nodes", headers=headers).json()  # noqa: E731
    wait_for(lambda: len(nodes()) == 2, 60, "both agents registered")
    # The agents' telemetry reaches the workers; its latest values and gauges are the starter's to show.
    latest = lambda: httpx.get(f"{c.url}/api/v1/metrics/latest", params={"node": "n2"}, headers=headers).json()  # noqa: E731
    assert len(wait_for(lambda: latest()["gpus"], 60, "n2's latest telemetry on the starter")) == 2

    def gauged() -> set[str]:  # the nodes whose GPUs have a corral_gpu_healthy gauge
        text = httpx.get(f"{c.url}/metrics", headers=headers).text
        lines = [x for x in text.splitlines() if x.startswith("corral_gpu_healthy{")]
        return {n for n in ("n1", "n2") if any(f'Hostname="{n}"' in x for x in lines)}

    wait_for(lambda: gauged() == {"n1", "n2"}, 60, "both nodes' GPU gauges on the starter")

    def run_jobs(n: int) -> None:
        jobs = []
        for i in range(n):
            resp = httpx.post(f"{c.url}/api/v1/jobs", headers=headers, json={"command": ["echo", str(i)], "gpus": 1})
            assert resp.status_code < 300, resp.text
            jobs.append(resp.json()["id"])
        for job in jobs:
            wait_for(lambda j=job: _job_done(c, headers, j), 20, f"job {job} ran")

    run_jobs(6)

    # kill -9 of a worker: its starter starts another; the agents reconnect and take work again.
    killed = sorted(workers)[0]
    os.kill(_pid(killed), signal.SIGKILL)
    wait_for(lambda: not _alive(_pid(killed)), 10, "the worker gone")
    fresh = wait_for(
        lambda: (s := {r["id"] for r in _status(c, token)["replicas"]} - replicas) and s, 30, "a new worker"
    )
    assert all(_alive(_pid(w)) for w in fresh)
    run_jobs(4)
    assert all(n["state"] == "READY" for n in nodes())

    # Why a job waits is worked out by the loops' process and told by the starter (scheduler_view.py).
    held = []
    for _ in range(3):  # two hold every GPU; the third waits
        resp = httpx.post(f"{c.url}/api/v1/jobs", headers=headers, json={"command": ["sleep", "120"], "gpus": 2})
        assert resp.status_code < 300, resp.text
        held.append(resp.json()["id"])
    waiting = wait_for(
        lambda: (
            (j := httpx.get(f"{c.url}/api/v1/jobs/{held[-1]}", headers=headers).json())["pending_reason"]
            not in (None, "waiting for the scheduler")
            and j
        ),
        30,
        "the reason the third job waits, on the starter",
    )
    assert waiting["state"] == "PENDING" and "GPU" in waiting["pending_reason"], waiting
    for job in held:
        assert httpx.post(f"{c.url}/api/v1/jobs/{job}/cancel", headers=headers).status_code == 200

    # kill -9 of the loops' process: its starter starts another, which leads, and jobs are placed again.
    os.kill(_pid(loops), signal.SIGKILL)
    wait_for(lambda: (leader := _status(c, token)["leader"]) and leader != loops, 60, "a new loops' process leading")
    run_jobs(2)

    # kill -9 of the starter: its workers stop by themselves, and nothing holds the agents' port.
    left = {r["id"] for r in _status(c, token)["replicas"]} - {starter}
    os.kill(server.pid, signal.SIGKILL)
    server.wait(10)
    wait_for(lambda: not any(_alive(_pid(w)) for w in left), 20, "the workers stopped after their starter")
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{c.agent_url}/healthz", timeout=2, verify=False)
