"""Chaos under a steady burst (issue 17), real processes: two `corral server` replicas on PostgreSQL, two agents
on simulated GPUs, a client submitting a job every quarter second through every replica's URL (and cancelling
every eighth on purpose). Each test injects one fault: kill -9 of the leader, kill -9 of a follower, a PostgreSQL
crash and restart, an agent cut off by its network namespace for longer than the node-lost timeout, an agent's
log disk full. Then: jobs accepted = jobs present = jobs finished (or cancelled on purpose), none lost, none
duplicated, none stuck, no GPU given twice (the agents' own journals), and the time to recover, printed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from .chaos import (
    Burst,
    ChaosCluster,
    NetNamespace,
    PrivatePostgres,
    Replica,
    Tmpfs,
    assert_nothing_lost,
    job_log,
    settle_and_check,
)
from .conftest import Corral, wait_for

# serial: each test times its recovery and plays against timeouts (8 s node-lost, a 4 s cut under it): `make test`
# runs them alone after the parallel run, so a busy neighbour cannot stretch a heartbeat past a timeout.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(300), pytest.mark.serial]
FAILOVER_S = 10.0


@pytest.fixture
def cluster(corral_factory: Callable[..., Corral], postgres_url: str) -> Callable[..., ChaosCluster]:
    def make(database_url: str = "", **kw: Any) -> ChaosCluster:
        c = corral_factory(gpus="none")
        return ChaosCluster(c, database_url or postgres_url, **kw)

    return make


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        yield pg
    finally:
        pg.close()


def _check_logs(cluster: ChaosCluster, jobs: list[dict[str, Any]], burst: Burst) -> None:
    for j in jobs:
        if j["state"] == "SUCCEEDED":
            i = j["name"].removeprefix("chaos-")
            assert job_log(cluster, j["id"]).endswith(f"ok-{i}\n"), j  # (a holder's first attempt said "holding")


def _told_loss(cluster: ChaosCluster, job: dict[str, Any]) -> bool:
    return "log disk was full" in job_log(cluster, job["id"]) or "log disk was full" in (job.get("reason") or "")


def _two_agents_under_a_burst(cl: ChaosCluster) -> tuple[ChaosCluster, Burst, Replica, int]:
    """Agents n1 and n2 joined, the burst going for 3 s; the leader and its lease epoch."""
    for node in ("n1", "n2"):
        cl.start_agent(node)
    burst = Burst(cl)
    burst.start()
    time.sleep(3)
    leader = wait_for(cl.leader, 10, "a leader")
    return cl, burst, leader, cl.api("GET", "/status")["leader_epoch"]


def test_kill_9_of_the_leader(cluster: Callable[..., ChaosCluster], figure: Callable[[str], None]) -> None:
    cl, burst, leader, epoch = _two_agents_under_a_burst(cluster())
    leader.kill9()
    killed = time.monotonic()
    new = wait_for(lambda: (s := cl.try_api("GET", "/status")) and s["leader_epoch"] > epoch and s, FAILOVER_S, "new")
    failover_s = time.monotonic() - killed
    assert new["leader"]
    recovered = cl.probe()  # a job submitted right after the failover has run
    time.sleep(3)
    burst.stop()
    outcome, jobs = settle_and_check(
        cl, burst, "kill -9 of the leader", failover_s, probe_ran_after_s=f"{recovered:.1f}"
    )
    assert_nothing_lost(outcome, jobs, burst, figure)
    _check_logs(cl, jobs, burst)


def test_kill_9_of_a_follower(cluster: Callable[..., ChaosCluster], figure: Callable[[str], None]) -> None:
    cl, burst, leader, epoch = _two_agents_under_a_burst(cluster())
    follower = next(r for r in cl.replicas if r is not leader)
    follower.kill9()
    recovered = cl.probe()  # a job submitted right after the kill (its client may have used the dead one) has run
    time.sleep(3)
    burst.stop()
    assert cl.api("GET", "/status")["leader_epoch"] == epoch  # the leader led on, untouched
    outcome, jobs = settle_and_check(cl, burst, "kill -9 of a follower", recovered)
    assert_nothing_lost(outcome, jobs, burst, figure)
    _check_logs(cl, jobs, burst)


def test_postgresql_crash_and_restart(
    cluster: Callable[..., ChaosCluster], figure: Callable[[str], None], private_postgres: PrivatePostgres
) -> None:
    cl = cluster(private_postgres.url)
    for node in ("n1", "n2"):
        cl.start_agent(node)
    burst = Burst(cl)
    burst.start()
    time.sleep(3)
    private_postgres.stop("immediate")  # as a crash: no checkpoint, the restart recovers from the WAL
    down = time.monotonic()
    r = cl.replicas[1]
    answer = httpx.get(f"{r.url}/api/v1/jobs", headers={"Authorization": f"Bearer {cl.token}"}, timeout=30)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"  # "try again", not a crash
    assert answer.json()["error"]["code"] == "database_unavailable"
    time.sleep(max(0.0, 3 - (time.monotonic() - down)))
    private_postgres.start()
    back = time.monotonic()
    recovered = cl.probe(timeout_s=90)  # submitted as soon as the database is back: placed and run
    time.sleep(3)
    burst.stop()
    wait_for(cl.leader, 15, "a leader again")
    outcome, jobs = settle_and_check(cl, burst, "PostgreSQL crash (3 s down) and restart", recovered,
                                     job_ran_after_restart_s=f"{time.monotonic() - back:.1f}")  # fmt: skip
    assert_nothing_lost(outcome, jobs, burst, figure)
    _check_logs(cl, jobs, burst)


def test_an_agent_cut_off_past_the_node_lost_timeout(
    cluster: Callable[..., ChaosCluster], figure: Callable[[str], None]
) -> None:
    ns = NetNamespace()
    try:
        cl = cluster(api_host=ns.host_ip)
        cl.start_agent("n1", netns=ns, model="A100-80GB")  # jobs asking for an A100 can only run on n1
        cl.start_agent("n2")
        burst = Burst(cl, command="sleep 1; echo ok-{i}")
        burst.start()
        time.sleep(3)
        # A short cut (under the 8 s node-lost timeout): the node's jobs run on and their exits wait on the node.
        ns.cut()
        time.sleep(4)
        ns.mend()
        wait_for(lambda: cl.node_state("n1") == "READY", 20, "n1 back after the short cut")
        short_requeued = sum(j["attempt"] > 1 for j in cl.api("GET", "/jobs", params={"all": "true", "limit": 5000}))
        assert short_requeued == 0  # a cut shorter than the timeout requeues nothing
        # A long one: the node is LOST, its jobs go back to the queue and run on n2; when it comes back the server
        # tells it to stop the attempts it no longer runs. Two jobs that only n1 can run hold both its GPUs across
        # the cut, and take 2 s to stop (as a trainer writing a checkpoint): their second attempts, placed on n1
        # as soon as it is back, must not start on GPUs the first ones still hold.
        holder = (
            'if [ "$CORRAL_ATTEMPT" = 1 ]; then trap "sleep 4; exit 143" TERM; echo holding; sleep 60 & wait; '
            "else echo ok-{i}; fi"
        )
        for k in (1, 2):
            name = f"chaos-holder{k}"
            job = cl.api("POST", "/jobs", json={"name": name, "gpus": 1, "gpu_model": "A100-80GB",
                                                "command": ["sh", "-c", holder.format(i=f"holder{k}")]})  # fmt: skip
            burst.attempted.append(name)
            burst.accepted[name] = job["id"]
        wait_for(lambda: all(job_log(cl, burst.accepted[f"chaos-holder{k}"]) == "holding\n" for k in (1, 2)), 30,
                 "both holders running on n1")  # fmt: skip
        ns.cut()
        cut = time.monotonic()
        wait_for(lambda: cl.node_state("n1") == "LOST", 30, "n1 LOST")
        lost_after = time.monotonic() - cut
        time.sleep(4)
        ns.mend()
        mended = time.monotonic()
        wait_for(lambda: cl.node_state("n1") == "READY", 30, "n1 READY again")
        back_after = time.monotonic() - mended
        time.sleep(4)
        burst.stop()
        outcome, jobs = settle_and_check(cl, burst, "an agent cut off for 4 s, then for 12 s", back_after,
                                         lost_after_s=f"{lost_after:.1f}")  # fmt: skip
        assert_nothing_lost(outcome, jobs, burst, figure, requeue_ok=True)
        _check_logs(cl, jobs, burst)
    finally:
        ns.close()


def test_an_agents_log_disk_fills_up(cluster: Callable[..., ChaosCluster], figure: Callable[[str], None]) -> None:
    cl = cluster()
    disk = Tmpfs(cl.agent_dir("n1") / "logs", "1m")
    try:
        cl.start_agent("n1", gpus=2)
        burst = Burst(cl)
        burst.start()
        time.sleep(2)
        # One job floods its log: 3 MB into a 1 MB disk, then keeps its GPU a while.
        spam = cl.api("POST", "/jobs", json={"name": "spam", "gpus": 1, "command": [
            "sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; sleep 4; echo spam-done"]})["id"]  # fmt: skip
        full = wait_for(lambda: disk.free() == 0, 30, "the log disk full")
        filled = time.monotonic()
        flood = disk.path / f"{spam}.1.log"
        wait_for(lambda: not flood.exists(), 60, "the flood's log gone from the node (its job ended, the log shipped)")
        room_after = time.monotonic() - filled
        time.sleep(3)
        burst.stop()
        outcome, jobs = settle_and_check(cl, burst, "an agent's 1 MB log disk filled by a job", room_after)
        told = {j["id"]: _told_loss(cl, j) for j in jobs + [cl.api("GET", f"/jobs/{spam}")]}
        outcome.extra = {"jobs whose output was partly lost, and said so": sum(told.values())}
        assert_nothing_lost(outcome, jobs, burst, figure)
        spam_job = cl.api("GET", f"/jobs/{spam}")
        assert full and spam_job["state"] == "SUCCEEDED" and spam_job["exit_code"] == 0 and told[spam]
        for j in jobs:  # every job's log is its own line, or the job says what was lost (in its log or its reason)
            if j["state"] == "SUCCEEDED":
                assert job_log(cl, j["id"]) == f"ok-{j['name'].removeprefix('chaos-')}\n" or told[j["id"]], j
        # The node keeps no log the server holds: the disk is empty again.
        wait_for(lambda: not list(disk.path.iterdir()), 10, "the log disk emptied")
    finally:
        disk.close()
