"""RuntimeRouter: the agent's one Executor over its runtimes. A process job goes to the process executor as before;
an image job on a node without an engine ends at once with 126 and a reason (the scheduler never sends one there);
the agent finds an engine itself, or says there is none."""

from __future__ import annotations

from pathlib import Path

from executor_helpers import make_spec, wait_exit

from corral.agent.runtimes import connect_engine
from corral.core.containers import ContainerSpec
from corral.executors import ProcessExecutor
from corral.executors.base import ExitRecord
from corral.executors.router import RuntimeRouter


def test_process_jobs_as_before_and_image_jobs_refused_without_an_engine(state_dir: Path, tmp_path: Path) -> None:
    process = ProcessExecutor(state_dir)
    router = RuntimeRouter(process)
    assert router.runtimes == ("process",) and router.image_digests() == {}
    router.launch(make_spec(tmp_path, "1.1", "echo plain"))
    assert wait_exit(process, "1.1").exit_code == 0
    router.launch(make_spec(tmp_path, "2.1", "true", container=ContainerSpec("x")))
    exits = router.collect_exits()
    assert ExitRecord("2.1", 126, "refused: this node runs no containers") in exits
    assert any(e.job_id == "1.1" for e in exits)
    router.ack("2.1")
    router.ack("1.1")
    assert router.collect_exits() == []


def test_no_engine_where_none_answers() -> None:
    assert connect_engine("none") is None and connect_engine("") is None
    assert connect_engine("unix:///nonexistent/docker.sock") is None
