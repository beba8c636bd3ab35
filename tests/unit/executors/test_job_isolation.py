"""Jobs run as their own Unix identity, in a clean environment, with private files: the attacks of issue 11 by a
member's job (read the agent's state and credentials, another user's job dir and log, the agent's environment)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from executor_helpers import OTHER_IDENTITY, make_spec, wait_exit, wait_for

from corral.executors import ProcessExecutor
from realparts import missing_real_part


@pytest.fixture(autouse=True)
def _as_root() -> None:
    if os.geteuid() != 0:
        missing_real_part("root", "switching users needs the tests to run as root (they do in CI)")


def _output(executor: ProcessExecutor, spec_log: Path, job_id: str) -> tuple[int, str]:
    record = wait_exit(executor, job_id)
    return record.exit_code, spec_log.read_text()


def test_job_runs_as_its_identity_without_supplementary_groups(executor: ProcessExecutor, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "j-id", 'echo "$(id -u) $(id -g) [$(id -G)] $USER $LOGNAME"')
    executor.launch(spec)
    assert _output(executor, spec.log_path, "j-id") == (0, "200001 200001 [200001] alice alice\n")
    assert executor.isolation == "users"


def test_environment_is_only_what_the_job_asked_for(
    executor: ProcessExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "CORRAL_DATA_DIR": "/srv/corral",
        "CORRAL_JOIN_TOKEN": "cj_secret",
        "PYTHONPATH": "/agent",
        "VIRTUAL_ENV": "/agent/.venv",
        "AWS_SECRET_ACCESS_KEY": "agent-secret",
    }.items():
        monkeypatch.setenv(name, value)
    spec = make_spec(
        tmp_path,
        "j-env",
        "",
        command=("env",),
        env={"FOO": "bar", "CORRAL_JOB_ID": "forged"},
        gpu_indices=(1,),
        gpu_uuids=("GPU-1",),
        checkpoint_dir=executor.checkpoint_dir("7"),
    )
    executor.launch(spec)
    code, out = _output(executor, spec.log_path, "j-env")
    env = dict(line.split("=", 1) for line in out.splitlines())
    run_dir = str(executor.run_dir("j-env"))
    assert code == 0
    assert env == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": run_dir,
        "USER": "alice",
        "LOGNAME": "alice",
        "FOO": "bar",
        "CUDA_VISIBLE_DEVICES": "1",
        "NVIDIA_VISIBLE_DEVICES": "GPU-1",
        "CORRAL_JOB_ID": "j-env",
        "CORRAL_CHECKPOINT_DIR": str(executor.checkpoint_dir("7")),
        "CORRAL_NOTICE_FILE": str(executor.checkpoint_dir("7") / ".corral-notice"),
    }


def test_default_workdir_is_the_jobs_own_private_dir(executor: ProcessExecutor, tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        "j-home",
        "pwd; touch mine; stat -c '%u %a' mine; sleep 30",
        checkpoint_dir=executor.checkpoint_dir("1"),
    )
    executor.launch(spec)
    run_dir = executor.run_dir("j-home")
    wait_for(lambda: spec.log_path.exists() and len(spec.log_path.read_text().splitlines()) == 2)
    assert spec.log_path.read_text().splitlines() == [str(run_dir), "200001 600"]  # umask 077
    modes = {
        p: (p.stat().st_uid, stat.S_IMODE(p.stat().st_mode))
        for p in (run_dir, executor.checkpoint_dir("1"), spec.log_path, executor.work_root)
    }
    assert modes == {
        run_dir: (200_001, 0o700),
        executor.checkpoint_dir("1"): (200_001, 0o700),
        spec.log_path: (200_001, 0o600),
        executor.work_root: (0, 0o711),
    }
    executor.cancel("j-home", grace_s=0.0)
    wait_exit(executor, "j-home")
    executor.ack("j-home")
    assert not run_dir.exists() and executor.checkpoint_dir("1").exists()  # scratch goes, checkpoints stay


def test_a_job_cannot_read_the_agents_files_or_another_users_job(
    executor: ProcessExecutor, state_dir: Path, tmp_path: Path
) -> None:
    victim = make_spec(
        tmp_path,
        "j-bob",
        'echo "BOB_SECRET=$BOB_SECRET"; echo s3cret > notes; sleep 30',
        env={"BOB_SECRET": "hunter2"},
        identity=OTHER_IDENTITY,
    )
    executor.launch(victim)
    wait_for(lambda: (executor.run_dir("j-bob") / "notes").exists())
    bob_dir = executor.run_dir("j-bob")
    attacks = {
        "bob's job dir": f"ls {bob_dir}",
        "bob's file": f"cat {bob_dir}/notes",
        "bob's spec": f"cat {state_dir}/j-bob/spec.json",
        "bob's log": f"cat {victim.log_path}",
        "bob's environ": "cat /proc/$(pgrep -u 200002 sleep | head -1)/environ",
        "the work root": f"ls {executor.work_root}",
    }
    for i, (what, script) in enumerate(attacks.items()):
        spec = make_spec(tmp_path, f"j-attack-{i}", script)
        executor.launch(spec)
        code, out = _output(executor, spec.log_path, f"j-attack-{i}")
        assert code != 0 and "hunter2" not in out and "s3cret" not in out, (what, out)
    executor.cancel("j-bob", grace_s=0.0)


def test_a_job_of_uid_0_or_without_identity_is_refused(executor: ProcessExecutor, tmp_path: Path) -> None:
    from corral.core.unix_identity import JobIdentity

    executor.launch(make_spec(tmp_path, "j-root", "id -u", identity=JobIdentity(0, 0, "root")))
    executor.launch(make_spec(tmp_path, "j-gid0", "id -u", identity=JobIdentity(200_003, 0, "x")))
    executor.launch(make_spec(tmp_path, "j-none", "id -u", identity=None))
    for job_id in ("j-root", "j-gid0", "j-none"):
        record = wait_exit(executor, job_id)
        assert record.exit_code == 126 and record.reason.startswith("refused"), job_id


def test_a_workdir_the_user_may_not_enter_is_not_entered(executor: ProcessExecutor, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "j-wd-root", "ls", workdir=str(tmp_path))  # tmp_path: root's, under a 0700 parent
    executor.launch(spec)
    record = wait_exit(executor, "j-wd-root")
    assert record.exit_code == 1 and record.reason.startswith("workdir not usable by uid 200001"), record


def test_single_user_mode_is_declared_and_still_cleans_the_environment(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_JOIN_TOKEN", "cj_secret")
    executor = ProcessExecutor(state_dir, switch_users=False)
    assert executor.isolation == "single-user"
    spec = make_spec(tmp_path, "j-single", 'echo "$(id -u) [${CORRAL_JOIN_TOKEN-unset}]"')
    executor.launch(spec)
    assert _output(executor, spec.log_path, "j-single") == (0, f"{os.getuid()} [unset]\n")
    executor.close()


def test_a_work_root_the_jobs_cannot_reach_is_refused_at_start(tmp_path: Path) -> None:
    from corral.core.errors import ValidationError

    with pytest.raises(ValidationError, match="cannot be reached") as e:
        ProcessExecutor(tmp_path / "state", work_root=tmp_path / "work")  # tmp_path's parent is 0700
    assert e.value.field == "jobs_dir"


def test_a_job_holds_no_descriptor_of_its_shim_and_cannot_stop_it(executor: ProcessExecutor, tmp_path: Path) -> None:
    """The shim forks and execs the job itself (no subprocess): the job starts with stdin, stdout and stderr only
    (not the shim's log, its report pipe or a pidfd), and as its own user it can neither signal its root shim nor
    keep its exit from being recorded."""
    script = (
        "ls -m -w 0 /proc/$$/fd; "  # a plain command: a pipeline's own pipes would be the shell's while ls looks
        'if kill -KILL "$PPID" 2>/dev/null; then echo "killed the shim"; else echo "shim kept"; fi; exit 7'
    )
    spec = make_spec(tmp_path, "j-fds", script)
    executor.launch(spec)
    code, log = _output(executor, spec.log_path, "j-fds")
    fds = log.splitlines()[0].split(", ")
    assert fds == ["0", "1", "2"], log  # the job's shell's own descriptors
    assert "shim kept" in log and code == 7, log
