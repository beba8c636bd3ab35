"""Several real agent processes join one server; PostgreSQL behind `corral up`; `make up`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Corral, free_port, wait_for

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_remote_agent_joins_and_takes_model_constrained_work(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:8xH100-80GB", node="dgx-1")
    c.start()
    c.start_agent("a100-box", "sim:2xA100-40GB")
    wait_for(lambda: len(c.cli_json("nodes")) == 2, 30, "second node registered")
    gpus = c.cli_json("gpus")
    assert sum(g["node"] == "a100-box" and g["model"] == "A100-40GB" for g in gpus) == 2

    job = c.submit("--gpus", "2", "--gpu-model", "A100", "--", "sh", "-c", "echo on $CUDA_VISIBLE_DEVICES")
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0
    shown = c.job(job)
    assert shown["node"] == "a100-box" and sorted(shown["gpus"]) == [0, 1]
    assert "on 0,1" in c.cli("logs", str(job)).stdout


def test_killed_agent_node_is_lost_and_its_job_runs_elsewhere(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.env["CORRAL_NODE_LOST_AFTER_S"] = "3"
    c.env["CORRAL_LONG_POLL_S"] = "1"  # heartbeats every second at most (a shorter lost timeout is refused)
    c.start()
    first = c.start_agent("w1", "sim:1xL4-24GB")
    wait_for(lambda: any(n["name"] == "w1" for n in c.cli_json("nodes")), 30, "w1 registered")
    job = c.submit("--gpus", "1", "--", "sh", "-c", "echo attempt; sleep 600")
    wait_for(lambda: c.job(job)["node"] == "w1" and c.job(job)["state"] == "RUNNING", 30, "running on w1")
    os.killpg(first.pid, signal.SIGKILL)  # the agent dies; its job's process group lives on, unreachable
    wait_for(lambda: next(n for n in c.cli_json("nodes") if n["name"] == "w1")["state"] == "LOST", 30, "w1 lost")
    c.start_agent("w2", "sim:1xL4-24GB")
    wait_for(lambda: c.job(job)["node"] == "w2" and c.job(job)["state"] == "RUNNING", 30, "rescheduled on w2")
    assert c.job(job)["attempt"] == 2
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 30, "cancelled")


@pytest.mark.postgres
def test_corral_up_on_postgresql(corral_factory: Any, postgres_url: str) -> None:
    c: Corral = corral_factory(database_url=postgres_url)
    c.start()
    job = c.submit("--gpus", "1", "--", "sh", "-c", "echo pg")
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0
    c.kill9()
    c.start()
    assert [j["id"] for j in c.cli_json("jobs", "--all")] == [job]


def _up_env(tmp_path: Path, port: int, gpus: str) -> dict[str, str]:
    """The environment of a `corral up` of its own: its data and CLI config under `tmp_path`, API on `port`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_PORT=str(port),
        # every port claimed, none left to the API port + 1, 2, 3: a parallel test may hold those
        CORRAL_JOB_UI_PORT=str(free_port()),
        CORRAL_AGENT_PORT=str(free_port()),
        CORRAL_GATEWAY_PORT=str(free_port()),
        CORRAL_DATA_DIR=str(tmp_path / "data"),
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / ".config"),
        CORRAL_GPUS=gpus,
    )
    return env


def test_make_up_starts_and_answers_healthz(tmp_path: Path) -> None:
    port = free_port()
    env = _up_env(tmp_path, port, "sim:4xA100-80GB")
    proc = subprocess.Popen(
        ["make", "-s", "up"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["status"] == "ok"
            except (httpx.HTTPError, ValueError):
                return False

        config = tmp_path / ".config" / "corral" / "config.json"
        # /healthz answers as soon as the API listens; `corral up` writes the CLI config right after
        # start() returns (once the job-UI listener is up too), so wait for both.
        wait_for(lambda: (healthy() and config.exists()) or proc.poll() is not None, 120, "make up up, or ended")
        assert proc.poll() is None, f"make up ended ({proc.returncode}); its output is below"
        assert (tmp_path / "data" / "admin-token").stat().st_mode & 0o777 == 0o600
        assert config.stat().st_mode & 0o777 == 0o600
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass  # it ended by itself
        out, _ = proc.communicate(timeout=30)
        print(out.decode())  # shown with a failure: what make up said
    assert f"http://127.0.0.1:{port}" in out.decode()


def test_a_ctrl_c_during_the_start_of_corral_up_stops_it(tmp_path: Path) -> None:
    """A Ctrl-C that comes while `corral up` is still starting (its API answers; the agent, the CLI config and the
    settled heap are on their way) stops it cleanly once it is up. Python's KeyboardInterrupt there either escaped
    with the server's threads still running or was lost inside the collection, and `corral up` never ended."""
    port = free_port()
    env = _up_env(tmp_path, port, "sim:2xA100-80GB")
    corral = str(Path(sys.executable).with_name("corral"))
    proc = subprocess.Popen(
        [corral, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for(lambda: _answers(port) or proc.poll() is not None, 120, "corral up's API answers, or it ended")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    text = out.decode()
    print(text)  # shown with a failure
    assert proc.returncode == 0, text
    assert "stopping..." in text and "KeyboardInterrupt" not in text


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def test_multi_node_job_runs_one_part_per_node(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="sim:2xH100-80GB", node="node-a")
    c.start()
    c.start_agent("node-b", "sim:2xH100-80GB")
    wait_for(lambda: len(c.cli_json("nodes")) == 2, 30, "second node registered")
    job = c.submit(
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--",
        "sh",
        "-c",
        "echo rank $CORRAL_NODE_RANK of $CORRAL_NUM_NODES on $CUDA_VISIBLE_DEVICES master $CORRAL_MASTER_ADDR",
    )
    r = c.cli("wait", str(job), "--timeout", "60")
    assert r.returncode == 0, (r.stderr, c.job(job)["reason"], c.cli("show", str(job)).stdout)
    shown = c.job(job)
    assert sorted(p["node"] for p in shown["parts"]) == ["node-a", "node-b"]
    for rank in (0, 1):
        out = c.cli("logs", str(job), "--rank", str(rank)).stdout
        assert out.startswith(f"rank {rank} of 2 on 0,1 master 127.0.0.1"), out
