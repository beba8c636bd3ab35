"""Job shim: runs one job's command in its own process group and records its exit code durably.

Started by ProcessExecutor as `python -I shim.py <job_dir>` with start_new_session=True, so the shim is
the process-group leader and survives the agent. Standard library only: it must start whatever the
job's environment looks like. Reads <job_dir>/spec.json, writes <job_dir>/exit (JSON, atomically).
When spec.json names `run_as` (uid, gid), the shim stays root (to write the exit record where only the
agent can) and the job's process drops to that identity: no supplementary groups, then gid, then uid.

The job's output reaches its log through the shim (a pipe, copied by a thread), not as the log file itself: when
the node's log disk is full, the job writes on unharmed and the shim drops what it cannot store, then says in the
log how much was lost once it can write again. A job is never killed by a full log disk.
The same copy caps the log at spec.json's `log_max_bytes` (the server's CORRAL_JOB_LOG_MAX_MB; 0: no limit): output
past it is read and dropped, so the job runs on; the log says so once when the limit is reached and, at the end,
how many bytes were dropped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

EXIT_FILE = "exit"
SPEC_FILE = "spec.json"
SECRET_ENV_FILE = "secret-env.json"  # the job's secrets (0600, root's); deleted once read
COPY_CHUNK = 1 << 16
DRAIN_AFTER_EXIT_S = 2.0  # what the job's leftover children still write after it ended, copied this long at most


def write_json_atomic(path: Path, data: object) -> None:
    """Write tmp, fsync, rename: a reader sees the old file or the whole new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def take_secret_env(job_dir: Path) -> dict[str, str]:
    """Read the job's secret variables and delete their file at once: on the node they then live only in the
    job's environment (a shim that dies before this line loses its job anyway)."""
    path = job_dir / SECRET_ENV_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    path.unlink()
    return {str(k): str(v) for k, v in data.items()}


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGTERM goes to the whole group: the child gets it too; the shim lives on to record the exit.

    A Python handler (not SIG_IGN) so that the child, after exec, is back to the default action.
    """


def _workdir_error(workdir: str, run_as: tuple[int, int] | None) -> str:
    """Why the job's identity cannot enter `workdir` ("" when it can), checked in a child that has dropped to
    that identity: the root shim must neither reveal nor grant what the job itself may not reach."""
    if run_as is None:
        return "" if os.path.isdir(workdir) else f"workdir not found: {workdir}"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the shim is single-threaded: a plain fork is safe
        code = 1
        try:
            os.close(read_end)
            _drop_to(run_as)
            os.chdir(workdir)
            code = 0
        except OSError as e:
            os.write(write_end, f"{e.errno}:{e.strerror or e}".encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as r:
        message = r.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status == 0:
        return ""
    errno_text, _, text = message.partition(":")
    if errno_text in ("2", "20"):  # ENOENT, ENOTDIR
        return f"workdir not found: {workdir}"
    return f"workdir not usable by uid {run_as[0]}: {workdir}: {text}"


class LogCopy(threading.Thread):
    """Copies the job's output from the pipe to its log. A write that fails (no space, a quota) drops that
    chunk and counts it; the next write that succeeds is preceded by a line saying how much was lost.
    `limit` > 0: only the job's first `limit` bytes of output go to the log; the rest is read and dropped."""

    def __init__(self, source: int, log: int, limit: int = 0) -> None:
        super().__init__(name="corral-shim-log", daemon=True)
        self.source, self.log = source, log
        self.dropped = 0  # bytes lost and not yet told in the log
        self.limit = limit
        self.taken = 0  # bytes of output within the limit
        self.over = 0  # bytes of output past the limit, dropped

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.source, COPY_CHUNK)
            except OSError:
                break
            if not data:
                break
            reached = False
            if self.limit > 0:
                keep = max(min(len(data), self.limit - self.taken), 0)
                if keep < len(data):
                    reached = self.over == 0
                    self.over += len(data) - keep
                    data = data[:keep]
                self.taken += keep
            if data:
                self._copy(data)
            if reached:
                self._write(limit_notice(self.limit))
        os.close(self.source)

    def _copy(self, data: bytes) -> None:
        if self.dropped and self._write(_lost_notice(self.dropped)):
            self.dropped = 0
        if not self._write(data):
            self.dropped += len(data)

    def _write(self, data: bytes) -> bool:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.log, view) :]
        except OSError:
            return False
        return True

    def finish(self) -> None:
        """After the job: copy what is still in the pipe, then tell a loss not told yet (if the disk lets us)."""
        self.join(DRAIN_AFTER_EXIT_S)
        if self.dropped and self._write(_lost_notice(self.dropped)):
            self.dropped = 0
        if self.over:
            self._write(over_limit_notice(self.over))


def _lost_notice(n: int) -> bytes:
    return f"\ncorral: {n} bytes of this job's output were lost: the node's log disk was full\n".encode()


def over_limit_notice(n: int) -> bytes:
    return f"corral: {n} bytes of this job's output were dropped past its log's limit\n".encode()


def limit_notice(limit: int) -> bytes:
    size = f"{limit >> 20} MB" if limit % (1 << 20) == 0 else f"{limit} bytes"
    return f"\ncorral: this job's log reached its limit of {size}; further output is dropped\n".encode()


def _drop_to(run_as: tuple[int, int]) -> None:
    os.setgroups([])
    os.setgid(run_as[1])
    os.setuid(run_as[0])


def start_and_wait(spec: dict[str, Any], log: int) -> tuple[int, str]:
    """Run the command to its end: (exit code shell-style, reason when it could not start, or output lost that
    the log could not be told of). Its output goes through a pipe to `log`; the job's leftover children are asked
    to stop once it ended."""
    command = [str(c) for c in spec["command"]]
    workdir = str(spec["workdir"])
    raw = spec.get("run_as")
    run_as = (int(raw[0]), int(raw[1])) if raw else None
    if not command:
        return 127, "command not found: empty command"
    if run_as is not None and 0 in run_as:
        return 126, "refused: a job never runs as uid or gid 0"
    error = _workdir_error(workdir, run_as)
    if error:
        return 1, error
    env = {str(k): str(v) for k, v in spec["child_env"].items()}  # the job's whole env: nothing of the agent's
    drop: dict[str, Any] = {}
    if run_as is not None:  # Popen drops in the child: setgroups([]), setregid, setreuid, then chdir as the job
        drop = {"user": run_as[0], "group": run_as[1], "extra_groups": [], "preexec_fn": lambda: os.chdir(workdir)}
    source, sink = os.pipe()
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            env=env,
            umask=0o077,
            cwd=None if run_as is not None else workdir,
            **drop,
        )
    except FileNotFoundError:
        return _closed(source, sink, 127, f"command not found: {command[0]}")
    except PermissionError:
        return _closed(source, sink, 126, f"permission denied: {command[0]}")
    except OSError as e:
        return _closed(source, sink, 126, f"cannot execute {command[0]}: {e.strerror or e}")
    except subprocess.SubprocessError:  # the chdir as the job's user failed: the workdir changed under us
        return _closed(source, sink, 1, f"workdir not usable by uid {run_as[0] if run_as else os.getuid()}: {workdir}")
    os.close(sink)
    copy = LogCopy(source, log, int(spec.get("log_max_bytes") or 0))
    copy.start()
    code = child.wait()  # PEP 475: the SIGTERM handler does not interrupt the wait
    _end_stragglers()
    copy.finish()
    # A loss the log could not be told of (the disk still full) travels with the exit instead.
    untold = f"{copy.dropped} bytes of output were lost: the node's log disk was full" if copy.dropped else ""
    return (128 - code if code < 0 else code), untold


def _closed(source: int, sink: int, code: int, reason: str) -> tuple[int, str]:
    os.close(source)
    os.close(sink)
    return code, reason


def _end_stragglers() -> None:
    """The job's main process ended: ask what it left in the group (background children) to stop."""
    try:
        os.killpg(os.getpgrp(), signal.SIGTERM)  # the shim itself ignores it
    except OSError:
        pass  # nothing left


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    job_dir = Path(argv[0])
    spec = json.loads((job_dir / SPEC_FILE).read_text(encoding="utf-8"))
    spec["child_env"] = {**take_secret_env(job_dir), **spec["child_env"]}  # Corral's own variables win
    # The executor created the log (0600, owned by the job's identity); the job writes it through this fd.
    log = os.open(str(spec["log_path"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    code, reason = start_and_wait(spec, log)
    if reason:
        try:
            os.write(log, f"corral: {reason}\n".encode())
        except OSError:
            pass  # a full log disk: the reason still reaches the server with the exit
    os.close(log)
    write_json_atomic(job_dir / EXIT_FILE, {"exit_code": code, "reason": reason})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
