"""Container jobs end to end on the real Docker Engine: `corral up` (a head without an engine) and a `corral agent`
with one, the real CLI. An image job waits, saying why, until a node with the docker runtime joins and never runs
on the head; its log shows its GPUs and it exits with the container's code; a host mount outside the admin's
prefixes is refused at submit naming --mount, one inside works; cancel stops a container; and an agent killed -9
mid-job, restarted, re-adopts the container still running and reports the one that ended meanwhile."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from container_engine import (
    DOCKER_HOST,
    TEST_IMAGE,
    engine_node,
    list_labelled,
    remove_node_containers,
    require_engine,
)

from .conftest import CORRAL, Corral, wait_for

# One test at a time on the container engine (its images, containers and node names are the machine's): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.xdist_group("container-engine")]
NODE = engine_node("e2e-boxy")


def _start_box(c: Corral, token_file: Path | None) -> Any:
    args = [CORRAL, "agent", "--join", c.agent_url, "--gpus", "sim:2xH100-80GB", "--node-name", NODE]
    if token_file is not None:
        args += ["--token-file", str(token_file)]
    env = dict(c.agent_env(NODE), CORRAL_DOCKER_HOST=DOCKER_HOST)
    return c.spawn(args, env=env, log_name=f"agent-{NODE}")


def _state(c: Corral, job: int) -> str:
    return str(next(j["state"] for j in c.api_jobs() if j["id"] == job))


def test_container_jobs_end_to_end(corral_factory: Any) -> None:
    engine = require_engine()
    remove_node_containers(engine, NODE)
    c: Corral = corral_factory(gpus="none", node="head")
    c.env["CORRAL_DOCKER_HOST"] = "none"  # the head runs processes only
    c.env["CORRAL_ALLOWED_MOUNTS"] = str(c.shared)
    c.env["CORRAL_LONG_POLL_S"] = "1"
    c.start()
    try:
        _run(c, engine)
    finally:
        remove_node_containers(engine, NODE)


def _run(c: Corral, engine: Any) -> None:
    assert [n["runtimes"] for n in c.cli_json("nodes")] == [["process"]]
    # An image job waits while no node runs containers, and says why; the head could hold it but never takes it.
    early = c.submit("--image", TEST_IMAGE, "--", "sh", "-c", "echo early")
    wait_for(lambda: "docker" in (c.job(early).get("pending_reason") or ""), 30, "a pending reason naming docker")

    # A forbidden host mount is refused at submit, naming the flag (a malformed one, or the server's policy).
    for mount, named in (
        ("/etc:/host-etc", "--mount: /etc is not under a directory this cluster allows"),
        ("/var/run/docker.sock:/var/run/docker.sock", "--mount: /var/run/docker.sock is not under"),
        (f"{c.shared}/../..:/host", "--mount: "),
    ):
        r = c.cli("submit", "--image", TEST_IMAGE, "--mount", mount, "--", "true")
        assert r.returncode != 0 and named in r.stderr, (mount, r.stderr)

    first = _start_box(c, c.join_token())
    wait_for(lambda: any(n["name"] == NODE for n in c.cli_json("nodes")), 60, "the docker node registered")
    assert {n["name"]: n["runtimes"] for n in c.cli_json("nodes")}[NODE] == ["process", "docker"]
    assert c.cli("wait", str(early), "--timeout", "60").returncode == 0
    assert c.job(early)["node"] == NODE and "early" in c.cli("logs", str(early)).stdout

    # Its GPUs in its environment, and the container's exit code.
    gpu_job = c.submit(
        "--image", TEST_IMAGE, "--gpus", "1", "--", "sh", "-c", "echo CUDA=$CUDA_VISIBLE_DEVICES; exit 3"
    )
    c.cli("wait", str(gpu_job), "--timeout", "60")
    shown = c.job(gpu_job)
    assert (shown["state"], shown["exit_code"], shown["image"]) == ("FAILED", 3, TEST_IMAGE)
    assert f"CUDA={shown['gpus'][0]}" in c.cli("logs", str(gpu_job)).stdout

    # A mount under the allowed prefix: the job writes there as its own Unix identity.
    mounted = c.submit("--image", TEST_IMAGE, "--mount", f"{c.shared}:/shared", "--", "sh", "-c", "id -u > /shared/who")
    assert c.cli("wait", str(mounted), "--timeout", "60").returncode == 0
    assert int((c.shared / "who").read_text()) == (c.shared / "who").stat().st_uid != 0

    # Cancel stops a running container.
    sleeper = c.submit("--image", TEST_IMAGE, "--", "sleep", "600")
    wait_for(lambda: _state(c, sleeper) == "RUNNING", 30, "sleeper running")
    wait_for(lambda: c.job(sleeper).get("image_digest"), 30, "its image digest reported")
    assert c.cli("cancel", str(sleeper)).returncode == 0
    wait_for(lambda: _state(c, sleeper) == "CANCELLED", 30, "sleeper cancelled")

    # kill -9 of the agent mid-job: one container ends while no agent watches, one runs on; both are re-adopted.
    ends = c.submit("--image", TEST_IMAGE, "--", "sh", "-c", "echo before; sleep 4; echo after; exit 5")
    runs = c.submit("--image", TEST_IMAGE, "--", "sh", "-c", "echo alive; sleep 600")
    for job, first_line in ((ends, "before"), (runs, "alive")):
        wait_for(lambda: first_line in c.cli("logs", str(job)).stdout, 30, f"{job} running")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(  # `ends` ends meanwhile; the engine keeps its exit code
        lambda: not engine.containers.list(filters={"label": [f"io.corral.job={ends}", f"io.corral.node={NODE}"]}),
        30,
        "the container ended",
    )
    assert _state(c, ends) == "RUNNING"  # nobody told the server yet
    _start_box(c, None)  # a restart: the node's certificate is kept, no token
    wait_for(lambda: _state(c, ends) == "FAILED", 60, "the ended container reported after the restart")
    assert c.job(ends)["exit_code"] == 5
    assert c.cli("logs", str(ends)).stdout == "before\nafter\n"
    assert _state(c, runs) == "RUNNING"
    assert c.cli("cancel", str(runs)).returncode == 0  # the re-adopted container obeys
    wait_for(lambda: _state(c, runs) == "CANCELLED", 30, "the re-adopted container cancelled")
    assert c.cli("logs", str(runs)).stdout == "alive\n"
    wait_for(lambda: not list_labelled(engine, f"io.corral.node={NODE}"), 30, "removed")
    for job in (early, gpu_job, mounted, sleeper, ends, runs):
        assert c.job(job)["node"] == NODE  # never the head, which has no engine
