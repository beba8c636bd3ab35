"""ShimForkServer: the agent's end of the shim fork server (`shim.py --serve`).

A shim per job used to be a fresh interpreter: 9 ms of CPU before it did anything, half of what a job that ends
at once costs its node. The fork server is one interpreter started once (lazily, like the shim: `python -I -S`,
no environment of the agent's) that forks a shim per request; the forked shim is what a started one is (its own
session, the job's log as stderr, nothing of the agent's), and outlives both the server and the agent.

One request at a time (a lock): a line of JSON out, a line back with the shim's pid. The pid is the server's
unreaped child until this end releases it (`release`, once the job's end is handled), so the caller identifies,
watches and signals it safely. Anything wrong with the server itself (it died, it does not answer within ANSWER_S, it
answers nonsense) raises ForkServerError and stops it; the next call starts a new one. A refusal for the job (its
log cannot be opened, fork failed) raises a plain OSError, as starting the shim directly would.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
from pathlib import Path

from corral.executors.shim import SERVE_FLAG

ANSWER_S = 2.0  # a fork takes milliseconds; the executor's lock is held meanwhile


class ForkServerError(OSError):
    """The fork server failed (not the job): start the shim another way."""


class ShimForkServer:
    def __init__(self, python: str, shim_path: str, env: dict[str, str]) -> None:
        self._argv = [python, "-I", "-S", shim_path, SERVE_FLAG]
        self._env = env
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs (for tests and diagnostics)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def spawn(self, job_dir: Path, log_path: Path) -> int:
        """Fork a shim for `job_dir` whose stderr is `log_path` (opened append-only, never created): its pid."""
        request = json.dumps({"job_dir": str(job_dir), "log_path": str(log_path)}) + "\n"
        with self._lock:
            if self._closed:
                raise ForkServerError("closed")
            answer = self._ask(request.encode())
        pid, error = answer.get("pid"), answer.get("error")
        if isinstance(pid, int) and pid > 0:
            return pid
        if isinstance(error, str):
            raise OSError(error)
        self.close()
        raise ForkServerError(f"fork server answered {answer!r}")

    def release(self, pid: int) -> None:
        """The agent has done with the end of the shim `pid` that `spawn` returned: its server may reap it now (until
        then the pid stays taken, so nothing sent to it or its group can reach another process)."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or proc.poll() is not None:
                return  # a server that ended reaps nothing more: its shims are init's
            try:
                proc.stdin.write(f"reap {pid}\n".encode())
                proc.stdin.flush()
            except OSError:
                self._stop()

    def close(self) -> None:
        """Stop the server (closing its input ends it) for good; the shims it started live on."""
        with self._lock:
            self._closed = True
            self._stop()

    # ----- internals (under the lock) -----
    def _ask(self, request: bytes) -> dict[str, object]:
        try:
            self._send(request)
            line = self._read_line()
            answer = json.loads(line)
        except (OSError, ValueError) as e:
            self._stop()
            raise ForkServerError(f"fork server: {e}") from None
        if not isinstance(answer, dict):
            self._stop()
            raise ForkServerError(f"fork server answered {line!r}")
        return answer

    def _send(self, data: bytes) -> None:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None
        proc.stdin.write(data)
        proc.stdin.flush()

    def _read_line(self) -> bytes:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks: list[bytes] = []
        while not chunks or not chunks[-1].endswith(b"\n"):
            if not poller.poll(ANSWER_S * 1000):
                raise ForkServerError(f"no answer in {ANSWER_S:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ForkServerError("it ended")
            chunks.append(chunk)
        return b"".join(chunks)

    def _start(self) -> subprocess.Popen[bytes]:
        self._stop()
        self._proc = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._env,
            cwd="/",
            start_new_session=True,  # like a shim: the agent's terminal and process group are not its own
        )
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
