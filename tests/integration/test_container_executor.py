"""ContainerExecutor on the real Docker Engine (no mocks): a job's environment, log and exit code; the safety
settings every container gets whatever its tenant asks (not privileged, no host network or PID namespace, no raw
sockets, no new privileges, no engine socket); mounts checked again on the node with links resolved; cancel with
a grace period, then a kill; and a new executor (an agent restarted after kill -9) re-adopting its containers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from container_engine import TEST_IMAGE, engine_node, remove_node_containers, require_engine
from corral.core.containers import ContainerSpec, parse_mount
from corral.core.unix_identity import JobIdentity
from corral.executors.base import ExitRecord, LaunchSpec
from corral.executors.container import ContainerExecutor

# One test at a time on the container engine (its images, containers and node names are the machine's): docs/testing.md
pytestmark = pytest.mark.xdist_group("container-engine")
NODE = engine_node("itest-node")
JOB_USER = JobIdentity(200_123, 200_123, "alice")


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    client = require_engine()
    remove_node_containers(client, NODE)
    yield client
    remove_node_containers(client, NODE)
    client.close()


@pytest.fixture
def make_executor(engine: docker.DockerClient, tmp_path: Path) -> Callable[..., ContainerExecutor]:
    def make(**kw: object) -> ContainerExecutor:
        return ContainerExecutor(engine, tmp_path / "state", NODE, **kw)  # type: ignore[arg-type]

    return make


def _spec(tmp_path: Path, key: str, *command: str, **kw: object) -> LaunchSpec:
    container = kw.pop("container", ContainerSpec(TEST_IMAGE))
    return LaunchSpec(
        job_id=key,
        command=command,
        env={"GREETING": "hello"},
        workdir=None,
        gpu_indices=(2, 5),
        gpu_uuids=("GPU-sim-2", "GPU-sim-5"),
        log_path=tmp_path / "logs" / f"{key}.log",
        identity=JOB_USER,
        container=container,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _exit_of(ex: ContainerExecutor, key: str, timeout_s: float = 30) -> ExitRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for e in ex.collect_exits():
            if e.job_id == key:
                return e
        time.sleep(0.05)
    raise AssertionError(f"{key} did not end within {timeout_s} s")


def _wait_running(ex: ContainerExecutor, engine: docker.DockerClient, key: str) -> docker.models.containers.Container:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = engine.containers.list(filters={"label": f"io.corral.run={key}"})
        if found and key in ex.running():
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"{key} never ran")


def _wait_for_text(path: Path, text: str) -> None:
    deadline = time.monotonic() + 20
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never reached {path}"
        time.sleep(0.05)


def _wait_exited(engine: docker.DockerClient, key: str) -> None:
    deadline = time.monotonic() + 20
    while engine.containers.list(filters={"label": f"io.corral.run={key}"}):  # running ones only
        assert time.monotonic() < deadline, f"{key} did not end"
        time.sleep(0.05)


def test_env_log_exit_code_user_and_limits(make_executor: Callable[..., ContainerExecutor], tmp_path: Path) -> None:
    ex = make_executor()
    script = "echo CUDA=$CUDA_VISIBLE_DEVICES NV=$NVIDIA_VISIBLE_DEVICES G=$GREETING J=$CORRAL_JOB_ID; id -u; echo oops >&2; exit 7"
    ex.launch(_spec(tmp_path, "11.1", "sh", "-c", script, cpu_milli=500, memory_mib=256))
    record = _exit_of(ex, "11.1")
    assert (record.exit_code, record.reason) == (7, "")
    log = (tmp_path / "logs" / "11.1.log").read_text()
    assert "CUDA=2,5 NV=GPU-sim-2,GPU-sim-5 G=hello J=11.1" in log  # simulated GPUs: the environment only
    assert "200123" in log and "oops" in log  # the job's own Unix identity; stderr in the same log
    ex.ack("11.1")
    assert ex.collect_exits() == [] and not (tmp_path / "state" / "11.1").exists()


def test_every_container_gets_the_safety_settings(
    make_executor: Callable[..., ContainerExecutor], engine: docker.DockerClient, tmp_path: Path
) -> None:
    ex = make_executor()
    probe = (
        "busybox ping -c 1 -W 1 127.0.0.1 >/dev/null 2>&1 && echo RAW=yes || echo RAW=no; "
        "ls /var/run/docker.sock /run/docker.sock 2>/dev/null && echo SOCK=yes || echo SOCK=no; "
        "grep NoNewPrivs /proc/self/status; sleep 30"
    )
    ex.launch(_spec(tmp_path, "12.1", "sh", "-c", probe, cpu_milli=1500, memory_mib=512))
    container = _wait_running(ex, engine, "12.1")
    host = container.attrs["HostConfig"]
    assert host["Privileged"] is False
    assert (
        host["NetworkMode"] == "bridge"
        and host["PidMode"] in ("", "private")
        and host["IpcMode"] in ("private", "shareable")
    )
    assert {"NET_RAW", "MKNOD"} <= set(host["CapDrop"]) and not host.get("CapAdd")
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert not host.get("Binds") and not host.get("Mounts") and not host.get("Devices")
    assert host["NanoCpus"] == 1_500_000_000 and host["Memory"] == 512 << 20 and host["MemorySwap"] == 512 << 20
    assert host["ShmSize"] == 128 << 20  # a quarter of 512 MiB (under the 1 GiB default)
    assert container.attrs["Config"]["User"] == "200123:200123"
    deadline = time.monotonic() + 20
    while "NoNewPrivs" not in (tmp_path / "logs" / "12.1.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = (tmp_path / "logs" / "12.1.log").read_text()
    assert "RAW=no" in log and "SOCK=no" in log and "NoNewPrivs:\t1" in log
    ex.cancel("12.1", 0)
    _exit_of(ex, "12.1")


def test_mounts_are_checked_again_with_links_resolved(
    make_executor: Callable[..., ContainerExecutor], tmp_path: Path
) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "data").mkdir(parents=True)
    (allowed / "data" / "in.txt").write_text("from the host\n")
    os.chmod(allowed / "data", 0o755)
    os.chmod(allowed / "data" / "in.txt", 0o644)
    (allowed / "escape").symlink_to("/etc")
    (allowed / "sock").symlink_to("/var/run/docker.sock")
    # A careless admin allows /run too: the engine's socket (and any directory holding it) stays out of reach.
    ex = make_executor(allowed_mounts=(str(allowed), "/run"), engine_socket="/var/run/docker.sock")
    refused = {
        "21.1": (f"{allowed}/escape:/etc-of-host", "is not under an allowed prefix"),  # a link out of the prefix
        "22.1": (f"{allowed}/sock:/var/run/docker.sock", "would expose the container engine's socket"),
        "23.1": ("/run:/host-run", "would expose the container engine's socket"),  # the directory holding it
    }
    for key, (mount, _) in refused.items():
        spec = ContainerSpec(TEST_IMAGE, (parse_mount(mount),))
        ex.launch(_spec(tmp_path, key, "cat", "/etc-of-host/shadow", container=spec))
    for key, (_, words) in refused.items():
        record = _exit_of(ex, key)
        assert record.exit_code == 126 and record.reason.startswith("refused: mount") and words in record.reason, record
        assert words in (tmp_path / "logs" / f"{key}.log").read_text()
    ok = ContainerSpec(TEST_IMAGE, (parse_mount(f"{allowed}/data:/in:ro"),))
    ex.launch(
        _spec(tmp_path, "24.1", "sh", "-c", "cat /in/in.txt; echo x > /in/new 2>/dev/null || echo RO", container=ok)
    )
    assert _exit_of(ex, "24.1").exit_code == 0
    log = (tmp_path / "logs" / "24.1.log").read_text()
    assert "from the host" in log and "RO" in log and not (allowed / "data" / "new").exists()


def test_cancel_stops_with_the_grace_period_then_kills(
    make_executor: Callable[..., ContainerExecutor], engine: docker.DockerClient, tmp_path: Path
) -> None:
    ex = make_executor()
    ex.launch(_spec(tmp_path, "31.1", "sleep", "600"))  # SIGTERM ends it
    ex.launch(_spec(tmp_path, "32.1", "sh", "-c", "trap 'echo term-ignored' TERM; while true; do sleep 0.1; done"))
    _wait_running(ex, engine, "31.1")
    _wait_running(ex, engine, "32.1")
    began = time.monotonic()
    ex.cancel("31.1", 5.0)
    ex.cancel("32.1", 1.0)
    assert _exit_of(ex, "31.1") == ExitRecord("31.1", 143, "cancelled")
    assert _exit_of(ex, "32.1") == ExitRecord("32.1", 137, "cancelled: killed after grace period")
    assert time.monotonic() - began >= 1.0
    assert "term-ignored" in (tmp_path / "logs" / "32.1.log").read_text()
    assert not engine.containers.list(all=True, filters={"label": f"io.corral.node={NODE}"})  # removed


def test_a_new_executor_readopts_running_containers_and_reports_those_that_ended(
    make_executor: Callable[..., ContainerExecutor], engine: docker.DockerClient, tmp_path: Path
) -> None:
    first = make_executor()
    first.launch(_spec(tmp_path, "41.1", "sh", "-c", "echo one; sleep 2; echo two; exit 3"))
    first.launch(_spec(tmp_path, "42.1", "sh", "-c", "echo start; sleep 600"))
    _wait_running(first, engine, "41.1")
    _wait_running(first, engine, "42.1")
    _wait_for_text(tmp_path / "logs" / "41.1.log", "one\n")
    _wait_for_text(tmp_path / "logs" / "42.1.log", "start\n")
    del first  # the agent dies: no cleanup runs, its containers run on
    _wait_exited(engine, "41.1")  # it ends while no agent watches
    second = make_executor()
    assert "42.1" in second.running()
    assert _exit_of(second, "41.1") == ExitRecord("41.1", 3, "")
    assert (tmp_path / "logs" / "41.1.log").read_text() == "one\ntwo\n"  # every line, each once
    second.cancel("42.1", 1.0)  # the adopted container obeys a cancel
    assert _exit_of(second, "42.1").reason.startswith("cancelled")
    assert (tmp_path / "logs" / "42.1.log").read_text() == "start\n"


def test_a_missing_image_or_command_ends_the_job_with_a_reason(
    make_executor: Callable[..., ContainerExecutor], tmp_path: Path
) -> None:
    ex = make_executor()
    ex.launch(_spec(tmp_path, "51.1", "true", container=ContainerSpec("corral-test/none-such:1")))
    ex.launch(_spec(tmp_path, "52.1", "no-such-program"))
    missing = _exit_of(ex, "51.1")
    assert missing.exit_code == 125 and "corral-test/none-such:1" in missing.reason
    assert _exit_of(ex, "52.1").exit_code == 127
    assert "no-such-program" in (tmp_path / "logs" / "52.1.log").read_text()  # the engine's init, or corral, says so


def test_nothing_is_left_behind_not_even_an_images_anonymous_volume(
    make_executor: Callable[..., ContainerExecutor], engine: docker.DockerClient, tmp_path: Path
) -> None:
    base = engine.containers.create(TEST_IMAGE, ["true"])
    try:  # the test image with a VOLUME, as many real images declare one
        image = base.commit(repository="corral-test/busybox-volume", tag="1", changes=["VOLUME /scratch"])
    finally:
        base.remove(force=True)
    volumes_before = {v.id for v in engine.volumes.list()}
    ex = make_executor()
    ex.launch(_spec(tmp_path, "61.1", "sh", "-c", "test -d /scratch", container=ContainerSpec(image.tags[0])))
    assert _exit_of(ex, "61.1").exit_code == 0
    assert not engine.containers.list(all=True, filters={"label": f"io.corral.node={NODE}"})
    assert {v.id for v in engine.volumes.list()} == volumes_before
