"""Hostile review of slurm pools (issue 20): a member of tenant B, a join-token holder and a Unix user of the Slurm
cluster against tenant A's jobs on the pool, the batch script, the output files in log_dir and the cluster bridge.

Each test proves a defence and can fail. Where the defence does not hold, the test is written to fail and is marked
`xfail(strict=True)` with the finding as its reason; every finding of the first review was fixed, and its test
now proves the fix. All at unit level: the bridge against the store with an in-memory cluster, SlurmCliBackend
with a fake `_run` (no Slurm) and a temporary log_dir, the API through the real app."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from memory_cluster import MemoryCluster, bridge, cluster, make_bridge, place_job  # noqa: F401  (bridge, cluster: fixtures)
from node_certs import cert_headers
from pool_api import TenantApi, open_api

from corral.agent.identity import new_key_and_csr
from corral.api.schemas import AgentRegister
from corral.clusters.base import (
    FAILED,
    STARTED,
    SUCCEEDED,
    ClusterError,
    ClusterJob,
    ClusterNode,
    Submission,
)
from corral.clusters.slurm import SlurmCliBackend, build_script
from corral.core.errors import AuthError, ConflictError, ForbiddenError, ValidationError
from corral.core.models import JobSpec, compute_request
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.scheduler.filters import check_node_constraints
from corral.server.background.clusters import ClusterBridge
from corral.server.services.agents import register_node
from corral.server.services.identity import create_local_join_token, join_node
from corral.store.snapshot import compute_snapshot

T0 = datetime.now(UTC)
IS_ROOT = os.geteuid() == 0


# ---- an in-memory cluster (as in test_cluster_bridge.py), whose users may submit jobs of their own -----------------
# ==== 1. a join-token holder takes a Slurm node's identity =========================================================
class Api(TenantApi):
    pass


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with open_api(Api, database_url, tmp_path) as a:
        a.ctx.clusters.leading = lambda: False  # no real Slurm here: the bridge stays out of it
        yield a


SLURM_POOL = {"name": "hpc", "kind": "slurm", "provider": "", "instance_types": [], "labels": {}, "taints": [],
              "settings": {"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/corral-slurm"}}  # fmt: skip


def _slurm_node(api: Api, name: str = "hpc.n1") -> None:
    """What the bridge's inventory writes for a Slurm node (the pool's, source slurm)."""
    gpus = [GpuInfo(index=i, uuid=f"slurm-{name}-{i}", model="H100-80GB", memory_mib=81920) for i in range(4)]
    api.store.upsert_node(name, name.split(".", 1)[1], "slurm", 16000, 64000, {"pool": "hpc", "source": "slurm"},
                          gpus, datetime.now(UTC), runtimes=("process",))  # fmt: skip


def test_a_join_token_holder_cannot_become_a_slurm_node_and_take_its_jobs(api: Api) -> None:
    assert api.call("POST", "/pools", json=SLURM_POOL).status_code == 201, "pool"
    _slurm_node(api)
    alice = api.user("alice", "member", "vision")
    r = api.call("POST", "/secrets", auth=alice, json={"name": "hf", "value": "hf_TOPSECRET"})
    assert r.status_code == 201, r.text
    job = api.submit(alice, gpus=1, pool="hpc", command=["train", "--key=abc"], env={"WANDB": "x"},
                     secret_env={"HF_TOKEN": "hf"})  # fmt: skip
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    for _ in range(100):  # the scheduler places it on the Slurm node (tolerates `slurm`)
        if api.store.get_job(job_id).state is JobState.RUNNING:
            break
        time.sleep(0.05)
    else:
        api.store.assign_job_parts(job_id, [("hpc.n1", [0])], datetime.now(UTC))
    assert api.store.get_job(job_id).placed_parts[0][0] == "hpc.n1"
    # the attacker: one join token (any agent operator holds one), a CSR for the Slurm node's name
    token = create_local_join_token(api.store, api.ctx.ca, 3600, 1)
    _, csr = new_key_and_csr("hpc.n1")
    try:
        cert = join_node(api.store, api.ctx.ca, token, "hpc.n1", csr, timedelta(hours=1))
    except (ValidationError, ConflictError, AuthError, ForbiddenError):
        return  # the defence: a cluster node's name is never joined
    r = api.client.post("/api/v1/agents/hpc.n1/sync", json={"wait_s": 0}, headers=cert_headers(cert.pem))
    handed = r.json().get("assignments", []) if r.status_code == 200 else []
    assert handed == [], f"the fake agent got tenant A's job: {handed}"


def test_an_agent_cannot_squat_a_slurm_pool_name_before_the_inventory(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    with pytest.raises(ValidationError):  # the defence that holds: a name already read from the cluster
        register_node(store, AgentRegister(name="hpc.n1", backend="simulated", gpus=[]))
    squatted = True
    try:
        register_node(store, AgentRegister(name="hpc.n3", backend="simulated", gpus=[]))
    except ValidationError:
        squatted = False
    cluster.nodes.append(ClusterNode("n3", 8, "H100"))
    bridge.run_once(datetime.now(UTC))
    assert not squatted, "an agent took hpc.n3 before the inventory did"
    assert "hpc.n3" in bridge.cluster_nodes


# ==== 2. forged Slurm jobs named like Corral's ===================================================================
def test_a_cluster_users_job_named_like_corrals_does_not_stand_for_a_tenants_job(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = store.create_job(JobSpec(command=("train",), gpus=1), datetime.now(UTC)).id
    cluster.forge("666", job_id, 1, detail="PENDING (JobHeldUser)")  # submitted a moment before placement
    assert store.assign_job_parts(job_id, [("hpc.n1", [0])], datetime.now(UTC))
    bridge.run_once(datetime.now(UTC))
    cluster.move("666", SUCCEEDED, 0, "COMPLETED")  # the forger decides how tenant A's job ends
    bridge.run_once(datetime.now(UTC))
    assert any(s.job_id == job_id for s in cluster.subs.values()), "tenant A's job was never submitted"
    assert store.get_job(job_id).state is not JobState.SUCCEEDED


def test_a_forged_live_job_does_not_keep_a_finished_job_running(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=1)
    bridge.run_once(datetime.now(UTC))
    (mine,) = cluster.jobs
    cluster.move(mine, STARTED, detail="RUNNING")
    bridge.run_once(datetime.now(UTC))
    cluster.forge("667", job_id, 1, STARTED, detail="RUNNING")  # the forger's, running alongside
    cluster.move(mine, SUCCEEDED, 0, "COMPLETED")  # tenant A's own job ends
    bridge.run_once(datetime.now(UTC))
    job = store.get_job(job_id)
    assert job.state is JobState.SUCCEEDED and job.exit_code == 0


def test_old_corral_named_jobs_and_jobs_of_unknown_ids_are_left_alone(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    """The defence that holds: a same-named job made before this attempt was placed neither stands for it nor is
    cancelled; a name for a job id this server never made is not touched."""
    job_id = place_job(store, gpus=1)
    cluster.jobs["7"] = ClusterJob("7", job_id, 1, FAILED, 9, submitted_s=(T0 - timedelta(hours=1)).timestamp())
    cluster.forge("8", 10**9, 1, STARTED)
    bridge.run_once(datetime.now(UTC))
    assert any(s.job_id == job_id for s in cluster.subs.values())  # submitted despite the old one
    assert store.get_job(job_id).state is JobState.RUNNING
    assert "7" not in cluster.cancelled and "8" not in cluster.cancelled


def _fake_squeue(backend: SlurmCliBackend, jobs: list[dict[str, Any]], calls: list[list[str]]) -> None:
    def run(args: list[str], stdin: str | None = None) -> str:
        calls.append(list(args) + ([f"<stdin {len(stdin)}>"] if stdin is not None else []))
        if args[0] == "squeue":
            import json

            return json.dumps({"jobs": jobs})
        if args[0] == "sinfo":
            return '{"nodes": [{"name": "n1", "gres": "gpu:h100:4", "partitions": ["gpu"]}]}'
        if args[0] == "sbatch":
            return "4242\n"
        return ""

    backend._run = run  # type: ignore[method-assign]


def test_submit_is_not_idempotent_over_another_users_job_of_that_name(tmp_path: Path) -> None:
    log_dir = tmp_path / "out"
    b = SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(log_dir)})
    now = int(time.time())
    forged = {"job_id": 999, "name": "corral-5-1", "user_id": 6666, "submit_time": now, "job_state": "PENDING"}
    calls: list[list[str]] = []
    _fake_squeue(b, [forged], calls)
    got = b.submit(Submission(job_id=5, attempt=1, tenant="vision", command=("true",), uid=5555, gid=5555, uid_mapped=True,
                              since_s=now))  # fmt: skip
    assert got == "4242" and any(c[0] == "sbatch" for c in calls), f"took the forged job {got}"


# ==== 3. the batch script and sbatch's argv ======================================================================
def _first_command_line(script: str) -> int:
    """Where sbatch stops reading #SBATCH directives (Slurm's opt.c: the first line that is not blank/comment)."""
    for i, line in enumerate(script.splitlines()):
        s = line.strip()
        if s and not s.startswith("#"):
            return i
    return len(script.splitlines())


HOSTILE = [
    "$(touch {d}/pwn1)",
    "`touch {d}/pwn2`",
    "'; touch {d}/pwn3; '",
    '"; touch {d}/pwn4; "',
    "a\n#SBATCH --uid=0\n#SBATCH --output=/etc/passwd\ntouch {d}/pwn5",
    "\\'$(touch {d}/pwn6)",
    "${{IFS}}$(touch${{IFS}}{d}/pwn7)",
    "-a",
    "--",
    "x\x1b[2Jy",
]


def test_nothing_a_user_gives_runs_as_code_or_becomes_an_sbatch_directive(tmp_path: Path) -> None:
    d = tmp_path / "canary"
    d.mkdir()
    work = tmp_path / "w'; touch pwn8; 'd $(touch pwn9)"
    work.mkdir()
    values = [v.format(d=d) for v in HOSTILE]
    env = {f"V{i}": v for i, v in enumerate(values)}
    env.update({"BAD;touch x": "1", "A=B": "2", "$(touch y)": "3", "X\n#SBATCH --uid=0": "4"})
    sub = Submission(job_id=7, attempt=1, tenant="vision", command=("printf", "<%s>\\n", *values), env=env,
                     workdir=str(work), uid=5555, gid=5555, uid_mapped=True)  # fmt: skip
    script = build_script(sub, "/shared/out/corral-7-1.out")
    lines = script.splitlines()
    first = _first_command_line(script)
    assert first <= 2, lines[: first + 1]  # the first command comes before anything a user gave
    assert not any(ln.startswith("#SBATCH") for ln in lines[:first])  # no directive sbatch would read
    assert "BAD" not in script and "A=B" not in script and "touch y" not in script  # bad names are dropped
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                         timeout=10, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert list(d.iterdir()) == [] and not any(p.name.startswith("pwn") for p in work.iterdir())
    assert out.stdout == "".join(f"<{v}>\n" for v in values)  # every argument arrived as given
    env_script = build_script(replace(sub, command=("env",)), "/shared/out/corral-7-1.out")
    check = subprocess.run(["bash", "-c", env_script], capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"]}, timeout=10, check=False)  # fmt: skip
    for i, v in enumerate(values):
        assert f"V{i}={v}" in check.stdout
    assert "CORRAL_JOB_ID=7\n" in check.stdout and "CORRAL_ATTEMPT=1\n" in check.stdout


def test_a_multi_node_scripts_srun_line_keeps_the_command_quoted(tmp_path: Path) -> None:
    d = tmp_path / "canary"
    d.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho n1\necho n2\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    values = [v.format(d=d) for v in HOSTILE]
    sub = Submission(job_id=7, attempt=1, tenant="vision", command=("printf", "<%s>\\n", *values), nodes=2, gpus=1,
                     env={"E": "$(touch " + str(d) + "/pwn)"})  # fmt: skip
    script = build_script(sub, "/shared/out/corral-7-1.out")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
           "SLURM_JOB_NODELIST": "n[1-2]"}  # fmt: skip
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=10, check=False)
    assert out.returncode == 0, out.stderr
    assert list(d.iterdir()) == []
    assert out.stdout == "".join(f"<{v}>\n" for v in values)


def test_sbatch_argv_holds_no_user_text_as_an_option_of_its_own(tmp_path: Path) -> None:
    b = SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(tmp_path / "out")})
    calls: list[list[str]] = []
    _fake_squeue(b, [], calls)
    sub = Submission(job_id=9, attempt=2, tenant="vision", command=("--uid=0", "--wrap=id"),
                     env={"SBATCH_UID": "0"}, workdir="/tmp --uid=0 --wrap=id", gpus=1, gpu_model="--uid=0",
                     uid=5555, gid=5556, uid_mapped=True, time_limit_s=61)  # fmt: skip
    assert b.submit(sub) == "4242"
    (argv,) = [c for c in calls if c[0] == "sbatch"]
    assert [a for a in argv if a.startswith("--uid")] == ["--uid=5555"]
    assert [a for a in argv if a.startswith("--gid")] == ["--gid=5556"]
    assert "--wrap=id" not in argv and "--export=NIL" in argv and "--gres=gpu:1" in argv
    assert f"--chdir={sub.workdir}" in argv and "--time=2" in argv
    assert all(a.startswith("--") or a.startswith("<stdin") or a == "sbatch" for a in argv)


def test_service_mode_never_runs_a_job_as_root(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("the server must run as root for this one")
    settings = {"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(tmp_path / "out"), "submit_as": "service"}
    with pytest.raises(ValidationError, match="service_user"):  # a root server must name the account
        SlurmCliBackend(settings)
    with pytest.raises(ValidationError, match="never root"):
        SlurmCliBackend({**settings, "service_user": "root"})
    b = SlurmCliBackend({**settings, "service_user": "nobody"})
    calls: list[list[str]] = []
    _fake_squeue(b, [], calls)
    b.submit(Submission(job_id=3, attempt=1, tenant="vision", command=("id",), uid=5555, gid=5555, uid_mapped=True))
    (argv,) = [c for c in calls if c[0] == "sbatch"]
    assert [a for a in argv if a.startswith("--uid=")] == [f"--uid={pwd.getpwnam('nobody').pw_uid}"], argv


def test_an_unmapped_user_never_runs_under_a_guessed_uid_on_the_cluster(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    user = store.create_user("bob", "member", datetime.now(UTC))  # no `corral users unix` mapping
    job_id = place_job(store, gpus=1, user_id=user.id)
    bridge.run_once(datetime.now(UTC))
    (sub,) = [s for s in cluster.subs.values() if s.job_id == job_id]
    assert not sub.uid_mapped  # the bridge says the UID is Corral's own guess...
    b = SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(bridge.logs.root.parent / "out")})
    calls: list[list[str]] = []
    _fake_squeue(b, [], calls)
    with pytest.raises(ClusterError, match="no Unix account mapping"):  # ...and the Slurm backend never runs it so
        b.submit(sub)
    assert not [c for c in calls if c[0] == "sbatch"]


# ==== 4. the output files in log_dir ============================================================================
def _account(sub: Submission) -> tuple[int, int]:
    assert sub.uid is not None and sub.gid is not None
    return sub.uid, sub.gid


def _backend(log_dir: Path, **kw: str) -> SlurmCliBackend:
    return SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(log_dir), **kw})


def _sub(job_id: int = 5, uid: int = 5555) -> Submission:
    return Submission(job_id=job_id, attempt=1, tenant="vision", command=("true",), uid=uid, gid=uid, uid_mapped=True)


def test_the_output_file_is_made_0600_for_its_user_in_a_0755_dir(tmp_path: Path) -> None:
    log_dir = tmp_path / "out"
    b = _backend(log_dir)
    path = b.log_path("corral-5-1")
    b._prepare_log("corral-5-1", _account(_sub()))
    st = os.stat(path)
    assert stat.S_IMODE(os.stat(log_dir).st_mode) == 0o755 and stat.S_IMODE(st.st_mode) == 0o600
    if IS_ROOT:
        assert (st.st_uid, st.st_gid) == (5555, 5555)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
def test_a_log_dir_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    log_dir = tmp_path / "out"
    log_dir.mkdir()
    log_dir.chmod(mode)
    b = _backend(log_dir)
    with pytest.raises(ClusterError, match="log_dir"):
        b._prepare_log("corral-5-1", _account(_sub()))
    assert not (log_dir / "corral-5-1.out").exists()


@pytest.mark.skipif(not IS_ROOT, reason="chown needs root")
def test_a_log_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    log_dir = tmp_path / "out"
    log_dir.mkdir(mode=0o755)
    os.chown(log_dir, 6666, 6666)
    b = _backend(log_dir)
    with pytest.raises(ClusterError, match="log_dir"):
        b._prepare_log("corral-5-1", _account(_sub()))


def test_a_symlink_or_hard_link_at_the_output_name_is_never_followed(tmp_path: Path) -> None:
    log_dir = tmp_path / "out"
    log_dir.mkdir(mode=0o755)
    secret = tmp_path / "victim.out"
    secret.write_text("tenant A's output\n")
    secret.chmod(0o600)
    b = _backend(log_dir)
    (log_dir / "corral-5-1.out").symlink_to(secret)
    os.link(secret, log_dir / "corral-6-1.out")
    for name in ("corral-5-1", "corral-6-1"):  # the name is made anew: the link goes, what it pointed at stays
        made = b._prepare_log(name, _account(_sub(uid=6666)))
        st = os.lstat(made)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size == 0
    st = os.stat(secret)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()  # never chowned to the attacker
    assert secret.read_text() == "tenant A's output\n"
    b._names["77"] = "corral-5-1"
    assert b.read_log("77", 0, 1 << 20) == b""  # the server reads the new, empty file, never the victim's


def test_an_earlier_users_output_file_is_never_handed_to_the_next_job(tmp_path: Path) -> None:
    log_dir = tmp_path / "out"
    log_dir.mkdir(mode=0o755)
    old = log_dir / "corral-5-1.out"
    old.write_text("tenant A: password=hunter2\n")
    old.chmod(0o600)
    if IS_ROOT:
        os.chown(old, 5555, 5555)
    b = _backend(log_dir)
    try:
        b._prepare_log("corral-5-1", _account(_sub(uid=6666)))
    except ClusterError:
        return  # refused: the defence
    b._names["88"] = "corral-5-1"
    assert b"hunter2" not in b.read_log("88", 0, 1 << 20)


def test_a_log_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "root-owned-dir"  # e.g. /etc/bash_completion.d
    target.mkdir(mode=0o755)
    parent = tmp_path / "scratch"  # e.g. /tmp, a world-writable scratch file system
    parent.mkdir()
    parent.chmod(0o1777)
    (parent / "corral-out").symlink_to(target)  # made by the attacker before the server's first job
    b = _backend(parent / "corral-out")
    try:
        b._prepare_log("corral-5-1", _account(_sub()))
    except ClusterError:
        return
    assert not (target / "corral-5-1.out").exists(), "the server made the job's file in the link's target"


# ==== 5. exhausting the server through output =====================================================================
def test_a_runs_log_from_the_cluster_is_capped(store: Any, cluster: MemoryCluster, tmp_path: Path) -> None:
    bridge = make_bridge(store, tmp_path, max_log=1 << 20)
    job_id = place_job(store, gpus=1)
    bridge.run_once(datetime.now(UTC))
    (ext,) = cluster.jobs
    cluster.move(ext, STARTED)
    cluster.logs[ext] = b"y\n" * (4 << 20)  # 8 MB (a sparse `truncate -s 1T` reads the same)
    for _ in range(12):
        bridge.run_once(datetime.now(UTC))
    assert bridge.logs.run_size(job_id, 1) <= (1 << 20) + (64 << 10)


def test_a_capped_log_is_not_read_again_every_pass(store: Any, cluster: MemoryCluster, tmp_path: Path) -> None:
    bridge = make_bridge(store, tmp_path, max_log=1 << 20)
    job_id = place_job(store, gpus=1)
    bridge.run_once(datetime.now(UTC))
    (ext,) = cluster.jobs
    cluster.move(ext, STARTED)
    cluster.logs[ext] = b"y\n" * (4 << 20)
    for _ in range(4):
        bridge.run_once(datetime.now(UTC))
    assert bridge.logs.run_size(job_id, 1) > 1 << 20  # capped now
    cluster.reads.clear()
    for _ in range(10):
        bridge.run_once(datetime.now(UTC))
    read = sum(len(cluster.logs[e][o : o + n]) for e, o, n in cluster.reads)
    assert read < 1 << 20, f"{read >> 20} MB read in 10 passes of a capped log"


# ==== 6. the scheduler keeps agent-only and container jobs off Slurm nodes =========================================
def _slurm_state(store: Any, bridge: ClusterBridge) -> Any:
    return next(s for s in compute_snapshot(store.list_nodes(), []) if s.info.name == "hpc.n1")


def test_container_jobs_never_fit_a_slurm_node_even_tolerating_it(store: Any, bridge: ClusterBridge) -> None:
    from corral.core.containers import ContainerSpec

    node = _slurm_state(store, bridge)
    for tol in ((), ("slurm",), ("slurm", "kubernetes")):
        spec = JobSpec(command=("x",), gpus=1, container=ContainerSpec(image="reg/a:1"), tolerations=tol)
        assert not check_node_constraints(node, compute_request(spec)).ok
    assert check_node_constraints(node, compute_request(JobSpec(command=("x",), gpus=1))).ok


def test_a_users_own_slurm_toleration_does_not_put_agent_only_jobs_on_slurm(store: Any, bridge: ClusterBridge) -> None:
    """Found in this review (a user's own `tolerations: ["slurm"]` added to compute_cluster_tolerations put web-UI
    and staged jobs on Slurm nodes) and fixed meanwhile in eb7002d (core/models.py compute_request strips them)."""
    from corral.core.staging import parse_stage_out

    node = _slurm_state(store, bridge)
    for kw in ({"port": 0}, {"stage_out": (parse_stage_out("out/:s3://bucket/x/"),)}):
        plain = JobSpec(command=("x",), gpus=1, **kw)
        assert not check_node_constraints(node, compute_request(plain)).ok  # the defence, without the trick
        tolerating = JobSpec(command=("x",), gpus=1, tolerations=("slurm",), **kw)
        assert not check_node_constraints(node, compute_request(tolerating)).ok, f"{kw} fits a Slurm node"


# ==== 7. what another tenant's member sees ======================================================================
def test_members_see_no_pool_settings_events_or_other_tenants_slurm_jobs(api: Api) -> None:
    assert api.call("POST", "/pools", json=SLURM_POOL).status_code == 201
    _slurm_node(api)
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "nlp")
    job = api.submit(alice, gpus=1, pool="hpc", command=["train", "--secret-arg"])
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    api.store.add_pool_events([("hpc", "", "unreachable", "sbatch failed: /etc/slurm/slurm.conf")], datetime.now(UTC))
    api.store.set_job_phase(job_id, 1, "queued in slurm (1234): PENDING (Resources)")
    for path in ("/pools", "/pools/hpc", "/pools/hpc?events=true"):
        r = api.call("GET", path, auth=bob)
        assert r.status_code == 200 and "slurm.conf" not in r.text and "/srv/corral-slurm" not in r.text, path
        assert "--secret-arg" not in r.text and "1234" not in r.text
    assert api.call("GET", f"/jobs/{job_id}", auth=bob).status_code in (403, 404)
    assert api.call("GET", f"/jobs/{job_id}/logs", auth=bob).status_code in (403, 404)
    assert api.call("POST", f"/jobs/{job_id}/cancel", auth=bob).status_code in (403, 404)
    listed = api.call("GET", "/jobs", auth=bob)
    assert listed.status_code == 200 and "--secret-arg" not in listed.text
    for path in ("/nodes", "/nodes/hpc.n1", "/gpus?node=hpc.n1", "/nodes/hpc.n1/events"):
        r = api.call("GET", path, auth=bob)
        assert r.status_code == 200 and "--secret-arg" not in r.text and f'"job_id":{job_id}' not in r.text, path
    assert api.store.get_job(job_id).state in (JobState.PENDING, JobState.RUNNING)


def test_the_bridge_cancels_only_jobs_it_submitted(store: Any, bridge: ClusterBridge, cluster: MemoryCluster) -> None:
    job_id = place_job(store, gpus=1)
    bridge.run_once(datetime.now(UTC))
    (mine,) = cluster.jobs
    cluster.move(mine, SUCCEEDED, 0, "COMPLETED")
    bridge.run_once(datetime.now(UTC))
    assert store.get_job(job_id).state is JobState.SUCCEEDED
    cluster.forge("900", job_id, 1, STARTED, detail="RUNNING")  # another cluster user's job of that name
    bridge.run_once(datetime.now(UTC))
    assert "900" not in cluster.cancelled


def test_sbatch_tells_the_cluster_no_tenant_name(tmp_path: Path) -> None:
    b = SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(tmp_path / "out")})
    calls: list[list[str]] = []
    _fake_squeue(b, [], calls)
    b.submit(
        Submission(
            job_id=9, attempt=1, tenant="secret-project-x", command=("true",), uid=5555, gid=5555, uid_mapped=True
        )
    )
    (argv,) = [c for c in calls if c[0] == "sbatch"]
    assert not any("secret-project-x" in a for a in argv)
