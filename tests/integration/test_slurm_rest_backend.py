"""The slurmrestd backend (corral.clusters.slurm_rest) against a real Slurm 22.05 cluster and a real slurmrestd with
JWT auth (tests/slurm_cluster.py: slurmctld + a slurmd per fake node, 2 nodes x 4 fake GPUs, slurmrestd as an
unprivileged user on a free port): the inventory from the nodes' GRES, a 2-GPU job that sees the GPUs Slurm gave it
(and Corral's placement says the same), exit codes 0 and 3, cancel, submit idempotent by name, a wrong token (a
refusal, not transient) and a cluster out of reach (slurmrestd down, or slurmctld down behind it: transient)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from corral.clusters.base import (
    CANCELLED,
    FAILED,
    STARTED,
    SUCCEEDED,
    ClusterBackend,
    ClusterError,
    ClusterJob,
    Submission,
)
from corral.clusters.registry import check_cluster_settings
from corral.clusters.slurm import SlurmCliBackend
from corral.clusters.slurm_rest import SlurmRestBackend, slurm_backend
from corral.core.errors import ValidationError
from realparts import missing_real_part
from slurm_cluster import PACKAGES, REST_PACKAGES, SlurmCluster, missing_rest_parts, missing_tools

pytestmark = [pytest.mark.xdist_group("slurm")]  # with the other Slurm tests: one worker, one cluster at a time
USER, UID = "corral-slurm-rest", 61003  # the Slurm user the token is for: every job runs as it (made here)
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    missing = missing_tools() + missing_rest_parts()
    if missing:
        missing_real_part(
            f"Slurm with slurmrestd and JWT auth ({', '.join(missing)})",
            f"make slurm-deps (apt-get install {PACKAGES} {REST_PACKAGES})",
        )
    if os.geteuid() != 0:
        missing_real_part("root for a local Slurm cluster", "run the Slurm tests as root (slurmd runs jobs as users)")
    _ensure_account(USER, UID)
    root = Path("/tmp") / f"corral-slurm-rest-{os.getpid()}"  # the job's user must reach log_dir (under root)
    shutil.rmtree(root, ignore_errors=True)
    c = SlurmCluster(root, nodes=2, gpus=4, jwt=True)
    try:
        c.start()
        c.start_rest()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        c.stop()
        missing_real_part(f"a running Slurm cluster with slurmrestd ({e})", f"see {root}/log; make slurm-deps")
    yield c
    c.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def token_file(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("slurm-rest") / "token"
    path.write_text(f"SLURM_JWT={cluster.token(USER)}\n")  # as `scontrol token` prints it
    return path


@pytest.fixture
def good_token(cluster: SlurmCluster, token_file: Path) -> Iterator[str]:
    """The valid token, put back in token_file after the test (tests that rotate it)."""
    text = token_file.read_text()
    yield text.strip().removeprefix("SLURM_JWT=")
    token_file.write_text(text)


def _settings(cluster: SlurmCluster, token_file: Path, **more: str) -> dict[str, str]:
    return {
        "rest_url": cluster.rest_url,
        "token_file": str(token_file),
        "user_name": USER,
        "log_dir": str(cluster.root / "out"),
        **more,
    }


def _backend(cluster: SlurmCluster, token_file: Path, **more: str) -> SlurmRestBackend:
    b = slurm_backend(_settings(cluster, token_file, **more))
    assert isinstance(b, SlurmRestBackend)
    return b


def _ensure_account(name: str, uid: int) -> None:
    try:
        pwd.getpwnam(name)
        return
    except KeyError:
        pass
    for _ in range(20):  # another test may hold /etc/passwd's lock a moment
        subprocess.run(["groupadd", "-f", "-g", str(uid), name], check=False)
        r = subprocess.run(["useradd", "-M", "-K", "UID_MAX=70000", "-u", str(uid), "-g", str(uid), name],
                           capture_output=True, check=False)  # fmt: skip
        if r.returncode in (0, 9):  # 9: it exists now
            return
        time.sleep(0.5)
    raise RuntimeError(f"useradd {name} failed: {r.stderr!r}")


def _wait(fn: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _job(b: SlurmRestBackend, ext: str) -> ClusterJob | None:
    return next((j for j in b.list_jobs() if j.external_id == ext), None)


def _ended(b: SlurmRestBackend, ext: str, timeout_s: float = 60) -> ClusterJob:
    return _wait(lambda: (j := _job(b, ext)) is not None and j.ended and j or None, timeout_s, f"job {ext} ends")


def _forged_token(user: str) -> str:
    """A well-formed HS256 JWT for `user`, valid for an hour, signed with a key that is not the cluster's."""

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now = int(time.time())
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"exp": now + 3600, "iat": now, "sun": user}).encode())
    sig = hmac.new(os.urandom(32), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


# ---- settings (no cluster needed) ----


def test_settings_pick_the_rest_backend_and_refuse_what_it_cannot_do(tmp_path: Path) -> None:
    ok = {"rest_url": "https://slurm.example:6820", "token_file": "/etc/corral/slurm.jwt", "user_name": "corral",
          "log_dir": "/srv/corral-slurm"}  # fmt: skip
    assert check_cluster_settings("slurm", ok) == ok
    assert check_cluster_settings("slurm", {**ok, "submit_as": "service", "partitions": "gpu,a100"})
    b = slurm_backend(ok)
    assert isinstance(b, SlurmRestBackend) and isinstance(b, ClusterBackend) and b.kind == "slurm"
    b.close()
    cli = slurm_backend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/corral-slurm"})
    assert isinstance(cli, SlurmCliBackend)
    bad = [
        ({**ok, "submit_as": "job-user"}, "settings.submit_as", "user_name"),
        ({**ok, "slurm_conf": "/etc/slurm/slurm.conf"}, "settings.rest_url", "not both"),
        ({**ok, "bin_dir": "/usr/bin"}, "settings.rest_url", "not both"),
        ({k: v for k, v in ok.items() if k != "token_file"}, "settings.token_file", "absolute"),
        ({**ok, "token_file": "slurm.jwt"}, "settings.token_file", "absolute"),
        ({k: v for k, v in ok.items() if k != "user_name"}, "settings.user_name", "Slurm user"),
        ({**ok, "user_name": "a b"}, "settings.user_name", "Slurm user"),
        ({**ok, "rest_url": "ftp://slurm:6820"}, "settings.rest_url", "http"),
        ({**ok, "rest_url": "http://u:p@slurm:6820"}, "settings.rest_url", "http"),
        ({**ok, "rest_url": "http://slurm:99999"}, "settings.rest_url", "http"),
        ({**ok, "rest_url": "http://slurm:6820/?x=1"}, "settings.rest_url", "http"),
        ({**ok, "log_dir": "rel"}, "settings.log_dir", "absolute"),
        ({**ok, "partitions": "a b"}, "settings.partitions", "partition"),
        ({**ok, "account": "a;b"}, "settings.account", "letters"),
        ({**ok, "x": "1"}, "settings.x", "rest_url"),
        ({**ok, "service_user": "svc"}, "settings.service_user", "user_name"),
        (
            {"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/x", "token_file": "/t"},
            "settings.token_file",
            "rest_url",
        ),  # fmt: skip
    ]
    for settings, field, words in bad:
        with pytest.raises(ValidationError) as e:
            check_cluster_settings("slurm", settings)
        assert e.value.field == field and words in e.value.message, (settings, e.value.field, e.value.message)
    with pytest.raises(ValidationError):
        SlurmRestBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/x"})


# ---- on the cluster ----


def test_nodes_and_their_gpus_come_from_gres(cluster: SlurmCluster, token_file: Path) -> None:
    b = _backend(cluster, token_file)
    nodes = {n.name: n for n in b.list_nodes()}
    assert set(nodes) == {"node1", "node2"}, nodes
    for n in nodes.values():
        assert (n.gpus, n.cpus, n.memory_mib, n.state) == (4, 16, 64000, "up"), n
        assert n.labels["slurm.partitions"] == "gpu" and n.gpu_model == "", n
    assert {n.gpu_model for n in _backend(cluster, token_file, gpu_model="A100-80GB").list_nodes()} == {"A100-80GB"}
    assert _backend(cluster, token_file, partitions="other").list_nodes() == []


def test_a_two_gpu_job_sees_the_gpus_slurm_gave_and_exit_codes_come_back(
    cluster: SlurmCluster, token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TEST_SERVER_ONLY", "leak-me")  # never in a job's environment
    b = _backend(cluster, token_file)
    now = time.time()
    script = 'echo "CVD=$CUDA_VISIBLE_DEVICES user=$(id -un) leak=${CORRAL_TEST_SERVER_ONLY:-none} g=$GREETING"'
    two = Submission(job_id=101, attempt=1, tenant="vision", env={"GREETING": "hi there"}, gpus=2, since_s=now,
                     command=("bash", "-c", script + "; echo to-stderr >&2; sleep 4"))  # fmt: skip
    fails = Submission(job_id=102, attempt=2, tenant="vision", gpus=1, since_s=now,
                       command=("bash", "-c", "echo failing; exit 3"))  # fmt: skip
    ext_two, ext_fails = b.submit(two), b.submit(fails)
    assert ext_two.isdigit() and ext_fails.isdigit() and ext_two != ext_fails

    running = _wait(lambda: (j := _job(b, ext_two)) is not None and j.state == STARTED and j or None, 30, "running")
    assert (running.job_id, running.attempt, running.exit_code) == (101, 1, None), running
    [(node, gpus)] = running.placement.items()
    assert node in ("node1", "node2") and len(gpus) == 2, running.placement

    done, failed = _ended(b, ext_two), _ended(b, ext_fails)
    assert (done.state, done.exit_code, done.detail) == (SUCCEEDED, 0, "COMPLETED"), done
    assert (failed.state, failed.exit_code, failed.job_id, failed.attempt) == (FAILED, 3, 102, 2), failed
    assert failed.detail.startswith("FAILED"), failed
    for j in (done, failed):
        assert j.submitted_s is not None and now - 5 <= j.submitted_s <= time.time() + 5, j

    out = b.read_log(ext_two, 0, 1 << 20).decode()
    cvd = out.split("CVD=")[1].split()[0]
    assert tuple(int(x) for x in cvd.split(",")) == gpus, (out, gpus)  # the GPUs Slurm gave, as Corral read them
    assert f"user={USER}" in out and "leak=none" in out and "g=hi there" in out and "to-stderr" in out, out
    assert b.read_log(ext_two, 4, 3) == out.encode()[4:7] and b.read_log(ext_two, len(out), 10) == b""
    assert "failing" in b.read_log(ext_fails, 0, 1000).decode()
    path = cluster.root / "out" / "corral-101-1.out"  # made by the backend: 0600, the job user's
    st = path.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, UID, UID), st

    fresh = _backend(cluster, token_file)  # a restarted server: finds its jobs by name, and their output
    assert fresh.read_log(ext_two, 0, 100) == b""
    assert {j.external_id: j.state for j in fresh.list_jobs()}[ext_two] == SUCCEEDED
    assert fresh.read_log(ext_two, 0, 1 << 20).decode() == out


def test_cancel_stops_a_job_and_is_idempotent(cluster: SlurmCluster, token_file: Path) -> None:
    b = _backend(cluster, token_file)
    ext = b.submit(Submission(job_id=104, attempt=1, tenant="t", gpus=1, command=("sleep", "300"), since_s=time.time()))
    _wait(lambda: (j := _job(b, ext)) is not None and j.state == STARTED, 30, "running")
    b.cancel(ext)
    gone = _ended(b, ext, 30)
    assert gone.state == CANCELLED and gone.detail.startswith("CANCELLED"), gone
    b.cancel(ext)  # ended: not an error
    b.cancel("67000000")  # never was
    with pytest.raises(ClusterError, match="not a Slurm job id"):
        b.cancel("12; rm")


def test_submit_is_idempotent_by_name(cluster: SlurmCluster, token_file: Path) -> None:
    b = _backend(cluster, token_file)
    sub = Submission(job_id=103, attempt=1, tenant="t", command=("sleep", "2"), since_s=time.time())
    first = b.submit(sub)
    assert b.submit(sub) == first  # asked slurmrestd again: that name is there
    after_restart = _backend(cluster, token_file)
    assert after_restart.submit(sub) == first
    after_restart.list_jobs()  # with a fresh listing that has the name, it asks again and finds it
    assert after_restart.submit(sub) == first
    later = replace(sub, since_s=time.time() + 120)  # a job of that name from before this attempt was placed
    second = b.submit(later)
    assert second != first
    assert sorted(j.external_id for j in b.list_jobs() if (j.job_id, j.attempt) == (103, 1)) == sorted([first, second])
    assert {j.uid for j in b.list_jobs()} == {UID} and b.runs_as(12345) == UID  # every job runs as user_name


def test_a_job_of_another_user_named_like_corrals_is_not_taken_for_its(cluster: SlurmCluster, token_file: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    since = time.time()
    theirs = cluster.sbatch("--job-name=corral-107-1", f"--uid={nobody.pw_uid}", f"--gid={nobody.pw_gid}",
                            "--output=/dev/null", "--chdir=/tmp", script="#!/bin/bash\nsleep 30\n")  # fmt: skip
    b = _backend(cluster, token_file)
    assert theirs not in {j.external_id for j in b.list_jobs()}  # neither followed nor stopped
    ours = b.submit(Submission(job_id=107, attempt=1, tenant="t", command=("true",), since_s=since))
    assert ours != theirs
    assert [j.external_id for j in b.list_jobs() if j.job_id == 107] == [ours]
    subprocess.run(["scancel", theirs], env=cluster.env, check=False)


def test_a_wrong_token_is_a_clear_refusal_not_transient(
    cluster: SlurmCluster, token_file: Path, good_token: str
) -> None:
    b = _backend(cluster, token_file)
    sub = Submission(job_id=105, attempt=1, tenant="t", command=("true",), since_s=time.time())
    forged = _forged_token(USER)  # well formed, for this user, not signed with this cluster's key
    token_file.write_text(forged + "\n")  # rotated in place: read at the next call
    calls: list[Callable[[], Any]] = [b.list_nodes, b.list_jobs, lambda: b.submit(sub), lambda: b.cancel("67000000")]
    for call in calls:
        with pytest.raises(ClusterError) as e:
            call()
        assert not e.value.transient and "refused the token" in str(e.value), e.value
        assert forged not in str(e.value) and forged.split(".")[2] not in str(e.value)

    cases = [
        (cluster.token("root"), "is for Slurm user 'root'"),
        (cluster.token(USER, lifespan_s=1), "expired at"),
        ("not-a-token", "holds no JWT"),
        ("", "holds no JWT"),
    ]
    for token, words in cases:
        if words == "expired at":
            time.sleep(1.5)
        token_file.write_text(token)
        with pytest.raises(ClusterError) as e:
            b.list_nodes()
        assert not e.value.transient and words in str(e.value), e.value
        assert not token or token not in str(e.value)
    missing = _backend(cluster, token_file.parent / "no-such-token")
    with pytest.raises(ClusterError, match="cannot read token_file") as e:
        missing.list_jobs()
    assert not e.value.transient

    token_file.write_text(good_token)  # a token rotated back: the same backend works again
    assert len(b.list_nodes()) == 2


def test_slurmrestd_down_is_transient(cluster: SlurmCluster, token_file: Path) -> None:
    b = _backend(cluster, token_file)
    assert b.list_jobs() is not None
    cluster.stop_rest()
    try:
        sub = Submission(job_id=106, attempt=1, tenant="t", command=("true",), since_s=time.time())
        calls: list[Callable[[], Any]] = [b.list_nodes, b.list_jobs, lambda: b.submit(sub), lambda: b.cancel("1")]
        for call in calls:
            with pytest.raises(ClusterError) as e:
                call()
            assert e.value.transient and "out of reach" in str(e.value), e.value
    finally:
        cluster.start_rest()
    assert len(b.list_nodes()) == 2  # back: the same backend goes on


def test_slurmctld_down_behind_slurmrestd_is_transient(cluster: SlurmCluster, token_file: Path) -> None:
    b = _backend(cluster, token_file)
    cluster.stop_controller()
    try:
        calls: list[Callable[[], Any]] = [b.list_jobs, lambda: b.cancel("1")]
        for call in calls:
            with pytest.raises(ClusterError) as e:
                call()
            assert e.value.transient and "cannot reach slurmctld" in str(e.value), e.value
    finally:
        cluster.start_controller()
    _wait(lambda: _try(b.list_jobs) is not None, 60, "slurmctld answers again")


def _try(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except ClusterError:
        return None
