"""Issue 11, first finding, against real `corral up` run as root: a member's job tries to read the data dir's
credentials and database, another user's job dir, log and environment, and prints its own environment. Every
read is denied, the job runs as its user's UID (or the admin-mapped one), and the node says it isolates users."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from realparts import missing_real_part

from .conftest import Corral, wait_for

pytestmark = pytest.mark.e2e

ALLOWED_ENV = {
    "PATH",
    "LANG",
    "HOME",
    "USER",
    "LOGNAME",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CORRAL_JOB_ID",
    "CORRAL_ATTEMPT",
    "CORRAL_CHECKPOINT_DIR",
    "CORRAL_NOTICE_FILE",  # where a spot interruption notice's seconds appear (docs/elastic.md)
    "PWD",
    "SHLVL",
    "_",
    "D",
    "BOB_DIR",
    "BOB_LOG",
}


@pytest.fixture
def corral() -> Iterator[Corral]:
    """An installation in a directory everyone may traverse, as /var/lib/corral is: only the data dir's own
    modes (and the job's identity) stand between a job and the credentials, not pytest's 0700 tmp dir."""
    if os.geteuid() != 0:
        missing_real_part("root", "the agent switches users only as root; run the e2e tests as root (CI does)")
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-isolation-"))
    os.chmod(root, 0o755)
    c = Corral(root / "c")
    try:
        yield c
    finally:
        c.close()
        shutil.rmtree(root, ignore_errors=True)


def _user(c: Corral, name: str, tenant: str) -> tuple[dict[str, str], int]:
    assert c.cli("users", "create", name, "--tenant", tenant).returncode == 0
    token = c.cli("tokens", "create", "--user", name).stdout.strip()
    user_id = next(u["id"] for u in c.cli_json("users", "list") if u["name"] == name)
    return dict(c.env, CORRAL_URL=c.url, CORRAL_TOKEN=token), user_id


def _submit_as(c: Corral, env: dict[str, str], *args: str) -> int:
    r = c.cli("submit", *args, env=env)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def _log(c: Corral, job_id: int) -> str:
    return c.cli("logs", str(job_id)).stdout


def test_a_members_job_reads_nothing_of_the_agent_or_another_user(corral: Corral) -> None:
    c = corral
    c.start()
    for tenant in ("vision", "nlp"):
        assert c.cli("tenants", "create", tenant).returncode == 0
    alice, alice_id = _user(c, "alice", "vision")
    bob, _ = _user(c, "bob", "nlp")
    victim = _submit_as(
        c,
        bob,
        "--env",
        "BOB_SECRET=hunter2",
        "--",
        "sh",
        "-c",
        'echo "bob at $PWD"; echo s3cret > notes; exec sleep 120',
    )
    bob_dir = wait_for(
        lambda: next(
            (line.split(" at ", 1)[1] for line in _log(c, victim).splitlines() if line.startswith("bob at ")), None
        ),
        60,
        "bob's job running",
    )
    bob_log = c.data_dir / "agent" / "node-a" / "logs" / f"{victim}.1.log"
    assert bob_log.exists()
    attack = r"""
        echo "CORRAL_DATA_DIR=[${CORRAL_DATA_DIR-unset}]"
        for f in "$D/admin-token" "$D/join-token" "$D/corral.db" "$D/ca/ca.key" "$BOB_LOG" "$BOB_DIR/notes"; do
            cat "$f" > /dev/null 2>&1 && echo "READ $f"
        done
        for d in "$D" "$BOB_DIR" "$(dirname "$BOB_DIR")"; do ls "$d" > /dev/null 2>&1 && echo "LISTED $d"; done
        for p in /proc/[0-9]*; do grep -l hunter2 "$p/environ" 2>/dev/null && echo "ENVIRON $p"; done
        echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
        env
    """
    job = _submit_as(
        c,
        alice,
        "--env",
        f"D={c.data_dir}",
        "--env",
        f"BOB_DIR={bob_dir}",
        "--env",
        f"BOB_LOG={bob_log}",
        "--",
        "sh",
        "-c",
        attack,
    )
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0
    out = _log(c, job)
    assert "CORRAL_DATA_DIR=[unset]" in out
    for leak in ("READ ", "LISTED ", "ENVIRON ", "hunter2", "s3cret", "crl_", "crj_"):
        assert leak not in out, (leak, out)
    uid = 200_000 + alice_id
    assert f"uid={uid} gid={uid} groups={uid}" in out
    env_names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line and line[0].isupper()}
    assert env_names - {"CORRAL_DATA_DIR", "READ"} <= ALLOWED_ENV, env_names - ALLOWED_ENV

    # The data dir and what it holds are the server's alone, whatever the job would try.
    assert stat.S_IMODE(c.data_dir.stat().st_mode) == 0o700
    for name in ("admin-token", "join-token", "corral.db"):
        assert stat.S_IMODE((c.data_dir / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(bob_log.stat().st_mode) == 0o600
    assert [n["isolation"] for n in c.cli_json("nodes")] == ["users"]
    c.cli("cancel", str(victim))


def test_a_mapped_user_runs_as_the_mapped_account(corral: Corral) -> None:
    c = corral
    c.start()
    carol, _ = _user(c, "carol", "default")
    r = c.cli("users", "unix", "carol", "--uid", "5001", "--gid", "5002")
    assert r.returncode == 0 and "uid 5001, gid 5002 (mapped)" in r.stdout, r.stderr
    r = c.cli("users", "unix", "carol", "--uid", "0")
    assert r.returncode != 0 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    job = _submit_as(c, carol, "--", "sh", "-c", 'echo "$(id -u):$(id -g) $USER"')
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0
    assert _log(c, job) == "5001:5002 carol\n"
