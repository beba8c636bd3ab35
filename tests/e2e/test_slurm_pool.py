"""A slurm pool end to end, on a real Slurm 22.05 cluster (tests/slurm_cluster.py: slurmctld + a slurmd per fake
node, 2 nodes x 4 fake GPUs) in front of which runs a real `corral up` whose own node has no GPUs: every GPU job
goes to Slurm. Corral reads the cluster's nodes into its inventory, admits jobs by its own rules (quotas), hands
them to `sbatch` and follows them back: the CUDA_VISIBLE_DEVICES Slurm gave, exit codes, a 2-node job, logs while
they grow, cancel (`scancel`), and a Corral server killed mid-job that finds its job again by name. Jobs run as
their users' mapped Unix accounts (`sbatch --uid`), and nothing of the server's environment reaches them."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from realparts import missing_real_part
from slurm_cluster import PACKAGES, SlurmCluster, missing_tools

from .conftest import Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("slurm")]  # one Slurm cluster: one worker runs them all
STARTED = [0.0]  # when this test's installation started
ACCOUNTS = {"corral-slurm-a": 61001, "corral-slurm-b": 61002}  # Unix accounts the jobs run as (made here)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_tools()
    if missing:
        missing_real_part(f"Slurm ({', '.join(missing)})", f"make slurm-deps (apt-get install {PACKAGES})")
    if os.geteuid() != 0:
        missing_real_part("root for a local Slurm cluster", "run the Slurm tests as root (slurmd runs jobs as users)")
    for name, uid in ACCOUNTS.items():
        try:
            pwd.getpwnam(name)
        except KeyError:  # its own group with gid == uid (the mapping's default gid)
            subprocess.run(["groupadd", "-f", "-g", str(uid), name], check=True)
            subprocess.run(["useradd", "-M", "-K", "UID_MAX=70000", "-u", str(uid), "-g", str(uid), name], check=True)
    root = Path("/tmp") / f"corral-slurm-{os.getpid()}"  # slurmd's spool must be reachable by the job users
    cluster = SlurmCluster(root, nodes=2, gpus=4)
    try:
        cluster.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        missing_real_part(f"a running Slurm cluster ({e})", f"see {root}/log; make slurm-deps")
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


def _corral(corral_factory: Any, slurm: SlurmCluster) -> tuple[Corral, Path]:
    c: Corral = corral_factory(gpus="none")  # the server's own node has no GPUs: GPU jobs go to Slurm
    STARTED[0] = time.time()
    c.start()
    log_dir = c.jobs_dir / "slurm-out"
    r = c.cli(
        "pool", "create", "hpc", "--kind", "slurm", "--setting", f"slurm_conf={slurm.conf}",
        "--setting", f"log_dir={log_dir}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = c.cli("users", "unix", "admin", "--uid", str(ACCOUNTS["corral-slurm-a"]))
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len([n for n in c.cli_json("nodes") if n["source"] == "slurm"]) == 2, 30, "slurm nodes read")
    return c, log_dir


def _member(c: Corral, name: str, tenant: str, unix_uid: int | None = None) -> dict[str, str]:
    """A member of `tenant` (made if new), logged in: the environment its CLI runs with."""
    c.cli("tenants", "create", tenant)
    r = c.cli(
        "users", "create", name, "--tenant", tenant, "--password", env=dict(c.env, CORRAL_PASSWORD=f"{name}-pw-123")
    )
    assert r.returncode == 0, r.stderr
    if unix_uid is not None:
        assert c.cli("users", "unix", name, "--uid", str(unix_uid)).returncode == 0
    home = c.root / name
    env = {k: v for k, v in c.env.items() if k != "CORRAL_PORT"}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CORRAL_URL=c.url)
    r = c.cli("login", name, env=dict(env, CORRAL_PASSWORD=f"{name}-pw-123"))
    assert r.returncode == 0, r.stderr
    return env


def _submit_as(c: Corral, env: dict[str, str], *args: str) -> int:
    r = c.cli("submit", *args, env=env)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def _slurm_jobs(slurm: SlurmCluster, name: str) -> list[tuple[str, str]]:
    """(Slurm job id, state) of this module's jobs named `name`, made since the test began (an earlier test's
    installation had job ids, and so names, of its own: Slurm keeps ended jobs for MinJobAge)."""
    r = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i %T %V"], env=slurm.env,
                       capture_output=True, text=True, check=True)  # fmt: skip
    out = []
    for line in r.stdout.splitlines():
        job_id, state, submitted = line.split()
        if datetime.fromisoformat(submitted).timestamp() >= STARTED[0] - 1:
            out.append((job_id, state))
    return out


def _ended(c: Corral, job: int, timeout_s: float = 60) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := c.job(job))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and j, timeout_s, f"job {job} ends"
    )


def test_inventory_gpus_exit_codes_and_a_two_node_job(corral_factory: Any, slurm: SlurmCluster) -> None:
    c, log_dir = _corral(corral_factory, slurm)
    nodes = {n["name"]: n for n in c.cli_json("nodes")}
    assert {"hpc.node1", "hpc.node2"} <= set(nodes)
    for name in ("hpc.node1", "hpc.node2"):
        assert nodes[name]["pool"] == "hpc" and nodes[name]["source"] == "slurm", nodes[name]
        assert nodes[name]["gpus_total"] == 4 and nodes[name]["backend"] == "slurm"
    table = c.cli("nodes").stdout
    assert "hpc/slurm" in table, table
    pool = c.cli_json("pools")
    hpc = next(p for p in pool if p["name"] == "hpc")
    assert hpc["kind"] == "slurm" and hpc["gpus"] == 8 and hpc["node_count"] == 2, hpc

    os.environ["CORRAL_TEST_SERVER_ONLY"] = "leak-me"  # never in a job's environment (sbatch --export=NIL)
    script = 'echo "CVD=$CUDA_VISIBLE_DEVICES user=$(id -un) leak=${CORRAL_TEST_SERVER_ONLY:-none} a=$CORRAL_ATTEMPT"'
    two = c.submit("--gpus", "2", "--name", "two-gpus", "--env", "GREETING=hi there", "--",
                   "bash", "-c", script + '; echo "greeting=$GREETING"')  # fmt: skip
    fails = c.submit("--gpus", "1", "--", "bash", "-c", "echo failing; exit 3")
    gang = c.submit(
        "--gpus", "1", "--nodes", "2", "--", "bash", "-c", 'echo "rank=$CORRAL_NODE_RANK of $CORRAL_NUM_NODES"'
    )
    done = _ended(c, two)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0, (done["reason"], done["phase"])
    assert done["node"].startswith("hpc.node"), done
    out = c.cli("logs", str(two)).stdout
    cvd = out.split("CVD=")[1].split()[0]
    assert len(cvd.split(",")) == 2 and all(x.isdigit() for x in cvd.split(",")), out  # the GPUs Slurm gave it
    assert done["gpus"] == [int(x) for x in cvd.split(",")], done  # and Corral shows those
    assert "user=corral-slurm-a" in out and "leak=none" in out and "a=1" in out, out
    assert "greeting=hi there" in out, out
    assert [s for _, s in _slurm_jobs(slurm, f"corral-{two}-1")] == ["COMPLETED"]
    # its output file in the shared log dir: the job's user's, no one else's
    st = (log_dir / f"corral-{two}-1.out").stat()
    assert st.st_uid == ACCOUNTS["corral-slurm-a"] and st.st_mode & 0o077 == 0

    failed = _ended(c, fails)
    assert failed["state"] == "FAILED" and failed["exit_code"] == 3, failed
    assert "NonZeroExitCode" in failed["reason"], failed
    assert c.cli("logs", str(fails)).stdout == "failing\n"

    g = _ended(c, gang)
    assert g["state"] == "SUCCEEDED", g
    lines = sorted(c.cli("logs", str(gang)).stdout.splitlines())
    assert lines == ["rank=0 of 2", "rank=1 of 2"], lines


def test_logs_follow_and_cancel_through_scancel(corral_factory: Any, slurm: SlurmCluster) -> None:
    c, _ = _corral(corral_factory, slurm)
    talker = c.submit("--gpus", "1", "--", "bash", "-c", "for i in 1 2 3 4; do echo line $i; sleep 1; done")
    wait_for(
        lambda: (j := c.job(talker))["state"] == "RUNNING" or print(j["pending_reason"], j["phase"]), 30, "running"
    )
    follow = c.cli("logs", "--follow", str(talker), timeout_s=60)
    assert follow.stdout.splitlines() == ["line 1", "line 2", "line 3", "line 4"], follow

    sleeper = c.submit("--gpus", "1", "--", "sleep", "300")
    wait_for(lambda: [s for _, s in _slurm_jobs(slurm, f"corral-{sleeper}-1")] == ["RUNNING"], 30, "running in slurm")
    wait_for(lambda: not c.job(sleeper)["phase"], 10, "no phase once Slurm runs it")
    assert c.cli("cancel", str(sleeper)).returncode == 0
    ended = _ended(c, sleeper, 30)
    assert ended["state"] == "CANCELLED", ended
    wait_for(lambda: [s for _, s in _slurm_jobs(slurm, f"corral-{sleeper}-1")] == ["CANCELLED"], 30, "scancelled")


def test_a_server_killed_mid_job_finds_it_again_by_name(corral_factory: Any, slurm: SlurmCluster) -> None:
    c, _ = _corral(corral_factory, slurm)
    job = c.submit("--gpus", "1", "--", "bash", "-c", "sleep 6; echo survived")
    wait_for(lambda: [s for _, s in _slurm_jobs(slurm, f"corral-{job}-1")] == ["RUNNING"], 30, "running in slurm")
    c.kill9()
    time.sleep(1)
    c.start()
    done = _ended(c, job, 60)
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 1, done
    assert c.cli("logs", str(job)).stdout == "survived\n"
    assert len(_slurm_jobs(slurm, f"corral-{job}-1")) == 1  # submitted once, not again after the restart


def test_a_slurm_controller_restart_mid_job_fails_nothing(corral_factory: Any, slurm: SlurmCluster) -> None:
    c, _ = _corral(corral_factory, slurm)
    job = c.submit("--gpus", "1", "--", "bash", "-c", "sleep 6; echo through the restart")
    wait_for(lambda: [s for _, s in _slurm_jobs(slurm, f"corral-{job}-1")] == ["RUNNING"], 30, "running in slurm")
    slurm.stop_controller()
    try:
        # the bridge cannot reach Slurm (its tools time out): the pool says why, and the job keeps running
        wait_for(lambda: any(e["kind"] == "unreachable" for e in c.cli_json("pool", "show", "hpc")["events"]),
                 60, "the pool says Slurm is out of reach")  # fmt: skip
        assert c.job(job)["state"] == "RUNNING"
    finally:
        slurm.start_controller()
    done = _ended(c, job, 90)
    assert done["state"] == "SUCCEEDED", (done["reason"], done["phase"])
    assert c.cli("logs", str(job)).stdout == "through the restart\n"
    assert len(_slurm_jobs(slurm, f"corral-{job}-1")) == 1


def test_a_tenant_over_its_quota_waits_in_corral_while_slurm_has_room(corral_factory: Any, slurm: SlurmCluster) -> None:
    c, _ = _corral(corral_factory, slurm)
    assert c.cli("tenants", "create", "team-b").returncode == 0
    assert c.cli("tenants", "quota", "team-b", "--guaranteed", "0", "--max", "2").returncode == 0
    bob = _member(c, "bob", "team-b", unix_uid=ACCOUNTS["corral-slurm-b"])
    first = _submit_as(c, bob, "--gpus", "2", "--", "sleep", "20")
    second = _submit_as(c, bob, "--gpus", "2", "--", "true")
    wait_for(lambda: c.job(first)["state"] == "RUNNING", 30, "the first runs")
    time.sleep(3)
    waiting = c.job(second)
    assert waiting["state"] == "PENDING", waiting
    assert "quota" in waiting["pending_reason"].lower() or "max" in waiting["pending_reason"].lower(), waiting
    assert _slurm_jobs(slurm, f"corral-{second}-1") == []  # Slurm never saw it
    idle = subprocess.run(["sinfo", "-h", "-o", "%G %t"], env=slurm.env, capture_output=True, text=True).stdout
    assert "idle" in idle or "mix" in idle, idle  # while the Slurm cluster has room

    # the other tenant's member cannot see, stop or read this job; an agent cannot take a Slurm node's name
    carol = _member(c, "carol", "team-c")
    r = c.cli("cancel", str(first), env=carol)
    assert r.returncode != 0 and "not found" in r.stderr, r.stderr
    assert c.cli("logs", str(first), env=carol).returncode != 0
    assert c.cli("cancel", str(first)).returncode == 0
    _ended(c, first)
    c.start_agent("hpc.node1", "sim:1xL4-24GB")
    time.sleep(4)
    taken = next(n for n in c.cli_json("nodes") if n["name"] == "hpc.node1")
    assert taken["source"] == "slurm" and taken["gpus_total"] == 4, taken
