"""Container jobs through the lifecycle process jobs have: a real `corral up` whose agent reaches the real Docker
Engine, the real CLI. A GPU that fails under a container job requeues it onto healthy GPUs (its old container gone,
the new attempt told CORRAL_PREEMPTED); a tenant reclaiming its guarantee preempts another tenant's borrowing
container job (SIGTERM to its command through the container's init, then the job waits and runs again); a repeating
container job runs each time in a fresh container; nothing is left on the engine afterwards."""

from __future__ import annotations

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

from .conftest import Corral, wait_for

# One test at a time on the container engine (its images, containers and node names are the machine's): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.xdist_group("container-engine")]
NODE = engine_node("e2e-cycle")


def _containers(engine: Any, job: int | None = None) -> list[Any]:
    labels = [f"io.corral.node={NODE}"] + ([f"io.corral.job={job}"] if job is not None else [])
    return list_labelled(engine, *labels)


def _user(c: Corral, name: str, tenant: str) -> dict[str, str]:
    assert c.cli("users", "create", name, "--tenant", tenant).returncode == 0
    token = c.cli("tokens", "create", "--user", name).stdout.strip()
    return dict(c.env, CORRAL_URL=c.url, CORRAL_TOKEN=token)


def _submit(c: Corral, env: dict[str, str], *args: str) -> int:
    r = c.cli("submit", *args, env=env)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[0])


def test_container_jobs_requeue_get_preempted_and_repeat(corral_factory: Any) -> None:
    engine = require_engine()
    remove_node_containers(engine, NODE)
    c: Corral = corral_factory(gpus="sim:2xH100-80GB", node=NODE)
    c.env["CORRAL_DOCKER_HOST"] = DOCKER_HOST
    c.env["CORRAL_CANCEL_GRACE_S"] = "5"
    c.start()
    try:
        _run(c, engine)
    finally:
        remove_node_containers(engine, NODE)


def _run(c: Corral, engine: Any) -> None:
    # A GPU failure under a container job: requeued onto the healthy GPU, in a new container.
    job = c.submit("--image", TEST_IMAGE, "--gpus", "1", "--", "sh", "-c", "echo attempt=$CORRAL_ATTEMPT "
                   "preempted=${CORRAL_PREEMPTED:-0} gpu=$CUDA_VISIBLE_DEVICES; sleep 600")  # fmt: skip
    first = wait_for(lambda: (j := c.job(job))["state"] == "RUNNING" and j, 30, "running")
    wait_for(lambda: "attempt=1" in c.cli("logs", str(job)).stdout, 30, "first attempt's log")
    bad = first["gpus"][0]
    assert c.cli("sim", "fault", NODE, str(bad), "--xid", "79").returncode == 0
    again = wait_for(lambda: (j := c.job(job))["attempt"] == 2 and j["state"] == "RUNNING" and j, 60, "requeued")
    assert again["gpus"] != [bad]
    wait_for(lambda: f"attempt=2 preempted=1 gpu={again['gpus'][0]}" in c.cli("logs", str(job)).stdout, 30, "2nd")
    wait_for(lambda: len(_containers(engine, job)) == 1, 30, "the first attempt's container removed")
    assert _containers(engine, job)[0].labels["io.corral.attempt"] == "2"
    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 30, "cancelled")
    assert c.cli("sim", "fault", NODE, str(bad), "--clear").returncode == 0
    wait_for(lambda: all(g["health"] == "HEALTHY" for g in c.cli_json("gpus")), 60, "GPU healthy again")

    # Reclaim: nlp is guaranteed both GPUs; vision borrows them with a container job, which is preempted.
    for tenant in ("vision", "nlp"):
        assert c.cli("tenants", "create", tenant).returncode == 0
    assert c.cli("tenants", "quota", "nlp", "--guaranteed", "2").returncode == 0
    vision, nlp = _user(c, "vic", "vision"), _user(c, "nora", "nlp")
    borrower = _submit(
        c, vision, "--image", TEST_IMAGE, "--gpus", "2", "--", "sh", "-c",
        "trap 'echo got TERM; exit 143' TERM; echo run $CORRAL_ATTEMPT; while :; do sleep 1; done",
    )  # fmt: skip
    wait_for(lambda: "run 1" in c.cli("logs", str(borrower)).stdout, 30, "borrower running")
    owner = _submit(c, nlp, "--image", TEST_IMAGE, "--gpus", "2", "--", "sh", "-c", "echo mine; sleep 3")
    wait_for(lambda: c.job(owner)["state"] in ("RUNNING", "SUCCEEDED"), 60, "the owner's job started")
    preempted = c.job(borrower)
    assert preempted["preemptions"] >= 1 and preempted["state"] in ("PENDING", "RUNNING"), preempted
    assert "got TERM" in c.cli("logs", str(borrower)).stdout  # its command heard SIGTERM (it could checkpoint)
    wait_for(lambda: c.job(owner)["state"] == "SUCCEEDED", 60, "the owner's job done")
    wait_for(lambda: "run 2" in c.cli("logs", str(borrower)).stdout, 60, "the borrower runs again")
    assert c.cli("cancel", str(borrower)).returncode == 0
    wait_for(lambda: c.job(borrower)["state"] == "CANCELLED", 30, "borrower cancelled")

    # A repeating container job: each run its own job and container.
    r = c.cli("submit", "--repeat", "@every 2s", "--name", "tick", "--image", TEST_IMAGE, "--", "sh", "-c",
              "echo tick $CORRAL_JOB_ID")  # fmt: skip
    assert r.returncode == 0, r.stderr
    schedule = r.stdout.split()[1]
    ticks = wait_for(
        lambda: (done := [j for j in c.api_jobs() if j["name"] == "tick" and j["state"] == "SUCCEEDED"])[1:] and done,
        60,
        "two runs of the repeating job",
    )
    for j in ticks[:2]:
        assert j["image"] == TEST_IMAGE and f"tick {j['id']}" in c.cli("logs", str(j["id"])).stdout
    assert c.cli("schedules", "delete", schedule).returncode == 0
    wait_for(lambda: not _containers(engine), 60, "nothing left on the engine")
