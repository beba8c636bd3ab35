"""A container job's web UI on the real engine (Docker, and Podman through CORRAL_DOCKER_HOST): the node port Corral
assigned is published to the image's port, the page answers there, and the agent's check counts the port as the
job's only while the engine publishes it for this run's running container and only the engine's own forwarder
holds it; a port another process holds first keeps the container from starting (the check then says so)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import docker
import httpx
import pytest

from container_engine import TEST_IMAGE, engine_node, remove_node_containers, require_engine
from corral.agent.webports import WebPortWatch
from corral.api.schemas import WebPortCheck
from corral.core.containers import ContainerSpec
from corral.core.unix_identity import JobIdentity
from corral.executors.base import LaunchSpec
from corral.executors.container import ContainerExecutor

pytestmark = pytest.mark.xdist_group("container-engine")
NODE = engine_node("itest-webport")
T = TypeVar("T")
# busybox's httpd, serving a page that shows what PORT the job read inside
SERVE = "mkdir -p /tmp/w && echo port=$PORT > /tmp/w/index.html && exec busybox httpd -f -p {inner} -h /tmp/w"


def _wait(probe: Callable[[], T | None], what: str, timeout_s: float = 30) -> T:
    deadline = time.monotonic() + timeout_s
    while (value := probe()) is None or value is False:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[ContainerExecutor]:
    engine: docker.DockerClient = require_engine()
    remove_node_containers(engine, NODE)
    made = ContainerExecutor(engine, tmp_path / "state", NODE)
    yield made
    remove_node_containers(engine, NODE)
    made.close()


def _launch(ex: ContainerExecutor, tmp_path: Path, key: str, web_port: int, inner: int | None) -> None:
    ex.launch(
        LaunchSpec(
            job_id=key,
            command=("sh", "-c", SERVE.format(inner=inner or "$PORT")),
            env={"CORRAL_JOB_PORT": str(web_port), "PORT": str(web_port)},  # as the server hands it over
            workdir=None,
            gpu_indices=(),
            gpu_uuids=(),
            log_path=tmp_path / "logs" / f"{key}.log",
            identity=JobIdentity(200_124, 200_124, "alice"),
            container=ContainerSpec(TEST_IMAGE, port=inner),
            web_port=web_port,
        )
    )


def _verdict(ex: ContainerExecutor, key: str, port: int, want: bool) -> tuple[bool, str]:
    job, attempt = (int(x) for x in key.split("."))
    watch = WebPortWatch(lambda _k: None, interval_s=0.0, published_of=ex.published_port)
    watch.set_checks([WebPortCheck(job_id=job, attempt=attempt, port=port)])

    def probe() -> tuple[bool, str] | None:
        watch.refresh()
        report = watch.reports()[0]
        return (report.listening, report.detail) if report.listening is want else None

    return _wait(probe, f"the check of {key} on port {port} to say {want}")


@pytest.mark.parametrize("inner", [8000, None], ids=["the-images-port", "port-inside-is-the-node-port"])
def test_the_web_port_is_published_and_counts_as_the_jobs(
    executor: ContainerExecutor, tmp_path: Path, inner: int | None
) -> None:
    port = _free_port()
    _launch(executor, tmp_path, "31.1", port, inner)

    def page() -> str | None:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/index.html", timeout=2)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    assert _wait(page, "the container's page on the node port").strip() == f"port={inner or port}"
    assert _verdict(executor, "31.1", port, True) == (True, "")
    published = executor.published_port("31.1")
    assert published is not None and (published.host_port, published.container_port) == (port, inner or port)
    assert executor.published_port("32.1") is None  # another run publishes nothing
    executor.cancel("31.1", grace_s=0.0)
    listening, detail = _verdict(executor, "31.1", port, False)  # once it ended, never the job's
    assert "not running" in detail or "not the job's" in detail or "nothing" in detail, detail


def test_a_port_another_process_holds_first_is_never_the_jobs(executor: ContainerExecutor, tmp_path: Path) -> None:
    port = _free_port()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("0.0.0.0", port))
        squatter.listen()
        _launch(executor, tmp_path, "33.1", port, 8000)
        listening, detail = _verdict(executor, "33.1", port, False)
        assert not listening
        record = _wait(lambda: next((e for e in executor.collect_exits() if e.job_id == "33.1"), None), "its exit")
        assert record.exit_code == 125 and str(port) in record.reason, record  # the engine could not publish it
