"""`CORRAL_WORKERS`: several `corral server` processes on one machine behind the same ports, so that one server uses
more than one core (one Python process runs on one: the fleet's syncs, people's lists and the scheduler's passes take
turns on its interpreter, bench/api_load.py).

Each worker is a replica (docs/operations.md, server/background/leadership.py): its own id and heartbeat, the same
database (PostgreSQL) and data dir; one of them leads. Every process binds each port with SO_REUSEPORT and the
kernel spreads new connections over them; an agent's connection stays with the worker it reached, as with replicas
behind one load-balanced address. The process the operator started checks the ports first (a port another program
holds is refused as without workers), starts the others once its own ports are up, starts again one that dies, and
stops them when it stops; a worker whose starter is gone stops by itself.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from corral.server.settings import Settings

log = logging.getLogger("corral.workers")
WORKER_OF_ENV = "CORRAL_WORKER_OF"  # set in a worker's environment: the pid of the process that started it
RESTART_AFTER_S = 1.0  # a worker that died is started again after this long (a crash loop costs one start a second)
PARENT_CHECK_S = 0.5


def worker_of() -> int | None:
    """The pid of the `corral server` that started this process as one of its workers (None: started by a person)."""
    raw = os.environ.get(WORKER_OF_ENV, "")
    return int(raw) if raw.isdigit() else None


def reuse_port_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` resolves to, as asyncio would bind them, with SO_REUSEPORT so the
    other workers bind the same port. Raises OSError when one cannot be bound."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys((i[0], i[1], i[2], "", i[4]) for i in infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def follow_parent(parent: int, on_gone: Callable[[], None]) -> threading.Thread:
    """Call `on_gone` once the process that started this worker is gone (this process is then another's child)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        log.warning("the server process that started this worker (%d) is gone: stopping", parent)
        on_gone()

    thread = threading.Thread(target=watch, name="corral-worker-parent", daemon=True)
    thread.start()
    return thread


class Workers:
    """The other `settings.workers - 1` server processes of this one, kept running until `stop`."""

    def __init__(self, settings: Settings) -> None:
        self.count = settings.workers - 1
        self.env = dict(os.environ)
        # What flags gave this process reaches the workers as the settings they stand for.
        self.env.update(
            CORRAL_HOST=settings.host,
            CORRAL_PORT=str(settings.port),
            CORRAL_DATA_DIR=str(settings.data_dir),
            CORRAL_POLICY=settings.policy,
            CORRAL_WORKERS=str(settings.workers),
            **{WORKER_OF_ENV: str(os.getpid())},
        )
        if settings.database_url:
            self.env["CORRAL_DATABASE_URL"] = settings.database_url
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * self.count
        self.restarts = 0
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="corral-workers", daemon=True)

    def start(self, ready: tuple[str, int] | None = None, timeout_s: float = 60.0) -> bool:
        """Start the workers; with `ready` (the agents' host and port, which only they serve) wait until one of them
        accepts connections there, or `timeout_s`: whether one did."""
        for i in range(self.count):
            self.procs[i] = self._spawn()
        self._watcher.start()
        if ready is None:
            return True
        host, port = ready
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((host if host not in ("0.0.0.0", "::", "") else "localhost", port), 1):
                    return True
            except OSError:
                time.sleep(0.1)
        return False

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "corral.cli.main", "server"], env=self.env)

    def _watch(self) -> None:
        while not self._stopping.wait(RESTART_AFTER_S):
            for i, proc in enumerate(self.procs):
                if proc is not None and proc.poll() is not None and not self._stopping.is_set():
                    log.warning("server worker %d exited (%s): starting it again", proc.pid, proc.returncode)
                    self.restarts += 1
                    self.procs[i] = self._spawn()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to every worker (each gives up the lead at once if it had it), then SIGKILL after `timeout_s`."""
        self._stopping.set()
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in live:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
