"""The vertical slice on one simulated 8-GPU node, with real `corral up` and CLI processes."""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import pytest

from .conftest import CORRAL, Corral, wait_for

pytestmark = pytest.mark.e2e

JOB = "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; sleep 6"


def test_three_four_gpu_jobs_cancel_wait_and_restart(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    ids = [c.submit("--gpus", "4", "--name", f"train-{i}", "--", "sh", "-c", JOB) for i in range(3)]

    # two run at once on disjoint GPUs, the third waits
    def two_running() -> list[dict[str, Any]] | None:
        jobs = [j for j in c.api_jobs() if j["id"] in ids]
        return jobs if sum(j["state"] == "RUNNING" for j in jobs) == 2 else None

    jobs = wait_for(two_running, 30, "two jobs running")
    running = [j for j in jobs if j["state"] == "RUNNING"]
    assert set(running[0]["gpus"]).isdisjoint(running[1]["gpus"])
    assert len(running[0]["gpus"]) == len(running[1]["gpus"]) == 4
    third = next(j for j in jobs if j["state"] == "PENDING")
    # once a cycle has looked at it (before that it shows a placeholder), the reason names the cause a user can act on
    reason = wait_for(
        lambda: (r := c.job(third["id"]).get("pending_reason") or "") != "waiting for the scheduler" and r,
        30,
        "the third job's pending reason",
    )
    assert re.fullmatch(r"waiting for 4 free GPUs; none is free; .+", reason), reason
    assert c.job(third["id"])["pending_code"] == "capacity"

    # the third runs after one of the first two finished; `wait` returns the exit code
    for i in ids:
        r = c.cli("wait", str(i), "--timeout", "60")
        assert r.returncode == 0, r.stderr
    done = [c.job(i) for i in ids]
    assert all(j["state"] == "SUCCEEDED" and j["exit_code"] == 0 for j in done)
    last = next(j for j in done if j["id"] == third["id"])
    assert last["started_at"] >= min(j["finished_at"] for j in done if j["id"] != third["id"])

    # each job's log shows exactly the GPUs it was given
    for j in done:
        out = c.cli("logs", str(j["id"])).stdout
        m = re.search(r"CUDA_VISIBLE_DEVICES=(\S*) NVIDIA_VISIBLE_DEVICES=(\S*)", out)
        assert m, out
        assert sorted(int(x) for x in m.group(1).split(",")) == sorted(j["gpus"])

    # wait exits with the job's own exit code
    failing = c.submit("--gpus", "1", "--", "sh", "-c", "exit 7")
    assert c.cli("wait", str(failing), "--timeout", "60").returncode == 7

    # cancel: a long job ends CANCELLED and frees its GPUs
    long = c.submit("--gpus", "8", "--", "sleep", "300")
    wait_for(lambda: c.job(long)["state"] == "RUNNING", 30, "long job running")
    r = c.cli("cancel", str(long))
    assert r.returncode == 0, r.stderr
    wait_for(lambda: c.job(long)["state"] == "CANCELLED", 30, "cancelled")
    assert c.cli("wait", str(long), "--timeout", "5").returncode != 0

    # a job running across a kill -9 of `corral up` is reconciled after restart
    survivor = c.submit("--gpus", "2", "--", "sh", "-c", "echo before; sleep 4; echo after")
    wait_for(lambda: c.job(survivor)["state"] == "RUNNING", 30, "survivor running")
    c.kill9()
    c.start()
    listed = c.cli_json("jobs", "--all")
    assert {j["id"] for j in listed} >= {*ids, failing, long, survivor}
    for field in ("id", "name", "state", "node", "gpus", "exit_code", "created_at", "started_at", "finished_at"):
        assert all(field in j for j in listed)
    assert c.cli("wait", str(survivor), "--timeout", "60").returncode == 0
    assert "after" in c.cli("logs", str(survivor)).stdout

    # Ctrl-C stops server and agent cleanly
    assert c.interrupt() == 0
    assert not c.healthy()


def test_logs_follow_streams_until_the_end(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    job = c.submit("--", "sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.5; done")
    r = c.cli("logs", str(job), "--follow", timeout_s=60)
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["line 1", "line 2", "line 3"]


def test_cli_bad_input_is_one_line_and_creates_nothing(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    cases = {
        "unknown flag": (["submit", "--bogus", "--", "true"], "--bogus"),
        "too many GPUs": (["submit", "--gpus", "9", "--", "true"], "--gpus: "),
        "bad env pair": (["submit", "--env", "NOEQUALS", "--", "true"], "--env"),
        "unknown job": (["show", "4242"], "4242"),
        "unknown job cancel": (["cancel", "4242"], "4242"),
        "unknown model": (["submit", "--gpus", "1", "--gpu-model", "B200", "--", "true"], "--gpu-model: "),
    }
    for name, (args, needle) in cases.items():
        r = c.cli(*args)
        assert r.returncode != 0, name
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (name, r.stderr)
    assert c.cli_json("jobs", "--all") == []

    bad_token = dict(c.env, CORRAL_TOKEN="crl_not-a-token")
    r = c.cli("jobs", env=bad_token)
    assert r.returncode != 0 and r.stderr.startswith("error: authentication failed")
    unreachable = dict(c.env, CORRAL_URL="http://127.0.0.1:9")
    r = c.cli("jobs", env=unreachable)
    assert r.returncode != 0 and "cannot reach" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_logs_follow_says_what_a_pending_job_waits_for_and_how_it_ended(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    hog = c.submit("--gpus", "8", "--", "sleep", "600")
    wait_for(lambda: c.job(hog)["state"] == "RUNNING", 30, "the hog runs")
    waiting = c.submit("--gpus", "8", "--", "echo", "never")
    follow = subprocess.Popen(
        [CORRAL, "logs", str(waiting), "--follow"], env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(2)  # it is following, the job still pending
        assert c.cli("cancel", str(waiting)).returncode == 0
        out, err = follow.communicate(timeout=30)
    finally:
        follow.kill()
    assert follow.returncode == 0 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"job {waiting} is pending (") and "its logs follow when it starts" in lines[0], err
    assert lines[-1].startswith(f"job {waiting} CANCELLED"), err
    assert c.cli("cancel", str(hog)).returncode == 0


def test_an_empty_list_says_so(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    assert c.cli("jobs").stdout.strip() == "no pending or running jobs (corral jobs --all shows finished ones)"
    assert c.cli("jobs", "--all").stdout.strip() == "no jobs"
    assert c.cli_json("jobs") == []


def _alive(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_ctrl_c_says_that_jobs_keep_running_and_the_next_start_adopts_them(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    marker = f"sleep 600.{time.time_ns() % 1000:03d}1"
    job = c.submit("--", "sh", "-c", marker)
    wait_for(lambda: c.job(job)["state"] == "RUNNING" and _alive(marker), 30, "the job runs")
    assert c.interrupt() == 0
    said = (c.root / "up-0.log").read_text()
    assert "1 job(s) keep running on this node and are adopted at the next start" in said, said
    assert _alive(marker)  # left running, as said
    c.start()
    time.sleep(2)
    assert c.job(job)["state"] == "RUNNING" and _alive(marker)  # adopted, not failed or restarted
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: not _alive(marker), 30, "the job ended")


def test_ctrl_c_with_stop_jobs_ends_them(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.up_proc = c.spawn([CORRAL, "up", "--stop-jobs"], log_name="up")
    wait_for(c.healthy, 60, "server healthy")
    wait_for(lambda: c.cli_json("nodes"), 30, "local node registered")
    marker = f"sleep 600.{time.time_ns() % 1000:03d}2"
    job = c.submit("--", "sh", "-c", marker)
    wait_for(lambda: c.job(job)["state"] == "RUNNING" and _alive(marker), 30, "the job runs")
    assert c.interrupt() == 0
    said = (c.root / "up-0.log").read_text()
    assert "ending 1 job(s) on this node" in said and "1 job(s) ended" in said, said
    assert not _alive(marker)
    c.start()
    wait_for(lambda: c.job(job)["state"] != "RUNNING", 30, "its exit reached the server")
