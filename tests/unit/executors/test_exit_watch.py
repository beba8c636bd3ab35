"""The executor tells its listener the moment a job's shim ends (no poll): for shims it started, and for shims an
earlier executor started (an agent restart: no waitpid can see those). And the job the light shim forks starts as
a job started by subprocess would. Real processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from executor_helpers import make_spec, wait_exit, wait_for

from corral.executors import ProcessExecutor
from corral.executors.exitwatch import ShimExitWatch

needs_pidfd = pytest.mark.skipif(not ShimExitWatch.supported(), reason="no pidfds here (Linux 5.3 or newer)")


@needs_pidfd
def test_the_listener_hears_of_a_job_that_ended(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    ended = threading.Event()
    executor.set_exit_listener(ended.set)
    go = user_dir / "go"
    executor.launch(make_spec(tmp_path, "j-1", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"))
    assert not ended.is_set()
    go.touch()
    wait_for(ended.is_set, 10, "the listener called")
    assert [(r.job_id, r.exit_code) for r in executor.collect_exits()] == [("j-1", 4)]


@needs_pidfd
def test_the_listener_hears_of_a_job_an_earlier_executor_started(
    state_dir: Path, tmp_path: Path, user_dir: Path
) -> None:
    go = user_dir / "go"
    first = ProcessExecutor(state_dir)
    first.launch(make_spec(tmp_path, "j-adopted", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 5"))
    first.close()  # the agent restarts: the job runs on, its shim no child of the next executor
    second = ProcessExecutor(state_dir)
    ended = threading.Event()
    second.set_exit_listener(ended.set)
    try:
        assert second.running() == ["j-adopted"]
        go.touch()
        wait_for(ended.is_set, 10, "the listener called")
        assert wait_exit(second, "j-adopted").exit_code == 5
    finally:
        second.close()


def test_no_listener_no_news_and_exits_still_collected(executor: ProcessExecutor, tmp_path: Path) -> None:
    executor.launch(make_spec(tmp_path, "j-quiet", "exit 6"))
    assert wait_exit(executor, "j-quiet").exit_code == 6


@pytest.mark.parametrize(
    ("name", "script", "code"),
    [
        ("SIGPIPE back to its default (Python ignores it)", "kill -PIPE $$; exit 0", 141),
        ("SIGTERM back to its default (the shim ignores it)", "kill -TERM $$; exit 0", 143),
        ("umask 077", '[ "$(umask)" = 0077 ]', 0),
        ("stdin at its end", "read line; [ $? -ne 0 ]", 0),
    ],
)
def test_the_job_starts_as_a_fresh_process(
    executor: ProcessExecutor, tmp_path: Path, name: str, script: str, code: int
) -> None:
    executor.launch(make_spec(tmp_path, "j-fresh", script))
    assert wait_exit(executor, "j-fresh").exit_code == code, name


def test_a_command_is_found_on_the_jobs_own_path(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    tool = user_dir / "bin" / "my-tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)  # in the job's own dir (user_dir): it reaches it
    spec = make_spec(tmp_path, "j-path", "", command=("my-tool",), env={"PATH": f"/nowhere:{tool.parent}:/usr/bin"})
    executor.launch(spec)
    assert wait_exit(executor, "j-path").exit_code == 0
    assert spec.log_path.read_text() == "found\n"


def test_the_listener_hears_of_a_job_refused_at_launch(state_dir: Path, tmp_path: Path) -> None:
    executor = ProcessExecutor(state_dir, switch_users=True)  # a root agent: a job without an identity is refused
    ended = threading.Event()
    executor.set_exit_listener(ended.set)
    try:
        executor.launch(make_spec(tmp_path, "j-refused", "true", identity=None))
        assert ended.is_set()  # told before launch() returned: nothing to wait for
        assert [r.exit_code for r in executor.collect_exits()] == [126]
    finally:
        executor.close()
