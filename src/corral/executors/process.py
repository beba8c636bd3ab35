"""ProcessExecutor: each job a process group under a shim that outlives the agent and records the exit.

The agent may be killed -9 and restarted: a new ProcessExecutor over the same state_dir finds running
jobs (live shims), finished ones (exit files) and lost ones (dead shim, no exit file) in jobdir files.
Run as root, it runs every job under the job's own Unix identity ("users" isolation); otherwise every job
runs as the agent's user ("single-user", declared at start). See corral.executors.jobhome for the files.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from corral.core.errors import ValidationError
from corral.executors import shim as shim_module
from corral.executors.base import EXIT_CANNOT_EXECUTE, EXIT_LOST, ExitRecord, LaunchSpec, PublishedPort
from corral.executors.exitwatch import ShimExitWatch
from corral.executors.jobdir import (
    JobDir,
    ShimIdentity,
    check_job_id,
    find_shim,
    identify,
    is_alive,
)
from corral.executors.jobhome import (
    CHECKPOINTS,
    compute_child_env,
    compute_home_and_user,
    prepare_log,
    prepare_owned_dir,
    prepare_work_root,
    remove_tree,
)
from corral.executors.shim import claim_job
from corral.executors.shimserver import ForkServerError, ShimForkServer

_SHIM_PATH = str(Path(shim_module.__file__).resolve())
_EXIT_SIGTERM = 128 + signal.SIGTERM
_EXIT_SIGKILL = 128 + signal.SIGKILL
_SHIM_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}  # none of the agent's secrets
_FORK_SERVER_BACKOFF_S = 60.0
_ENDED = 0  # no pid: the job's shim ran it to its end before it was found (see _claim_or_adopt)
_ADOPT_WAIT_S = 5.0  # how long a shim the fork server forked (and claimed its job) may take to enter its job dir

log = logging.getLogger("corral.executors")


@dataclass
class _Job:
    """What this executor knows about one job (mutable; guarded by the executor's lock)."""

    dir: JobDir
    shim: ShimIdentity | None = None
    popen: subprocess.Popen[bytes] | None = None  # only for shims this instance started
    forked: bool = False  # forked by this instance's fork server: released to it once its end is handled
    exit: ExitRecord | None = None
    cancel_deadline: float | None = None  # wall clock, so it survives a restart
    killed: bool = False
    timer: threading.Timer | None = None


class ProcessExecutor:
    """Executor for plain processes. Thread-safe; no method blocks on a job.

    `python` runs the shim (default: this interpreter; it is started with -I so the job's environment
    cannot break it, and -S: the shim needs the standard library only and starts sooner without site).
    `fork_server`: shims are forked by one warm shim process (ShimForkServer) instead of each starting its own
    interpreter; when that server fails, shims start directly for a minute, then it is tried again.
    `work_root` holds the jobs' own dirs (default: beside state_dir, which only suits single-user mode).
    `switch_users` defaults to whether this process is root. Raises ValidationError when jobs' users could not
    reach `work_root`.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        work_root: Path | None = None,
        python: str = sys.executable,
        switch_users: bool | None = None,
        fork_server: bool = True,
    ) -> None:
        self._state_dir = state_dir
        self._work_root = work_root or state_dir.parent / "work"
        self._python = python
        self._switch_users = os.geteuid() == 0 if switch_users is None else switch_users
        self._lock = threading.RLock()
        self._jobs: dict[str, _Job] = {}
        self._exit_listener: Callable[[], None] | None = None
        self._exit_watch = ShimExitWatch(self._tell_exit)
        self._fork_server = ShimForkServer(python, _SHIM_PATH, _SHIM_ENV) if fork_server else None
        self._fork_server_retry_at = 0.0
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state_dir, 0o700)
        prepare_work_root(self._work_root, shared=self._switch_users)
        self._recover()

    @property
    def isolation(self) -> str:
        return "users" if self._switch_users else "single-user"

    @property
    def work_root(self) -> Path:
        return self._work_root

    def run_dir(self, job_id: str) -> Path:
        """The job's own dir: HOME (unless its account has one) and default workdir."""
        return self._work_root / job_id

    def checkpoint_dir(self, job_id: str) -> Path:
        """Where `job_id` (the job, not the run) keeps checkpoints across attempts on this node."""
        return self._work_root / CHECKPOINTS / job_id

    # ----- Executor -----
    def launch(self, spec: LaunchSpec) -> None:
        check_job_id(spec.job_id)
        if not self._launch(spec):
            self._tell_exit()  # it ended before it started: news for collect_exits() as much as a shim's end

    def _launch(self, spec: LaunchSpec) -> bool:
        """launch(); False when the job ended at once (refused, or its shim could not start)."""
        with self._lock:
            if spec.job_id in self._jobs:
                return True
            job = _Job(dir=JobDir(self._state_dir / spec.job_id))
            self._jobs[spec.job_id] = job
            refusal = self._refusal(spec)
            if refusal:
                self._finish(job, ExitRecord(spec.job_id, EXIT_CANNOT_EXECUTE, refusal))
                return False
            try:
                self._prepare(job.dir, spec)  # before the shim starts: it reads the command from there
                pid = self._start_shim(job, spec.log_path)
            except OSError as e:
                self._finish(job, ExitRecord(spec.job_id, 1, f"cannot start: {e}"))
                return False
            if pid == _ENDED:  # a shim the failed fork server had forked ran it to its end already
                self._finish(job, job.dir.load_exit() or ExitRecord(spec.job_id, EXIT_LOST, "lost: shim died"))
                return False
            # Our child or the fork server's, not reaped before we say so: its pid cannot have been reused yet.
            job.shim = identify(pid) or ShimIdentity(pid, time.time())
            job.dir.write_shim(job.shim)
            self._exit_watch.watch(pid)
            return True

    def running(self) -> list[str]:
        with self._lock:
            self._refresh()
            return [job_id for job_id, job in self._jobs.items() if job.exit is None]

    def leader_pid(self, job_id: str) -> int | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.exit is not None or job.shim is None:
                return None
            return job.shim.pid

    def published_port(self, job_id: str) -> PublishedPort | None:
        return None  # a process job listens on the node itself: its own processes are checked (leader_pid)

    def collect_exits(self) -> list[ExitRecord]:
        with self._lock:
            self._refresh()
            return [job.exit for job in self._jobs.values() if job.exit is not None]

    def ack(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.exit is None:
                return
            del self._jobs[job_id]
            job.dir.remove()
            remove_tree(self.run_dir(job_id))  # scratch: what the job must keep goes to its checkpoint dir

    def cancel(self, job_id: str, grace_s: float) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.exit is not None:
                return
            self._refresh_job(job)
            if job.exit is not None:
                return
            deadline = time.time() + max(grace_s, 0.0)
            if job.cancel_deadline is None:
                self._signal_group(job, signal.SIGTERM)
            elif deadline >= job.cancel_deadline:
                return  # an earlier SIGKILL is already due
            job.cancel_deadline = deadline
            job.dir.write_cancel(deadline, killed=False)
            self._arm_kill_timer(job, max(grace_s, 0.0))

    # ----- extras -----
    def set_exit_listener(self, listener: Callable[[], None] | None) -> None:
        """Have `listener()` called (from a thread of this executor's, without its lock) soon after a job's shim
        ends, so the exit can be collected at once instead of at the caller's next poll. It only says that
        collect_exits() has news; where the kernel has no pidfds it is never called (ShimExitWatch)."""
        self._exit_listener = listener

    def close(self) -> None:
        """Stop pending kill timers, the exit watch and the fork server; jobs keep running (a new executor on
        state_dir re-arms them)."""
        self._exit_watch.close()
        if self._fork_server is not None:
            self._fork_server.close()
        with self._lock:
            for job in self._jobs.values():
                if job.timer is not None:
                    job.timer.cancel()
                    job.timer = None

    # ----- internals -----
    def _refusal(self, spec: LaunchSpec) -> str:
        """Why a job may not start here ("" when it may): a root executor never runs a job as root."""
        if not self._switch_users:
            return ""
        if spec.identity is None:
            return "refused: the job has no Unix identity and the agent runs as root"
        if spec.identity.uid == 0 or spec.identity.gid == 0:
            return "refused: a job never runs as uid or gid 0"
        return ""

    def _prepare(self, job_dir: JobDir, spec: LaunchSpec) -> None:
        """The job's run dir, checkpoint dir and log, owned by whom it runs as; then spec.json for the shim."""
        identity = spec.identity if self._switch_users else None
        run_dir = self.run_dir(spec.job_id)
        prepare_owned_dir(run_dir, identity, fresh=True)
        if spec.checkpoint_dir is not None:
            prepare_owned_dir(spec.checkpoint_dir, identity, fresh=False)
        prepare_log(spec.log_path, identity)
        uid = identity.uid if identity is not None else os.getuid()
        home, user = compute_home_and_user(uid, spec.identity.user if spec.identity else "", run_dir)
        job_dir.write_spec(
            spec,
            workdir=spec.workdir or str(run_dir),
            child_env=compute_child_env(spec, home, user),
            run_as=(identity.uid, identity.gid) if identity is not None else None,
        )

    def _tell_exit(self) -> None:
        listener = self._exit_listener
        if listener is not None:
            listener()

    def _start_shim(self, job: _Job, log_path: Path) -> int:
        """Start the job's shim: forked by the fork server, or as a process of its own when there is none. Its pid,
        or _ENDED."""
        server = self._fork_server
        if server is not None and time.monotonic() >= self._fork_server_retry_at:
            try:
                pid = server.spawn(job.dir.path, log_path)
                job.forked = True
                return pid
            except ForkServerError as e:
                log.warning("shim fork server failed (%s); shims start directly for %.0f s", e, _FORK_SERVER_BACKOFF_S)
                self._fork_server_retry_at = time.monotonic() + _FORK_SERVER_BACKOFF_S
                forked = self._claim_or_adopt(job)  # it may have forked the shim before it failed
                if forked is not None:
                    return forked
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        with open(fd, "ab") as log_file:  # the shim's own errors (a traceback) land in the job log
            job.popen = subprocess.Popen(
                [self._python, "-I", "-S", _SHIM_PATH, str(job.dir.path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env=_SHIM_ENV,
                start_new_session=True,  # the shim leads a new process group; the agent's death spares it
            )
        return job.popen.pid

    def _claim_or_adopt(self, job: _Job) -> int | None:
        """After the fork server failed on this job: claim the job for a shim started here (None), or, when the
        server's shim claimed it first, that shim's pid (_ENDED: it ran the job to its end already). Raises OSError
        when that shim is gone without an exit record (the job then ends as not started, never run twice)."""
        if claim_job(job.dir.path):
            return None
        deadline = time.monotonic() + _ADOPT_WAIT_S
        while time.monotonic() < deadline:
            shim = find_shim(job.dir.path)  # the forked shim enters its job dir right after it claims the job
            if shim is not None:
                return shim.pid
            if job.dir.load_exit() is not None:
                return _ENDED
            time.sleep(0.02)
        raise OSError("the shim the fork server started for it is gone")

    def _recover(self) -> None:
        """Rebuild the job table from state_dir, as left by an earlier executor (maybe killed -9)."""
        for path in sorted(p for p in self._state_dir.iterdir() if p.is_dir()):
            try:
                check_job_id(path.name)
            except ValidationError:
                continue  # not one of ours
            job = _Job(dir=JobDir(path))
            self._jobs[path.name] = job
            job.exit = job.dir.load_exit()
            if job.exit is None and not job.dir.has_spec():
                self._finish(job, ExitRecord(path.name, EXIT_LOST, "lost: launch interrupted"))
                continue
            cancel = job.dir.load_cancel()
            if cancel is not None:
                job.cancel_deadline, job.killed = cancel
            if job.exit is not None:
                continue
            job.shim = job.dir.load_shim() or find_shim(path)
            if job.shim is not None:
                job.dir.write_shim(job.shim)
                self._exit_watch.watch(job.shim.pid, still_ours=partial(is_alive, job.shim))
            if job.cancel_deadline is not None and not job.killed:
                self._arm_kill_timer(job, job.cancel_deadline - time.time())

    def _refresh(self) -> None:
        for job in self._jobs.values():
            if job.exit is None:
                self._refresh_job(job)

    def _refresh_job(self, job: _Job) -> None:
        """Passive sync: notice an exit file, or a shim that died without writing one."""
        alive = self._shim_alive(job)  # first: it also reaps our own dead shims
        record = job.dir.load_exit()
        if record is None and alive:
            return
        if record is None:
            record = self._lost_record(job)
            # Whatever the dead shim left in its group is untracked from now on: stop it (GPUs!).
            self._signal_group(job, signal.SIGKILL)
        if job.cancel_deadline is not None and not record.reason:
            record = replace(record, reason="cancelled")
        self._finish(job, record)

    def _shim_alive(self, job: _Job) -> bool:
        if job.popen is not None:
            return job.popen.poll() is None  # waitpid(WNOHANG): reaps, no zombies
        if job.shim is None:
            return False
        if is_alive(job.shim):
            return True
        _reap_quietly(job.shim.pid)  # we may be its parent after all (agent as PID 1 in a container)
        return False

    def _lost_record(self, job: _Job) -> ExitRecord:
        job_id = job.dir.job_id
        if job.killed:
            return ExitRecord(job_id, _EXIT_SIGKILL, "cancelled: killed after grace period")
        if job.cancel_deadline is not None:
            return ExitRecord(job_id, _EXIT_SIGTERM, "cancelled")
        if job.shim is None:
            return ExitRecord(job_id, EXIT_LOST, "lost: shim never started")
        return ExitRecord(job_id, EXIT_LOST, "lost: shim died")

    def _finish(self, job: _Job, record: ExitRecord) -> None:
        if job.dir.load_exit() is None:
            job.dir.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            job.dir.write_exit(record)
        job.exit = record
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        if job.forked and job.shim is not None and self._fork_server is not None:
            job.forked = False
            self._fork_server.release(job.shim.pid)  # after any kill of what the job left: its pid is free now

    def _signal_group(self, job: _Job, sig: signal.Signals) -> None:
        if job.shim is None:
            return
        try:
            os.killpg(job.shim.pid, sig)  # the shim's pid is the group id (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already

    def _arm_kill_timer(self, job: _Job, delay_s: float) -> None:
        if job.timer is not None:
            job.timer.cancel()
        job.timer = threading.Timer(max(delay_s, 0.0), self._kill_after_grace, args=(job.dir.job_id,))
        job.timer.daemon = True
        job.timer.start()

    def _kill_after_grace(self, job_id: str) -> None:
        """Active step of cancel: the grace period is over and the job is still there."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.exit is not None:
                return
            job.timer = None
            self._refresh_job(job)
            if job.exit is not None or job.cancel_deadline is None:
                return
            job.killed = True
            job.dir.write_cancel(job.cancel_deadline, killed=True)
            self._signal_group(job, signal.SIGKILL)


def _reap_quietly(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: init reaps it
