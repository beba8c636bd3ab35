"""Job shim: runs one job's command in its own process group and records its exit code durably.

Started by ProcessExecutor as `python -I -S shim.py <job_dir>` with start_new_session=True, so the shim is
the process-group leader and survives the agent. Standard library only: it must start whatever the
job's environment looks like. Reads <job_dir>/spec.json, writes <job_dir>/exit (JSON, atomically).
When spec.json names `run_as` (uid, gid), the shim stays root (to write the exit record where only the
agent can) and the job's process drops to that identity: no supplementary groups, then gid, then uid.

The job's output reaches its log through the shim (a pipe, copied as it comes), not as the log file itself: when
the node's log disk is full, the job writes on unharmed and the shim drops what it cannot store, then says in the
log how much was lost once it can write again. A job is never killed by a full log disk.
The same copy caps the log at spec.json's `log_max_bytes` (the server's CORRAL_JOB_LOG_MAX_MB; 0: no limit): output
past it is read and dropped, so the job runs on; the log says so once when the limit is reached and, at the end,
how many bytes were dropped.

A shim starts for every job, and on a small node a burst of jobs is bound by its start, which was mostly imports
(32 ms, against 9 ms for the bare interpreter): so it imports no threading, subprocess, pathlib or typing, and
takes json's and signal's C modules (`json` and `signal` import re and enum, 9 ms more). It forks the job itself
and waits for its output and its end in one poll() (the end through a pidfd).
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing stays unimported at run time (see above); type checkers take these branches
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Callable
    from types import FrameType
    from typing import Any
else:
    try:
        import _signal  # what `signal` wraps in enums: the same functions and numbers
    except ImportError:  # an interpreter without it
        import signal as _signal

EXIT_FILE = "exit"
SPEC_FILE = "spec.json"
SECRET_ENV_FILE = "secret-env.json"  # the job's secrets (0600, root's); deleted once read
CLAIM_FILE = "claim"  # made (O_EXCL) by the one shim a fork server forked for the job, or by the agent instead
COPY_CHUNK = 1 << 16
DRAIN_AFTER_EXIT_S = 2.0  # what the job's leftover children still write after it ended, copied this long at most
_NO_PIDFD_POLL_MS = 50  # where pidfds are missing (kernel < 5.3): how often the job's end is looked for


def write_text_atomic(path: str | os.PathLike[str], text: str, durable: bool = True) -> None:
    """Write tmp, fsync, rename: a reader sees the old file or the whole new one, never a part. `durable=False`
    skips the fsync: for a file that describes live processes only (a power cut ends them, and what it says
    with them), which then costs no wait for the disk."""
    target = os.fspath(path)
    tmp = target + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, target)


def write_json_atomic(path: str | os.PathLike[str], data: object, durable: bool = True) -> None:
    """write_text_atomic of `data` as JSON (for the agent's own state files: the shim never calls it)."""
    import json  # here, not at the top: see the module's docstring

    write_text_atomic(path, json.dumps(data), durable)


class _JsonDefaults:
    """The settings json.loads gives its C scanner by default."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity


_scan_json: Callable[[str, int], tuple[Any, int]]
try:
    from _json import encode_basestring_ascii, make_scanner  # what `json` runs in C

    # json passes its decoder as the context: any object with these settings does (the stub wants the type)
    _scan_json = make_scanner(_JsonDefaults)  # type: ignore[arg-type]
except ImportError:  # an interpreter without json's C part: json itself
    import json

    _scan_json = json.JSONDecoder().raw_decode
    encode_basestring_ascii = json.encoder.py_encode_basestring_ascii


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file's value, read as json.load reads it (ValueError when it is not JSON)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        value, end = _scan_json(text, 0)
    except StopIteration as e:
        raise ValueError(f"{os.fspath(path)}: not JSON at character {e.value}") from None
    if text[end:].strip():
        raise ValueError(f"{os.fspath(path)}: extra data at character {end}")
    return value


def take_secret_env(job_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Read the job's secret variables and delete their file at once: on the node they then live only in the
    job's environment (a shim that dies before this line loses its job anyway)."""
    path = os.path.join(job_dir, SECRET_ENV_FILE)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    os.unlink(path)
    return {str(k): str(v) for k, v in data.items()}


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGTERM goes to the whole group: the child gets it too; the shim lives on to record the exit.

    A Python handler (not SIG_IGN) so that the child, after exec, is back to the default action. A SIGTERM that
    comes before the job's process exists is kept (`_TERM_SEEN`): the job then does not start (a cancel that came
    too early is still a cancel)."""
    if signum == _signal.SIGTERM:
        _TERM_SEEN[0] = True


_TERM_SEEN = [False]


class LogCopy:
    """Copies the job's output to its log. A write that fails (no space, a quota) drops that chunk and counts it;
    the next write that succeeds is preceded by a line saying how much was lost.
    `limit` > 0: only the job's first `limit` bytes of output go to the log; the rest is read and dropped."""

    def __init__(self, log: int, limit: int = 0) -> None:
        self.log = log
        self.dropped = 0  # bytes lost and not yet told in the log
        self.limit = limit
        self.taken = 0  # bytes of output within the limit
        self.over = 0  # bytes of output past the limit, dropped

    def feed(self, data: bytes) -> None:
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

    def _copy(self, data: bytes) -> None:
        if self.dropped and self._write(_lost_notice(self.dropped)):
            self.dropped = 0
        if not self._write(data):
            self.dropped += len(data)

    def _write(self, data: bytes) -> bool:
        try:
            _write_all(self.log, data)
        except OSError:
            return False
        return True

    def finish(self) -> None:
        """After the job: tell a loss not told yet (if the disk lets us), and what the limit dropped."""
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
    env = {str(k): str(v) for k, v in spec["child_env"].items()}  # the job's whole env: nothing of the agent's
    # A SIGTERM to the group (a cancel) must reach the job even when it comes before the job's process exists.
    # Held (blocked) from here to the fork, it stays pending in the shim alone (a child starts with none pending):
    # the shim then passes it on. Once forked, the job's process holds its own until it has the default action
    # back (_become_job), and it ends the job there.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGTERM})
    if _TERM_SEEN[0]:  # came before the block (its handler has run by now)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGTERM})
        return 128 + _signal.SIGTERM, ""
    source, sink = os.pipe()
    try:
        pid, failure, term_before_fork = _spawn(command, env, workdir, run_as, sink)
    finally:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGTERM})
    if term_before_fork and not failure:
        _end_stragglers()  # the job's process could not have it: it gets it now (the shim ignores its own)
    os.close(sink)
    if failure:
        os.close(source)
        os.waitpid(pid, 0)
        return _start_failure(failure, command[0], workdir, run_as[0] if run_as else os.getuid())
    copy = LogCopy(log, int(spec.get("log_max_bytes") or 0))
    code = _copy_until_exit(pid, source, copy)
    copy.finish()
    # A loss the log could not be told of (the disk still full) travels with the exit instead.
    untold = f"{copy.dropped} bytes of output were lost: the node's log disk was full" if copy.dropped else ""
    return (128 - code if code < 0 else code), untold


def _spawn(
    command: list[str], env: dict[str, str], workdir: str, run_as: tuple[int, int] | None, sink: int
) -> tuple[int, str, bool]:
    """Fork the job's process and exec its command there: (its pid, "" once the command runs, or
    "<step>:<errno>:<text>" when a step before it failed (that process then ended at once), whether a SIGTERM held
    by the caller was pending at the fork)."""
    report_r, report_w = os.pipe()  # close-on-exec: EOF here means the command replaced the child
    pid = os.fork()
    if pid == 0:  # the shim is single-threaded: a plain fork is safe
        os.close(report_r)
        _become_job(command, env, workdir, run_as, sink, report_w)
    term_before_fork = _signal.SIGTERM in _signal.sigpending()
    os.close(report_w)
    chunks = []
    while chunk := os.read(report_r, 4096):
        chunks.append(chunk)
    os.close(report_r)
    return pid, b"".join(chunks).decode(errors="replace"), term_before_fork


def _become_job(
    command: list[str], env: dict[str, str], workdir: str, run_as: tuple[int, int] | None, sink: int, report: int
) -> None:
    """In the forked child: stdin from /dev/null, output to the pipe, the signals a job expects, umask 077, the
    job's identity (no supplementary groups, then gid, then uid), its workdir entered as that identity, then exec.
    Never returns."""
    step = "setup"
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        for sig in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGTERM, _signal.SIGINT):  # a job starts with the
            _signal.signal(sig, _signal.SIG_DFL)  # defaults: Python ignores the first two, the shim the others
        _signal.pthread_sigmask(_signal.SIG_SETMASK, set())  # a SIGTERM held since the fork ends the job here
        os.umask(0o077)
        if run_as is not None:
            os.setgroups([])
            os.setgid(run_as[1])
            os.setuid(run_as[0])
        step = "chdir"  # as the job's identity: the root shim must neither reveal nor grant what the job may not reach
        os.chdir(workdir)
        step = "exec"
        _exec(command, env)
    except OSError as e:
        os.write(report, f"{step}:{e.errno}:{e.strerror or e}".encode())
    finally:
        os._exit(255)


def _exec(command: list[str], env: dict[str, str]) -> None:
    """Exec the command, found on the job's PATH as subprocess finds it: the first error that is not "no such
    file" wins, else the last one. Not os.execvpe: it imports a module, which the job's identity may not read."""
    program = command[0]
    if "/" in program:
        os.execve(program, command, env)
    kept: OSError | None = None
    last: OSError = FileNotFoundError(errno.ENOENT, "No such file or directory")
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(folder, program), command, env)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e
        except OSError as e:
            kept = kept or e
    raise kept or last


def _start_failure(failure: str, program: str, workdir: str, uid: int) -> tuple[int, str]:
    """The exit code and reason of a job whose command never ran (what _spawn reported)."""
    step, _, rest = failure.partition(":")
    errno_text, _, text = rest.partition(":")
    code = int(errno_text) if errno_text.isdigit() else 0
    if step == "chdir":
        if code in (errno.ENOENT, errno.ENOTDIR):
            return 1, f"workdir not found: {workdir}"
        return 1, f"workdir not usable by uid {uid}: {workdir}: {text}"
    if step == "exec" and code == errno.ENOENT:
        return 127, f"command not found: {program}"
    if step == "exec" and code in (errno.EACCES, errno.EPERM):
        return 126, f"permission denied: {program}"
    return 126, f"cannot execute {program}: {text}"


def _copy_until_exit(pid: int, source: int, copy: LogCopy) -> int:
    """Copy the job's output until its process ends; then ask its leftovers to stop and copy what they still write
    for DRAIN_AFTER_EXIT_S at most. Returns the job's exit status as waitstatus_to_exitcode gives it."""
    poller = select.poll()
    poller.register(source, select.POLLIN)
    pidfd = _open_pidfd(pid)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    status: int | None = None
    open_source = True
    while status is None:
        timeout_ms = None if pidfd is not None else _NO_PIDFD_POLL_MS
        for fd, _ in poller.poll(timeout_ms):  # PEP 475: the SIGTERM handler does not interrupt the wait
            if fd == source and not _copy_some(source, copy):
                poller.unregister(source)
                open_source = False
        waited, raw = os.waitpid(pid, os.WNOHANG)
        if waited:
            status = raw
    if pidfd is not None:
        os.close(pidfd)
    _end_stragglers()
    deadline = time.monotonic() + DRAIN_AFTER_EXIT_S
    while open_source:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0 or not poller.poll(left_ms) or not _copy_some(source, copy):
            break
    os.close(source)
    return os.waitstatus_to_exitcode(status)


def _copy_some(source: int, copy: LogCopy) -> bool:
    """One read of the job's output into the log; False at the end of it (every writer closed the pipe)."""
    try:
        data = os.read(source, COPY_CHUNK)
    except OSError:
        return False
    if data:
        copy.feed(data)
    return bool(data)


def _open_pidfd(pid: int) -> int | None:
    """A pidfd of the job's process (readable once it ended), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _end_stragglers() -> None:
    """The job's main process ended: ask what it left in the group (background children) to stop."""
    try:
        os.killpg(os.getpgrp(), _signal.SIGTERM)  # the shim itself ignores it
    except OSError:
        pass  # nothing left


SERVE_FLAG = "--serve"
_REAP_WORD = "reap "
_REAP_EVERY_S = 0.5


def serve(requests: int = 0, replies: int = 1) -> int:
    """The fork server (`shim.py --serve`): one warm interpreter that forks a shim per request instead of the agent
    starting a fresh interpreter per job (9 ms of the shim's 18 ms of CPU on a burst of jobs). Each request is one
    line, JSON `{"job_dir": ..., "log_path": ...}`; the answer is one line, `{"pid": N}` or `{"error": "..."}`. The
    shim it forks is what `shim.py <job_dir>` would be: its own session, stdin and stdout /dev/null, stderr the job's
    log, none of this server's descriptors, and its working dir is the job dir (so an agent that died before it
    recorded the pid finds it again: jobdir.find_shim). It exits when the agent closes its end (or dies): the shims
    it started live on.

    A shim that ended is reaped only once the agent released it (a line `reap <pid>`, sent when the agent has done
    with that job's end): until then its pid, and the process group of that number, cannot be another process's,
    so what the agent sends there (its identity read, a kill of what the job left) reaches no stranger. Released
    shims are looked for every _REAP_EVERY_S."""
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # the agent's Ctrl-C is the agent's: it closes the pipe
    poller = select.poll()
    poller.register(requests, select.POLLIN)
    pending = b""
    released: set[int] = set()
    while True:
        if not poller.poll(_REAP_EVERY_S * 1000 if released else None):
            released = _reap(released)
            continue
        chunk = os.read(requests, 1 << 16)
        if not chunk:
            return 0
        pending += chunk
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            text = line.decode("utf-8", "replace").strip()
            if text.startswith(_REAP_WORD):
                number = text[len(_REAP_WORD) :].strip()
                if number.isdigit():
                    released.add(int(number))
            elif text:
                _write_all(replies, _fork_shim(text, requests, replies).encode() + b"\n")
        released = _reap(released)


def _fork_shim(request: str, requests: int, replies: int) -> str:
    """Fork one shim for a request line; the answer line (without its newline)."""
    try:
        value, _ = _scan_json(request, 0)
        job_dir, log_path = os.path.abspath(str(value["job_dir"])), str(value["log_path"])
    except (StopIteration, ValueError, KeyError, TypeError):
        return '{"error": "bad request"}'
    try:
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError as e:
        return f'{{"error": {encode_basestring_ascii(str(e))}}}'
    ready_r, ready_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in (log, ready_r, ready_w):
            os.close(fd)
        return f'{{"error": {encode_basestring_ascii(str(e))}}}'
    if pid == 0:
        os.close(ready_r)
        _become_shim(job_dir, log, ready_w, (requests, replies))
    for fd in (log, ready_w):
        os.close(fd)
    os.read(ready_r, 1)  # EOF once the shim leads its session: a signal to its group (a cancel) reaches it from now
    os.close(ready_r)
    return f'{{"pid": {pid}}}'


def _become_shim(job_dir: str, log: int, ready: int, server_fds: tuple[int, ...]) -> None:
    """In the forked child: become what a freshly started `shim.py job_dir` is, run it, and exit. Never returns.
    Closing `ready` tells the server that the shim leads its own session (and ignores SIGTERM, as main() has it).

    First it claims the job (CLAIM_FILE, created exclusively): an agent that lost its answer (the server died or
    hung after the fork) claims it too before it starts a shim another way, so the job runs once, under whichever
    claimed it first; a shim that finds the claim taken ends at once."""
    code = 1
    try:
        ours = claim_job(job_dir)
    except OSError:
        ours = False  # its dir is gone
    if not ours:
        os._exit(0)  # the agent took the job: not ours to run
    try:
        _signal.signal(_signal.SIGTERM, _ignore)
        os.setsid()
        os.close(ready)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in server_fds:
            os.close(fd)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log, 2)
        for fd in (null, log):
            if fd > 2:
                os.close(fd)
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)  # main() sets its own; nothing of the server's stays
        os.chdir(job_dir)
        code = main([job_dir])
    except BaseException:  # the shim's own error lands in the job's log, as a started shim's traceback would
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def claim_job(job_dir: str | os.PathLike[str]) -> bool:
    """Claim the job for the shim about to run it (CLAIM_FILE, created exclusively): False when it is taken."""
    try:
        os.close(
            os.open(os.path.join(job_dir, CLAIM_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        )
    except FileExistsError:
        return False
    return True


def _reap(released: set[int]) -> set[int]:
    """Reap the released shims that ended; those still running (or not this server's children)."""
    left = set()
    for pid in released:
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # not ours (a pid from before a restart of this server): nothing to reap
        if not waited:
            left.add(pid)
    return left


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    _signal.signal(_signal.SIGTERM, _ignore)
    _signal.signal(_signal.SIGINT, _ignore)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, set())  # nothing the agent's thread held is held here
    job_dir = argv[0]
    spec = read_json(os.path.join(job_dir, SPEC_FILE))
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
    record = f'{{"exit_code": {code}, "reason": {encode_basestring_ascii(reason)}}}'
    write_text_atomic(os.path.join(job_dir, EXIT_FILE), record)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == [SERVE_FLAG] else main(sys.argv[1:]))
