"""A job's end reaches the server at once (issue 13's bursts): the executor's exit watch wakes the agent's watch
loop, which reports the exit without waiting for its poll interval. The agent and a real ProcessExecutor; the server
holds each long poll as the real one does (the real exchange is in tests/e2e)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.e2e.conftest import wait_for

from corral.agent.gpu import load_gpu_backend
from corral.agent.runner import Agent
from corral.api.schemas import AgentRegister, AgentSync, AgentSyncReply, Assignment
from corral.executors import ProcessExecutor
from corral.executors.exitwatch import ShimExitWatch

NEVER_S = 3600.0  # a poll interval no test waits out: only a wake-up can make the agent look


class HoldingServer:
    """Answers each sync with the next reply given; with none left, holds a long poll until released (as the
    server holds it until there is news). Records what the agent reported."""

    def __init__(self) -> None:
        self.replies: list[AgentSyncReply] = []
        self.reports: list[AgentSync] = []
        self.released = threading.Event()
        self._lock = threading.Lock()

    def register(self, body: AgentRegister) -> None:
        pass

    def sync(self, node: str, body: AgentSync) -> AgentSyncReply:
        with self._lock:
            self.reports.append(body)
            reply = self.replies.pop(0) if self.replies else None
        if reply is not None:
            return reply
        if body.wait_s > 0:
            self.released.wait(body.wait_s)
        return AgentSyncReply(assignments=[], cancels=[], acked_exits=[], cancel_grace_s=5.0)

    def upload_logs(self, node: str, job_id: int, offset: int, data: bytes, attempt: int = 1, rank: int = 0) -> int:
        return offset + len(data)

    def send_telemetry(self, node: str, batch: object) -> None:
        pass


def _assignment(job: int, script: str) -> Assignment:
    return Assignment(job_id=job, attempt=1, command=["sh", "-c", script], env={}, workdir=None, uid=200_001,
                      gid=200_001, gpu_indices=[0], gpu_uuids=["GPU-0"])  # fmt: skip


@dataclass
class Node:
    agent: Agent
    server: HoldingServer
    executor: ProcessExecutor
    thread: threading.Thread  # runs the agent once started


@pytest.fixture
def node() -> Iterator[Node]:
    if not ShimExitWatch.supported():
        pytest.skip("no pidfds here (Linux 5.3 or newer): the agent's poll alone notices exits")
    base = Path(tempfile.mkdtemp(prefix="corral-wakeup-"))
    os.chmod(base, 0o711)  # the executor's work root beside it must be reachable by jobs' users
    server = HoldingServer()
    executor = ProcessExecutor(base / "state")
    agent = Agent(server, "n1", load_gpu_backend("sim:2xH100-80GB", "n1"), executor, base / "logs",  # type: ignore[arg-type]
                  poll_wait_s=60, watch_interval_s=NEVER_S, metrics_interval_s=0,
                  checkpoint_dir=executor.work_root / "checkpoints")  # fmt: skip
    executor.set_exit_listener(agent.wake)  # as build_agent wires it
    thread = threading.Thread(target=agent.run, daemon=True)
    try:
        yield Node(agent, server, executor, thread)
    finally:
        agent.stop()
        server.released.set()
        if thread.is_alive():
            thread.join(10)
        for key in executor.running():
            executor.cancel(key, 0.0)
        wait_for(lambda: not executor.running(), 10, "the runs stopped")  # before their files go
        executor.close()
        shutil.rmtree(base, ignore_errors=True)
    assert not thread.is_alive()


def test_an_exit_is_reported_at_once_though_the_poll_interval_never_comes(node: Node) -> None:
    go = node.executor.work_root.parent / "go"  # the job ends once the agent is in its long poll, not before
    script = f"while [ ! -e {go} ]; do sleep 0.01; done; exit 3"
    node.server.replies.append(
        AgentSyncReply(assignments=[_assignment(1, script)], cancels=[], acked_exits=[], cancel_grace_s=5.0)
    )
    node.thread.start()
    wait_for(lambda: any(r.wait_s > 0 and r.running for r in list(node.server.reports)), 30, "a long poll, job running")
    go.touch()

    def reported() -> list[AgentSync]:
        return [r for r in list(node.server.reports) if any(e.job_id == 1 for e in r.exits)]

    first = wait_for(reported, 30, "the exit of job 1 reported")[0]
    assert first.wait_s == 0  # by the watch loop, woken by the exit (the long poll is still held)
    assert [(e.job_id, e.exit_code) for e in first.exits] == [(1, 3)]
