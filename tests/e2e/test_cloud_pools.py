"""Cloud pools with real processes: `corral up` (one static node of 8 simulated L4s) and a `local` cloud pool (max 2
nodes of 4 simulated A100s, idle 20 s) whose nodes are real `corral agent` processes started by the autoscaler,
joining over mutual TLS with one-time tokens. A 4-GPU A100 job makes a node start, join and run it; the node is
released once idle for 20 s after the job ended; a job larger than any instance type stays pending with a reason
naming the pool's largest; a member of a tenant cannot declare pools nor read their settings and events."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from .conftest import Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # timing: the idle release is measured


def _api(c: Corral) -> httpx.Client:
    token = (c.data_dir / "admin-token").read_text().strip()
    return httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {token}"}, timeout=15)


def _pool(http: httpx.Client, name: str) -> dict[str, Any]:
    r = http.get(f"/api/v1/pools/{name}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_local_pool_starts_a_node_for_a_job_and_releases_it_when_idle(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:8xL4-24GB")
    c.start()
    http = _api(c)
    r = c.cli(
        "pool", "create", "burst", "--provider", "local", "--instance-type", "g4=4xA100-80GB,price=2.5",
        "--max", "2", "--idle", "20", "--join-timeout", "120",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "burst" in r.stdout

    # A job no static node can hold (no A100 there): a node of g4 starts for it and runs it.
    sleeper = "import time; time.sleep(6)"
    t0 = time.monotonic()
    job = c.submit("--gpus", "4", "--gpu-model", "A100", "--name", "burst-job", "--", "/usr/bin/python3", "-c", sleeper)
    waiting = wait_for(
        lambda: (j := c.job(job))["pending_code"] == "scale-up" and j, 30, "the job waits for a new node"
    )
    assert "pool burst is starting" in waiting["pending_reason"], waiting
    running = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 90, "the job runs on the new node")
    to_running = time.monotonic() - t0
    node = running["node"]
    assert node.startswith("burst-g4-"), running
    nodes = {n["name"]: n for n in c.cli_json("nodes")}
    assert nodes[node]["labels"].get("pool") == "burst"
    assert nodes[node]["gpus_total"] == 4 and nodes[node]["gpu_models"] == ["A100-80GB"]
    # The pool marks its node running on its next pass after the join; the scheduler may place the job sooner.
    pool = wait_for(
        lambda: (p := _pool(http, "burst"))["nodes"] and p["nodes"][0]["state"] == "running" and p,
        30,
        "the pool's node marked running",
    )
    assert [n["name"] for n in pool["nodes"]] == [node]
    assert any(e["kind"] == "launch" and "job" in e["message"] for e in pool["events"])
    assert any(e["kind"] == "joined" for e in pool["events"])

    # Larger than any instance type: pinned to the pool it is refused at once, naming the pool's largest type; one
    # that only the (cordoned) static node could ever hold waits, and says what the pool's largest is.
    r = c.cli("submit", "--gpus", "8", "--pool", "burst", "--", "/usr/bin/python3", "-c", "pass")
    assert r.returncode != 0 and "g4 (4 x A100-80GB" in r.stderr, r.stderr
    assert c.cli("nodes", "cordon", "node-a").returncode == 0
    big = c.submit("--gpus", "8", "--", "/usr/bin/python3", "-c", "pass")
    big_job = wait_for(lambda: (j := c.job(big))["pending_code"] == "no-instance-type" and j, 30, "reason")
    assert "g4 (4 x A100-80GB" in big_job["pending_reason"], big_job
    r = c.cli("cancel", str(big))
    assert r.returncode == 0, r.stderr
    assert c.cli("nodes", "uncordon", "node-a").returncode == 0

    done = wait_for(lambda: (j := c.job(job))["state"] == "SUCCEEDED" and j, 60, "the job succeeds")
    ended = datetime.fromisoformat(done["finished_at"]).timestamp()

    # Idle for 20 s (no job, GPUs quiet) -> drained and released; its node leaves the inventory.
    def released() -> dict[str, Any] | None:
        p = _pool(http, "burst")
        return p if not p["nodes"] else None

    p = wait_for(released, 60, "the idle node is released")
    gone_at = time.time()
    rel = [e for e in p["events"] if e["kind"] == "release" and e["node"] == node]
    assert rel and "idle for" in rel[0]["message"], p["events"]
    released_at = datetime.fromisoformat(rel[0]["at"]).timestamp()
    assert released_at - ended >= 19.0, (released_at, ended)  # not before its idle time
    assert gone_at - ended < 45.0, (gone_at, ended)
    wait_for(lambda: node not in {n["name"] for n in c.cli_json("nodes")}, 20, "the node leaves the inventory")
    assert p["spend_total"] > 0 and p["failed_launches"] == 0
    listing = c.cli("pools")
    assert listing.returncode == 0 and "burst" in listing.stdout and "static" in listing.stdout
    print(f"fit-no-node -> RUNNING on a new node: {to_running:.1f} s")

    # Spend counts owned and rented GPUs alike: the job's 4 A100-hours-ish at 2.50/h per 4 GPUs, by pool and job.
    by_pool = {r["key"]: r for r in c.cli_json("report", "--by", "pool")}
    assert by_pool["burst"]["cost"] > 0 and by_pool["burst"]["jobs"] == 1
    csv = c.cli("report", "--by", "job", "--csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0] == "job,gpu_hours,jobs,avg_util_pct,cost"

    # A budget used up with policy no-burst: the tenant's job that needs a new node starts none, and says why.
    launches = len([e for e in _pool(http, "burst")["events"] if e["kind"] == "launch"])
    r = c.cli("budget", "set", "default", "--money", "0.001", "--policy", "no-burst")
    assert r.returncode == 0, r.stderr
    [budget] = c.cli_json("budgets")
    assert budget["state"] == "exceeded" and budget["enforced"] and budget["money_used"] > 0.001, budget
    second = c.submit("--gpus", "4", "--gpu-model", "A100", "--", "/usr/bin/python3", "-c", "pass")
    try:
        held = wait_for(lambda: (j := c.job(second))["pending_code"] == "budget" and j, 30, "no-burst reason")
    except AssertionError:
        raise AssertionError((c.job(second), _pool(http, "burst")["events"][-6:], c.cli_json("budgets"))) from None
    assert "no-burst" in held["pending_reason"], held
    time.sleep(5)  # two autoscaler passes at least
    p = _pool(http, "burst")
    assert p["nodes"] == [] and len([e for e in p["events"] if e["kind"] == "launch"]) == launches, p["events"]

    # Policy hold: the tenant's new jobs wait even where a node is free.
    r = c.cli("budget", "set", "default", "--money", "0.001", "--policy", "hold")
    assert r.returncode == 0, r.stderr
    small = c.submit("--gpus", "1", "--gpu-model", "L4", "--", "/usr/bin/python3", "-c", "pass")
    wait_for(
        lambda: (j := c.job(small))["pending_code"] == "budget" and "holds new jobs" in j["pending_reason"],
        30,
        "the hold reason",
    )
    # The budget goes: the job runs on the static node, and the other starts a node again.
    assert c.cli("budget", "delete", "default").returncode == 0
    wait_for(lambda: c.job(small)["state"] == "SUCCEEDED", 60, "the held job runs once the budget is gone")
    wait_for(lambda: c.job(second)["state"] in ("RUNNING", "SUCCEEDED"), 90, "a node starts again")


def test_a_tenant_member_cannot_declare_or_read_pool_internals(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:1xL4-24GB")
    c.start()
    admin = _api(c)
    body = {
        "name": "burst",
        "provider": "local",
        "instance_types": [{"name": "g4", "gpus": 4, "gpu_model": "A100-80GB", "price_per_hour": 2.5}],
        "max_nodes": 1,
    }
    assert admin.post("/api/v1/pools", json=body).status_code == 201
    assert admin.post("/api/v1/tenants", json={"name": "team-b"}).status_code in (200, 201)
    r = admin.post("/api/v1/users", json={"name": "mallory", "tenant": "team-b", "role": "member"})
    assert r.status_code in (200, 201), r.text
    r = admin.post("/api/v1/tokens", json={"name": "m", "user": "mallory"})
    assert r.status_code in (200, 201), r.text
    mallory = httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {r.json()['token']}"}, timeout=15)
    hostile = dict(body, name="evil", settings={"docker_host": "tcp://attacker:2375"})
    assert mallory.post("/api/v1/pools", json=hostile).status_code == 403
    assert mallory.patch("/api/v1/pools/burst", json={"max_nodes": 100}).status_code == 403
    assert mallory.delete("/api/v1/pools/burst").status_code == 403
    seen = mallory.get("/api/v1/pools/burst").json()
    assert seen["settings"] is None and seen["events"] is None
    assert _pool(admin, "burst")["max_nodes"] == 1
    # A join token of the cluster cannot be used to claim a pool's label: the server sets `pool`, not the agent.
    assert all(n["labels"].get("pool") is None for n in c.cli_json("nodes"))


SPOT_JOB = r"""
import os, pathlib, signal, sys, time
marker = pathlib.Path(os.environ["MARKER"])
if marker.exists():
    print("resumed after the interruption", flush=True)
    sys.exit(0)
marker.write_text("started")
def on_term(*_):
    notice = pathlib.Path(os.environ["CORRAL_NOTICE_FILE"]).read_text()
    marker.with_name("notice.txt").write_text(notice)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("running", flush=True)
time.sleep(300)
"""


def test_a_spot_interruption_notice_reaches_the_job_which_requeues_onto_a_new_node(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:1xL4-24GB")
    c.start()
    http = _api(c)
    r = c.cli(
        "pool", "create", "spot", "--provider", "local", "--instance-type", "s4=4xA100-80GB,price=1.0,spot",
        "--max", "2", "--idle", "20",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # A job that does not allow spot never gets a spot node: it is refused at once (nothing else could hold it).
    r = c.cli("submit", "--gpus", "4", "--gpu-model", "A100", "--", "/usr/bin/python3", "-c", "pass")
    assert r.returncode != 0 and "instance type" in r.stderr, r.stderr
    marker = c.shared / "spot-marker"
    job = c.submit(
        "--spot", "--gpus", "4", "--gpu-model", "A100", "--env", f"MARKER={marker}",
        "--", "/usr/bin/python3", "-c", SPOT_JOB,
    )  # fmt: skip
    first = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 90, "the spot job runs")
    assert first["tolerations"] == ["spot"]
    wait_for(marker.exists, 30, "the job started")
    r = c.cli("pool", "interrupt", "spot", first["node"], "--in", "8")
    assert r.returncode == 0, r.stderr
    # The job hears of it (CORRAL_NOTICE_FILE), is stopped and requeued keeping its place; a new node runs it.
    notice = marker.with_name("notice.txt")
    wait_for(notice.exists, 30, "the notice reached the job")
    seconds = int(notice.read_text().strip().removeprefix("CORRAL_NOTICE_S="))
    assert 0 < seconds <= 8, notice.read_text()
    done = wait_for(lambda: (j := c.job(job))["state"] == "SUCCEEDED" and j, 120, "the job ends on another node")
    assert done["node"] != first["node"] and done["attempt"] == 2 and done["preemptions"] == 1, done
    events = _pool(http, "spot")["events"]
    assert any(e["kind"] == "interrupted" and e["node"] == first["node"] for e in events), events
    assert len([e for e in events if e["kind"] == "launch"]) == 2, events
    # drained (its jobs requeued), it is released at once rather than waiting for the provider to take it
    wait_for(
        lambda: first["node"] not in {n["name"] for n in _pool(http, "spot")["nodes"]},
        30,
        "the interrupted node is released",
    )
    wait_for(lambda: first["node"] not in {n["name"] for n in c.cli_json("nodes")}, 30, "it leaves the inventory")


def test_a_server_killed_mid_job_finds_its_pool_nodes_again(corral_factory: Any) -> None:
    """kill -9 of the server while a pool node runs a job: the node (its own process) goes on, the restarted server's
    autoscaler finds it by its record and its instance, the job ends, and the idle node is still released."""
    c: Corral = corral_factory(gpus="sim:1xL4-24GB")
    c.start()
    http = _api(c)
    r = c.cli(
        "pool", "create", "burst", "--provider", "local", "--instance-type", "g4=4xA100-80GB,price=2.5",
        "--max", "1", "--idle", "5",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = c.submit("--gpus", "4", "--gpu-model", "A100", "--", "/usr/bin/python3", "-c", "import time; time.sleep(12)")
    running = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 90, "the job runs on a new node")
    c.kill9()
    c.start()
    http = _api(c)
    assert [n["name"] for n in _pool(http, "burst")["nodes"]] == [running["node"]]
    done = wait_for(lambda: (j := c.job(job))["state"] == "SUCCEEDED" and j, 60, "the job ends after the restart")
    assert done["attempt"] == 1 and done["node"] == running["node"]
    wait_for(lambda: not _pool(http, "burst")["nodes"], 40, "the idle node is released after the restart")
    events = _pool(http, "burst")["events"]
    assert len([e for e in events if e["kind"] == "launch"]) == 1, events
