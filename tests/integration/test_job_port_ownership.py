"""The agent's check behind the job proxy, on real sockets and real job processes: a job's web-UI port counts as
the job's only while the job's own processes, and nothing else, listen on it. Jobs run under a UID of their own
(the agent is root here and in CI), and the check does not rest on that UID: another job of the same user is
refused just the same."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from corral.agent.webports import WebPortWatch, load_listeners
from corral.api.schemas import WebPortCheck
from corral.core.unix_identity import JobIdentity
from corral.executors import LaunchSpec, ProcessExecutor
from ports import free_port

T = TypeVar("T")
ALICE = JobIdentity(uid=200_011, gid=200_011, user="alice")
BOB = JobIdentity(uid=200_012, gid=200_012, user="bob")
# /usr/bin/python3: a job's UID cannot run the venv's interpreter under /root (mode 0700)
LISTEN = (
    "/usr/bin/python3 -c 'import socket, sys, time; s = socket.socket(); "
    's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); '
    "s.listen(); time.sleep(600)' {port}"
)
# A process that leaves the job's session and the shim's tree (setsid, then a double fork), then listens.
ESCAPE = (
    "/usr/bin/python3 -c 'import os, socket, sys, time\n"
    "if os.fork() == 0:\n os.setsid()\n if os.fork() == 0:\n"
    '  s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(600)\n'
    " os._exit(0)\nos.wait(); time.sleep(600)' {port}"
)


def wait_for(probe: Callable[[], T], timeout_s: float = 15.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def executor() -> Iterator[ProcessExecutor]:
    base = Path(tempfile.mkdtemp(prefix="corral-webports-"))
    os.chmod(base, 0o711)  # the jobs' users traverse it to their own dirs
    made = ProcessExecutor(base / "state", work_root=base / "work")
    yield made
    for job_id in made.running():
        made.cancel(job_id, grace_s=0.0)
    wait_for(lambda: not made.running(), 10.0, "the jobs to stop")
    made.close()
    shutil.rmtree(base, ignore_errors=True)


def launch(executor: ProcessExecutor, key: str, script: str, identity: JobIdentity = ALICE) -> None:
    executor.launch(
        LaunchSpec(
            job_id=key,
            command=("sh", "-c", script),
            env={},
            workdir=None,
            gpu_indices=(),
            gpu_uuids=(),
            log_path=executor.work_root.parent / "logs" / f"{key}.log",
            identity=identity if os.geteuid() == 0 else None,
        )
    )
    wait_for(lambda: executor.leader_pid(key), 10.0, f"job {key} to start")


def verdict(executor: ProcessExecutor, port: int, until: Callable[[tuple[bool, str]], bool]) -> tuple[bool, str]:
    """What the agent reports for run 1.1's `port`, once `until` holds for it (the job's server takes a moment)."""
    watch = WebPortWatch(executor.leader_pid, interval_s=0.0)
    watch.set_checks([WebPortCheck(job_id=1, attempt=1, port=port)])

    def probe() -> tuple[bool, str] | None:
        watch.refresh()
        report = watch.reports()[0]
        found = (report.listening, report.detail)
        return found if until(found) else None

    return wait_for(probe, 15.0, f"a verdict on port {port}")


def listening(port: int) -> set[int]:
    """Inodes of the sockets listening on `port` now."""
    return load_listeners([port])[port]


def listening_pids(port: int) -> list[int]:
    return [
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid is not None
    ]


def test_the_jobs_own_server_and_its_children_count(executor: ProcessExecutor) -> None:
    port, other = free_port(), free_port()
    launch(executor, "1.1", f"{LISTEN.format(port=port)} & {LISTEN.format(port=other)}; wait")  # children of sh
    assert verdict(executor, port, lambda v: v[0]) == (True, "")


def test_a_port_the_job_was_not_given_is_not_its_ui(executor: ProcessExecutor) -> None:
    given, taken = free_port(), free_port()
    launch(executor, "1.1", f"exec {LISTEN.format(port=taken)}")  # listens, but elsewhere
    wait_for(lambda: listening(taken), 15.0, "the job's server")
    assert verdict(executor, given, lambda v: v[1] != "not checked yet") == (False, f"nothing listens on port {given}")


@pytest.mark.parametrize("squatter", [BOB, ALICE], ids=["another-users-job", "a-job-of-the-same-user"])
def test_another_jobs_listener_on_the_jobs_port_is_refused(executor: ProcessExecutor, squatter: JobIdentity) -> None:
    port = free_port()
    launch(executor, "1.1", "exec sleep 600")  # given `port`, listens on nothing
    launch(executor, "2.1", f"exec {LISTEN.format(port=port)}", identity=squatter)
    wait_for(lambda: listening(port), 15.0, "the other job's server")
    found = verdict(executor, port, lambda v: v[1] != "not checked yet")
    assert found == (False, f"port {port} is held by a process that is not the job's")


def test_a_process_that_is_no_job_on_the_jobs_port_is_refused(executor: ProcessExecutor) -> None:
    """What the Corral API, the agent or sshd would be: a listener of the node itself."""
    with socket.socket() as node_service:
        node_service.bind(("127.0.0.1", 0))
        node_service.listen()
        port = node_service.getsockname()[1]
        launch(executor, "1.1", "exec sleep 600")
        found = verdict(executor, port, lambda v: v[1] != "not checked yet")
    assert found == (False, f"port {port} is held by a process that is not the job's")


def test_a_foreign_listener_beside_the_jobs_own_is_refused(executor: ProcessExecutor) -> None:
    """The job listens on 127.0.0.1 and something else on another address of the same port (what the proxy
    would reach at the node's address): not the job's UI while that other listener is there."""
    port = free_port()
    launch(executor, "1.1", f"exec {LISTEN.format(port=port)}")
    assert verdict(executor, port, lambda v: v[0])[0]
    with socket.socket(socket.AF_INET6) as other:
        other.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        other.bind(("::1", port))
        other.listen()
        assert (
            verdict(executor, port, lambda v: not v[0])[1] == f"port {port} is held by a process that is not the job's"
        )


def test_a_process_that_left_the_jobs_session_and_tree_no_longer_counts(executor: ProcessExecutor) -> None:
    port = free_port()
    launch(executor, "1.1", ESCAPE.format(port=port))
    escaped = wait_for(lambda: listening_pids(port), 15.0, "the escaped server")
    try:
        found = verdict(executor, port, lambda v: v[1] != "not checked yet")
        assert found == (False, f"port {port} is held by a process that is not the job's")
    finally:
        for pid in escaped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
