"""ProcessExecutor with real processes: environment, logs, exit codes, cancel, recovery after a crash."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest
from executor_helpers import make_spec, wait_exit, wait_for

from corral.core.errors import ValidationError
from corral.executors import ProcessExecutor
from corral.executors.jobdir import SHIM_FILE


def test_gpu_environment_is_exactly_the_given_gpus(
    executor: ProcessExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")  # the agent's own must not leak
    script = 'echo "cvd=[$CUDA_VISIBLE_DEVICES] nvd=[$NVIDIA_VISIBLE_DEVICES] id=[$CORRAL_JOB_ID] foo=[$FOO]"'
    spec = make_spec(
        tmp_path, "j-gpu", script, env={"FOO": "bar"}, gpu_indices=(2, 5), gpu_uuids=("GPU-aaa", "GPU-bbb")
    )
    executor.launch(spec)
    assert wait_exit(executor, "j-gpu").exit_code == 0
    assert spec.log_path.read_text() == "cvd=[2,5] nvd=[GPU-aaa,GPU-bbb] id=[j-gpu] foo=[bar]\n"


def test_job_without_gpus_sees_none(executor: ProcessExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = make_spec(tmp_path, "j-nogpu", 'echo "cvd=[${CUDA_VISIBLE_DEVICES-unset}] nvd=[$NVIDIA_VISIBLE_DEVICES]"')
    executor.launch(spec)
    wait_exit(executor, "j-nogpu")
    assert spec.log_path.read_text() == "cvd=[] nvd=[void]\n"


def test_stdout_and_stderr_are_appended_to_the_log(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    spec = make_spec(tmp_path, "j-log", "echo out; echo err >&2", workdir=str(user_dir))
    spec.log_path.parent.mkdir(parents=True)
    spec.log_path.write_text("earlier\n")
    executor.launch(spec)
    wait_exit(executor, "j-log")
    assert spec.log_path.read_text().splitlines() == ["earlier", "out", "err"]


@pytest.mark.parametrize(
    ("name", "script", "code"),
    [
        ("success", "exit 0", 0),
        ("failure", "exit 3", 3),
        ("killed by SIGKILL", "kill -KILL $$", 137),
        ("killed by SIGTERM", "kill -TERM $$", 143),
    ],
)
def test_exit_codes(executor: ProcessExecutor, tmp_path: Path, name: str, script: str, code: int) -> None:
    executor.launch(make_spec(tmp_path, "j", script))
    record = wait_exit(executor, "j")
    assert (record.exit_code, record.reason) == (code, ""), name


def test_commands_that_cannot_start_become_exit_records(
    executor: ProcessExecutor, tmp_path: Path, user_dir: Path
) -> None:
    not_executable = user_dir / "script.sh"
    not_executable.write_text("#!/bin/sh\necho hi\n")
    cases = {
        "missing": (make_spec(tmp_path, "missing", "", command=("no-such-command-xyz",)), 127, "command not found"),
        "noexec": (make_spec(tmp_path, "noexec", "", command=(str(not_executable),)), 126, "permission denied"),
        "nowd": (make_spec(tmp_path, "nowd", "true", workdir=str(user_dir / "gone")), 1, "workdir not found"),
    }
    for spec, _, _ in cases.values():
        executor.launch(spec)
    for job_id, (spec, code, reason) in cases.items():
        record = wait_exit(executor, job_id)
        assert record.exit_code == code and record.reason.startswith(reason), job_id
        assert reason in spec.log_path.read_text()


def test_workdir_is_used(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    spec = make_spec(tmp_path, "j-wd", "pwd", workdir=str(user_dir))
    executor.launch(spec)
    wait_exit(executor, "j-wd")
    assert spec.log_path.read_text().strip() == str(user_dir)


def test_launch_is_idempotent_and_ack_forgets(executor: ProcessExecutor, state_dir: Path, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "j-once", "echo hi")
    executor.launch(spec)
    executor.launch(spec)
    wait_exit(executor, "j-once")
    executor.launch(spec)  # finished but not acked: still known, still a no-op
    assert executor.collect_exits() == executor.collect_exits()  # repeated until ack
    assert spec.log_path.read_text() == "hi\n"
    executor.ack("j-once")
    executor.ack("j-once")
    assert executor.collect_exits() == [] and not (state_dir / "j-once").exists()


def test_cancel_sends_sigterm_to_the_group(executor: ProcessExecutor, tmp_path: Path) -> None:
    executor.launch(make_spec(tmp_path, "j-term", "sleep 30 & wait"))  # the child's child gets it too
    wait_for(lambda: executor.running() == ["j-term"])
    executor.cancel("j-term", grace_s=30.0)
    record = wait_exit(executor, "j-term", timeout_s=5.0)
    assert (record.exit_code, record.reason) == (143, "cancelled")


def test_job_ignoring_sigterm_is_killed_after_grace(executor: ProcessExecutor, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "j-stubborn", "trap '' TERM; echo ready; sleep 30")
    executor.launch(spec)
    wait_for(lambda: spec.log_path.exists() and "ready" in spec.log_path.read_text())
    executor.cancel("j-stubborn", grace_s=0.3)
    record = wait_exit(executor, "j-stubborn", timeout_s=5.0)
    assert record.exit_code == 137 and record.reason.startswith("cancelled")


def test_cancel_and_ack_of_unknown_or_running_ids_are_noops(executor: ProcessExecutor, tmp_path: Path) -> None:
    executor.cancel("nobody", grace_s=0.0)
    executor.ack("nobody")
    executor.launch(make_spec(tmp_path, "j-run", "sleep 30"))
    executor.ack("j-run")
    assert executor.running() == ["j-run"]
    executor.launch(make_spec(tmp_path, "j-done", "exit 0"))
    wait_exit(executor, "j-done")
    executor.cancel("j-done", grace_s=0.0)
    assert wait_exit(executor, "j-done").reason == ""


def test_recovery_after_the_agent_dies(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    # j-long runs until the test signals it (no race with a clock on a busy machine), then exits 7
    long_spec = make_spec(tmp_path, "j-long", "trap 'exit 7' USR1; echo $$; while :; do sleep 0.05; done")
    first.launch(long_spec)
    first.launch(make_spec(tmp_path, "j-done", "exit 4"))
    wait_exit(first, "j-done")
    del first  # the agent process "dies": nothing is stopped, nothing is written
    second = ProcessExecutor(state_dir)
    assert second.running() == ["j-long"]
    assert [r.exit_code for r in second.collect_exits()] == [4]
    pid = int(wait_for(lambda: long_spec.log_path.exists() and long_spec.log_path.read_text().strip()))
    os.kill(pid, signal.SIGUSR1)
    assert wait_exit(second, "j-long").exit_code == 7
    second.ack("j-long")
    second.ack("j-done")
    assert ProcessExecutor(state_dir).collect_exits() == []


def test_dead_shim_without_exit_is_reported_lost_and_its_group_stopped(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    spec = make_spec(tmp_path, "j-lost", "echo $$; exec sleep 30")
    first.launch(spec)
    child_pid = int(wait_for(lambda: spec.log_path.exists() and spec.log_path.read_text().strip()))
    shim = json.loads((state_dir / "j-lost" / SHIM_FILE).read_text())
    os.kill(shim["pid"], signal.SIGKILL)  # the shim alone dies; its child lives on in the group
    record = wait_exit(ProcessExecutor(state_dir), "j-lost")
    assert (record.exit_code, record.reason) == (255, "lost: shim died")
    wait_for(lambda: not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie")


def test_pending_kill_survives_an_agent_restart(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    spec = make_spec(tmp_path, "j-stubborn", "trap '' TERM; echo ready; sleep 30")
    first.launch(spec)
    wait_for(lambda: spec.log_path.exists() and "ready" in spec.log_path.read_text())
    first.cancel("j-stubborn", grace_s=0.5)
    first.close()  # the dying agent's timer never fires
    record = wait_exit(ProcessExecutor(state_dir), "j-stubborn", timeout_s=5.0)
    assert record.exit_code == 137


def test_shim_found_when_agent_died_before_recording_it(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    first.launch(make_spec(tmp_path, "j-window", "sleep 30"))
    (state_dir / "j-window" / SHIM_FILE).unlink()
    second = ProcessExecutor(state_dir)
    assert second.running() == ["j-window"]


def test_unsafe_job_ids_are_rejected(executor: ProcessExecutor, tmp_path: Path) -> None:
    for bad in ("../escape", "", "a/b", ".hidden"):
        with pytest.raises(ValidationError):
            executor.launch(make_spec(tmp_path, bad, "true"))


def test_concurrent_use_from_threads(executor: ProcessExecutor, tmp_path: Path) -> None:
    def launch(i: int) -> None:
        executor.launch(make_spec(tmp_path, f"j-{i}", f"exit {i}"))
        executor.running()

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: len(executor.collect_exits()) == 8)
    assert sorted(r.exit_code for r in executor.collect_exits()) == list(range(8))
