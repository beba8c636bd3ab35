"""The node's last guard against a GPU given twice (issue 17's chaos): a run the server gives this node never starts
on a GPU that a run the agent was told to stop still holds (a node back from LOST: the server freed its old
attempts' GPUs; those attempts take their grace to end). The agent and a real ProcessExecutor; the server is a
script of replies (the real exchange is in tests/e2e/test_chaos.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import wait_for

from corral.agent.gpu import load_gpu_backend
from corral.agent.journal import overlaps, read_intervals
from corral.agent.runner import EXIT_STOPPED_BEFORE_START, Agent
from corral.api.schemas import AgentSync, AgentSyncReply, Assignment, RunRef
from corral.executors import ProcessExecutor


class ScriptedServer:
    """Answers each sync with the next reply given; records what the agent reported."""

    def __init__(self) -> None:
        self.replies: list[AgentSyncReply] = []
        self.reports: list[AgentSync] = []

    def sync(self, node: str, body: AgentSync) -> AgentSyncReply:
        self.reports.append(body)
        if self.replies:
            return self.replies.pop(0)
        return AgentSyncReply(assignments=[], cancels=[], acked_exits=[], cancel_grace_s=5.0)

    def upload_logs(self, node: str, job_id: int, offset: int, data: bytes, attempt: int = 1, rank: int = 0) -> int:
        return offset + len(data)


def _reply(assign: list[Assignment] = (), cancel: list[RunRef] = (), ack: list[RunRef] = ()) -> AgentSyncReply:  # type: ignore[assignment]
    return AgentSyncReply(assignments=list(assign), cancels=list(cancel), acked_exits=list(ack), cancel_grace_s=5.0)


def _assignment(job: int, attempt: int, script: str, gpu: int = 0) -> Assignment:
    return Assignment(job_id=job, attempt=attempt, command=["sh", "-c", script], env={}, workdir=None, uid=200_001, gid=200_001,
                      gpu_indices=[gpu], gpu_uuids=[f"GPU-{gpu}"])  # fmt: skip


@pytest.fixture
def node() -> Iterator[tuple[Agent, ScriptedServer, Path]]:
    base = Path(tempfile.mkdtemp(prefix="corral-handover-"))
    os.chmod(base, 0o711)  # the executor's work root beside it must be reachable by jobs' users
    server = ScriptedServer()
    executor = ProcessExecutor(base / "state")
    agent = Agent(server, "n1", load_gpu_backend("sim:2xH100-80GB", "n1"), executor, base / "logs",  # type: ignore[arg-type]
                  metrics_interval_s=0, checkpoint_dir=executor.work_root / "checkpoints")  # fmt: skip
    try:
        yield agent, server, base
    finally:
        for key in executor.running():
            executor.cancel(key, 0.0)
        wait_for(lambda: not executor.running(), 10, "the runs stopped")  # before their files go (a timer writes them)
        executor.close()
        shutil.rmtree(base, ignore_errors=True)


def _said_up(base: Path, key: str) -> bool:
    log = base / "logs" / f"{key}.log"
    return log.exists() and log.read_text() == "up\n"


def _running(agent: Agent) -> set[str]:
    return set(agent.executor.running())


def test_a_new_run_waits_for_the_gpu_a_stopping_run_holds_then_starts(node: Any) -> None:
    agent, server, base = node
    old = _assignment(7, 1, 'trap "sleep 1; exit 143" TERM; echo up; sleep 60 & wait')
    server.replies.append(_reply([old]))
    agent.sync_once(0)
    wait_for(lambda: _said_up(base, "7.1"), 10, "the old attempt running (its trap set)")
    # The node is back from LOST: in one reply, the old attempt is to stop and the new one gets its GPU.
    server.replies.append(_reply([_assignment(7, 2, "echo second")], cancel=[RunRef(job_id=7, attempt=1)]))
    agent.sync_once(0)
    assert "7.2" not in _running(agent)  # deferred: GPU 0 is still held by attempt 1, stopping
    phases = agent._all_phases()
    assert phases["7.2"].startswith("waiting for GPU 0")
    agent.sync_once(0)
    assert RunRef(job_id=7, attempt=2) in server.reports[-1].running  # the server sees it as this node's
    wait_for(lambda: agent.launch_deferred(), 10, "the new attempt started once the old one ended")
    intervals = read_intervals("n1", base / "logs")
    assert [i.run[:2] for i in intervals] == [(7, 1), (7, 2)]
    assert overlaps(intervals) == []  # the journal: one run at a time on GPU 0


def test_a_deferred_run_cancelled_before_it_starts_is_reported_as_stopped(node: Any) -> None:
    agent, server, base = node
    server.replies.append(_reply([_assignment(8, 1, 'trap "sleep 2; exit 143" TERM; echo up; sleep 60 & wait')]))
    agent.sync_once(0)
    wait_for(lambda: _said_up(base, "8.1"), 10, "running (its trap set)")
    server.replies.append(_reply([_assignment(9, 1, "echo never")], cancel=[RunRef(job_id=8, attempt=1)]))
    agent.sync_once(0)
    server.replies.append(_reply(cancel=[RunRef(job_id=9, attempt=1)]))  # the user cancels job 9 meanwhile
    agent.sync_once(0)
    agent.sync_once(0)
    exits = {(e.job_id, e.exit_code) for e in server.reports[-1].exits}
    assert (9, EXIT_STOPPED_BEFORE_START) in exits and "9.1" not in _running(agent)
    server.replies.append(_reply(ack=[RunRef(job_id=9, attempt=1)]))
    agent.sync_once(0)
    agent.sync_once(0)
    assert all(e.job_id != 9 for e in server.reports[-1].exits)  # acknowledged: not sent again
    assert not agent.launch_deferred()  # and never started


def test_a_cancel_in_the_same_reply_as_its_assignment_still_stops_it(node: Any) -> None:
    agent, server, _ = node
    run = RunRef(job_id=10, attempt=1)
    server.replies.append(_reply([_assignment(10, 1, "sleep 60")], cancel=[run]))
    agent.sync_once(0)
    wait_for(lambda: any(e.job_id == "10.1" for e in agent.executor.collect_exits()), 10, "stopped")
