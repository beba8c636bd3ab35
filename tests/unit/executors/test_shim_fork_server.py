"""The shim fork server: shims forked from one warm interpreter are what started shims are, and outlive it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from executor_helpers import OTHER_IDENTITY, make_spec, wait_exit, wait_for

from corral.executors import ProcessExecutor, process
from corral.executors.jobdir import SHIM_FILE, JobDir
from corral.executors.process import _SHIM_ENV, _SHIM_PATH
from corral.executors.shim import _REAP_EVERY_S
from corral.executors.shimserver import ForkServerError, ShimForkServer


def _shim_of(state_dir: Path, job_id: str) -> psutil.Process:
    shim = JobDir(state_dir / job_id).load_shim()
    assert shim is not None
    return psutil.Process(shim.pid)


def test_a_forked_shim_is_what_a_started_one_is(executor: ProcessExecutor, state_dir: Path, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "j-forked", "echo started; sleep 30")
    executor.launch(spec)
    wait_for(lambda: spec.log_path.exists() and "started" in spec.log_path.read_text())
    shim = _shim_of(state_dir, "j-forked")
    server = psutil.Process(shim.ppid())
    assert server.cmdline()[-1] == "--serve" and server.ppid() == os.getpid()  # forked, not a fresh interpreter
    assert os.getsid(shim.pid) == shim.pid and os.getpgid(shim.pid) == shim.pid  # leads its own session
    assert shim.cwd() == str(state_dir / "j-forked")
    fds = {fd: os.readlink(f"/proc/{shim.pid}/fd/{fd}") for fd in map(int, os.listdir(f"/proc/{shim.pid}/fd"))}
    assert fds[0] == fds[1] == os.devnull and fds[2] == str(spec.log_path)
    server_pipes = {os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in (0, 1)}
    assert server_pipes.isdisjoint(fds.values())  # the server's request and answer pipes are not kept
    env = shim.environ()
    assert set(env) <= {"PATH", "LANG"}  # none of the agent's environment
    executor.cancel("j-forked", grace_s=0.0)
    assert wait_exit(executor, "j-forked").reason.startswith("cancelled")


def test_jobs_outlive_the_fork_server_and_a_new_one_starts(
    executor: ProcessExecutor, state_dir: Path, tmp_path: Path
) -> None:
    executor.launch(make_spec(tmp_path, "j-before", "trap 'exit 5' USR1; echo $$; while :; do sleep 0.05; done"))
    job_pid = int(wait_for(lambda: (tmp_path / "logs" / "j-before.log").read_text().strip()))
    server = psutil.Process(_shim_of(state_dir, "j-before").ppid())
    server.kill()
    server.wait(5)
    executor.launch(make_spec(tmp_path, "j-after", "trap 'exit 3' USR1; echo $$; while :; do sleep 0.05; done"))
    after_pid = int(wait_for(lambda: (tmp_path / "logs" / "j-after.log").read_text().strip()))
    new_server = psutil.Process(_shim_of(state_dir, "j-after").ppid())
    assert new_server.pid != server.pid and new_server.cmdline()[-1] == "--serve"  # a new server forked it
    os.kill(after_pid, signal.SIGUSR1)
    assert wait_exit(executor, "j-after").exit_code == 3
    os.kill(job_pid, signal.SIGUSR1)
    assert wait_exit(executor, "j-before").exit_code == 5


def test_closing_the_executor_ends_the_server_not_the_jobs(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    spec = make_spec(tmp_path, "j-lives", "trap 'exit 6' USR1; echo $$; while :; do sleep 0.05; done")
    first.launch(spec)
    job_pid = int(wait_for(lambda: spec.log_path.exists() and spec.log_path.read_text().strip()))
    server = psutil.Process(_shim_of(state_dir, "j-lives").ppid())
    first.close()
    server.wait(5)
    second = ProcessExecutor(state_dir)
    try:
        assert second.running() == ["j-lives"]
        os.kill(job_pid, signal.SIGUSR1)
        assert wait_exit(second, "j-lives").exit_code == 6
    finally:
        second.close()


def test_ended_shims_are_reaped_once_seen(executor: ProcessExecutor, state_dir: Path, tmp_path: Path) -> None:
    executor.launch(make_spec(tmp_path, "j-first", "sleep 30"))
    server = psutil.Process(_shim_of(state_dir, "j-first").ppid())
    for i in range(5):
        executor.launch(make_spec(tmp_path, f"j-{i}", "true"))
    executor.cancel("j-first", grace_s=0.0)
    wait_for(lambda: len(executor.collect_exits()) == 6)  # the server reaps each once the agent identified it
    wait_for(lambda: not server.children(), 5.0, "no zombie shims left under the fork server")


def test_a_shims_pid_stays_taken_until_the_agent_handled_its_end(
    executor: ProcessExecutor, state_dir: Path, tmp_path: Path
) -> None:
    """Until the agent has read the exit (and killed what the job left in its group), the ended shim stays an
    unreaped child of its server: its pid, and the group of that number, cannot be a stranger's to be killed."""
    executor.launch(make_spec(tmp_path, "j-end", "true"))
    shim = _shim_of(state_dir, "j-end")
    wait_for(lambda: (state_dir / "j-end" / "exit").exists())
    time.sleep(3 * _REAP_EVERY_S)  # the server looked for shims to reap several times meanwhile
    assert shim.status() == psutil.STATUS_ZOMBIE  # ended, and still holding its pid
    assert wait_exit(executor, "j-end").exit_code == 0  # handled: now the server may reap it
    wait_for(lambda: not psutil.pid_exists(shim.pid), 5.0, "the shim reaped once released")


def test_a_cancel_at_once_after_launch_is_never_lost(executor: ProcessExecutor, tmp_path: Path) -> None:
    """A SIGTERM to the group between the shim's start and the job's exec used to be swallowed by the shim's
    handler (or by the job's process before exec): the job then ran its full length. Now it ends the job."""
    for i in range(10):
        executor.launch(make_spec(tmp_path, f"j-{i}", "sleep 30 & wait"))
        executor.cancel(f"j-{i}", grace_s=60.0)  # no SIGKILL to save the day
    for i in range(10):
        record = wait_exit(executor, f"j-{i}", timeout_s=10.0)
        assert (record.exit_code, record.reason) == (143, "cancelled")


def test_a_failing_fork_server_falls_back_to_started_shims(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(python: str, shim_path: str, env: dict[str, str]) -> ShimForkServer:
        return ShimForkServer("/bin/true", shim_path, env)  # it "starts", then ends without a word

    monkeypatch.setattr(process, "ShimForkServer", broken)
    executor = ProcessExecutor(state_dir)
    try:
        executor.launch(make_spec(tmp_path, "j-direct", "echo ran"))
        assert wait_exit(executor, "j-direct").exit_code == 0
        assert (tmp_path / "logs" / "j-direct.log").read_text() == "ran\n"
        shim_cmdline = None
        executor.launch(make_spec(tmp_path, "j-direct-2", "echo $PPID; sleep 30"))
        shim_pid = int(wait_for(lambda: (tmp_path / "logs" / "j-direct-2.log").read_text().strip()))
        shim_cmdline = psutil.Process(shim_pid).cmdline()
        assert shim_cmdline[-1] == str(state_dir / "j-direct-2")  # started as its own interpreter
        assert psutil.Process(shim_pid).ppid() == os.getpid()
        executor.cancel("j-direct-2", grace_s=0.0)
        wait_exit(executor, "j-direct-2")
    finally:
        executor.close()


def test_the_server_refuses_what_it_cannot_open_as_a_job_error(tmp_path: Path) -> None:
    server = ShimForkServer(sys.executable, _SHIM_PATH, _SHIM_ENV)
    try:
        with pytest.raises(OSError) as caught:
            server.spawn(tmp_path / "job", tmp_path / "no-such-dir" / "log")
        assert not isinstance(caught.value, ForkServerError)  # the job's fault, not the server's
        assert "No such file" in str(caught.value)
        assert server.pid is not None  # and the server serves on
    finally:
        server.close()
    assert server.pid is None


# ---- a fork server that fails after it forked: the job still runs exactly once ----------------------------------
_DYING_SERVER = """
import json, os, sys, time
sys.path.insert(0, {shim_dir!r})
import shim
data = b""
while not data.endswith(b"\\n"):
    data += os.read(0, 65536)
request = json.loads(data)
log = os.open(request["log_path"], os.O_WRONLY | os.O_APPEND)
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(0)  # the server's pipes: the agent sees the server end at once
    os.close(1)
    time.sleep({child_delay_s})  # a child the scheduler ran late: after the agent gave up on this server
    shim._become_shim(os.path.abspath(request["job_dir"]), log, ready_w, ())
os.close(ready_w)
with open({pid_file!r}, "w") as f:
    f.write(str(pid))
if {child_delay_s} == 0:
    os.read(ready_r, 1)  # the shim leads its session: now die
os._exit(0)  # dies without answering
"""


def _dying_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child_delay_s: float) -> Path:
    """Have the executor's fork server fork the shim (or a late one) and die before it answers; the forked pid's
    file."""
    pid_file = tmp_path / "forked.pid"
    (tmp_path / "fake").mkdir()
    script = tmp_path / "fake" / "shim.py"  # what find_shim looks for: `.../shim.py --serve`, in the job's dir
    script.write_text(
        _DYING_SERVER.format(shim_dir=os.path.dirname(_SHIM_PATH), child_delay_s=child_delay_s, pid_file=str(pid_file))
    )

    def dying(python: str, shim_path: str, env: dict[str, str]) -> ShimForkServer:
        server = ShimForkServer(python, shim_path, env)
        server._argv = [python, "-I", "-S", str(script), "--serve"]  # the agent's end is tested, with this server
        return server

    monkeypatch.setattr(process, "ShimForkServer", dying)
    return pid_file


def test_a_shim_forked_before_the_server_died_is_adopted_not_doubled(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = _dying_server(tmp_path, monkeypatch, child_delay_s=0)
    executor = ProcessExecutor(state_dir)
    try:
        spec = make_spec(tmp_path, "j-once", "echo ran; sleep 0.3; exit 4")  # found running, or after its end
        executor.launch(spec)
        assert wait_exit(executor, "j-once").exit_code == 4
        assert spec.log_path.read_text() == "ran\n"  # once: the forked shim's run, adopted
        assert JobDir(state_dir / "j-once").load_shim() is not None
        assert int(pid_file.read_text()) == JobDir(state_dir / "j-once").load_shim().pid  # type: ignore[union-attr]
    finally:
        executor.close()


def test_a_late_shim_of_a_dead_server_finds_the_job_taken(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = _dying_server(tmp_path, monkeypatch, child_delay_s=1.0)
    executor = ProcessExecutor(state_dir)
    try:
        spec = make_spec(tmp_path, "j-taken", "echo ran; exit 5")
        executor.launch(spec)  # the server died without a word: the agent claims the job and starts its own shim
        assert wait_exit(executor, "j-taken").exit_code == 5
        late = int(wait_for(lambda: pid_file.exists() and pid_file.read_text()))
        wait_for(lambda: not psutil.pid_exists(late) or psutil.Process(late).status() == psutil.STATUS_ZOMBIE)
        assert spec.log_path.read_text() == "ran\n"  # the late shim found the claim taken and ran nothing
    finally:
        executor.close()


# ---- finding a shim again after an agent crash: never a job dressed up as one ------------------------------------
def test_a_shim_is_found_again_through_a_symlinked_data_dir(base_dir: Path, tmp_path: Path) -> None:
    real = base_dir / "real-state"
    link = base_dir / "state-link"
    real.mkdir(mode=0o700)
    link.symlink_to(real)
    first = ProcessExecutor(link)
    try:
        first.launch(make_spec(tmp_path, "j-linked", "sleep 30"))
        (link / "j-linked" / SHIM_FILE).unlink()  # the agent died before it recorded the shim
        second = ProcessExecutor(link)
        assert second.running() == ["j-linked"]
        second.cancel("j-linked", grace_s=0.0)
        assert wait_exit(second, "j-linked").reason.startswith("cancelled")
        second.close()
    finally:
        first.close()


def test_a_job_dressed_up_as_another_jobs_shim_is_not_taken_for_it(state_dir: Path, tmp_path: Path) -> None:
    first = ProcessExecutor(state_dir)
    victim_dir = state_dir / "j-victim"
    # a tenant's job whose command line ends as a started shim's would for the victim's job dir
    decoy = f"exec python3 -c 'import time; time.sleep(30)' /opt/corral/shim.py {victim_dir}"
    first.launch(make_spec(tmp_path, "j-decoy", f"echo up; {decoy}"))
    wait_for(lambda: "up" in (tmp_path / "logs" / "j-decoy.log").read_text())
    first.launch(make_spec(tmp_path, "j-victim", "sleep 30", identity=OTHER_IDENTITY))
    real_shim = JobDir(victim_dir).load_shim()
    (victim_dir / SHIM_FILE).unlink()  # the agent died before it recorded the victim's shim
    second = ProcessExecutor(state_dir)
    try:
        assert JobDir(victim_dir).load_shim() == real_shim  # found again: the real one, not the decoy
        for job_id in ("j-victim", "j-decoy"):
            second.cancel(job_id, grace_s=0.0)
            assert wait_exit(second, job_id).reason.startswith("cancelled")
    finally:
        second.close()
        first.close()
