"""`CORRAL_WORKERS`: several `corral server` processes on one machine, so that one server uses more than one core (one
Python process runs on one: the fleet's syncs, people's lists and the scheduler's passes take turns on its
interpreter, bench/api_load.py).

The process the operator started (the starter) serves people's ports and leads. It checks every port, binds the
agents' port itself and hands that listening socket to the N-1 workers it starts (inherited file descriptors, named
in CORRAL_WORKER_FDS): they accept the agents' connections from it, so no other program can take the port between
the check and the workers' start, and nothing else can share it. Each worker is a replica (docs/operations.md,
server/background/leadership.py): its own id and heartbeat, the same database (PostgreSQL) and data dir. The starter
starts again a worker that dies, and stops them when it stops; a worker whose starter is gone stops by itself.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from corral.core.telemetry import TelemetryBatch, batch_from_dict, batch_to_dict
from corral.server.settings import Settings

log = logging.getLogger("corral.workers")
WORKER_OF_ENV = "CORRAL_WORKER_OF"  # set in a worker's environment: the pid of the process that started it
WORKER_FDS_ENV = "CORRAL_WORKER_FDS"  # and the inherited descriptors of the agents' listening sockets
WORKER_CHANNEL_ENV = "CORRAL_WORKER_CHANNEL"  # and of its end of the channel that carries telemetry to the starter
WORKER_REPLICA_ENV = (
    "CORRAL_WORKER_REPLICA_OF"  # and its starter's replica id, which its own extends (worker_replica_id)
)
WORKER_ROLE_ENV = "CORRAL_WORKER_ROLE"  # and what it does: "agents" (the agents' port) or "loops" (the leader's loops)
WORKER_WAKE_ENV = "CORRAL_WORKER_WAKE"  # the loops' one: its end of the channel on which its starter wakes its loops
WORKER_RELAY_ENV = "CORRAL_WORKER_RELAY"  # and of the one on which its starter relays the agents' workers' batches
# What the starter tells the loops' process on the wake channel, one byte each (Workers.tell, inherited_wakes): the
# people's API changed what one of the leader's loops acts on, which it would otherwise see at its next pass.
WAKE_SCHEDULER = b"w"  # a submission, a cancel: a scheduling pass
WAKE_BUDGETS = b"b"  # a budget set or removed: read the budgets again (then a scheduling pass)
WAKE_POOLS = b"p"  # a cloud pool created, changed or removed: an autoscaler pass
WAKE_SERVICES = b"s"  # a request waits for a service scaled to zero: a services controller pass
MAX_MESSAGE = 1 << 20  # one batch, encoded (64 GPUs and 1,000 events fit many times over)
RESTART_AFTER_S = 1.0  # a worker that died is started again after this long, doubled while it keeps dying young
RESTART_MAX_S = 30.0
STABLE_AFTER_S = 30.0  # a worker that ran this long before dying is started again after RESTART_AFTER_S
PARENT_CHECK_S = 0.5


class NotAWorker(RuntimeError):
    """CORRAL_WORKER_OF names no starter of this process (set by hand, or the starter is gone)."""


def worker_of() -> int | None:
    """The pid of the `corral server` that started this process as one of its workers (None: started by a person).
    Raises NotAWorker when the variable is set but this process is not that one's child with its sockets."""
    raw = os.environ.get(WORKER_OF_ENV)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) != os.getppid() or not os.environ.get(WORKER_FDS_ENV):
        raise NotAWorker(
            f"{WORKER_OF_ENV} is set by `corral server` for the workers it starts (CORRAL_WORKERS), not by hand: unset it"
        )
    return int(raw)


def worker_role() -> str:
    """What this worker does: "agents" or "loops" (Workers)."""
    role = os.environ.get(WORKER_ROLE_ENV, "agents")
    return role if role in ("agents", "loops") else "agents"


def inherited_wakes(handlers: Mapping[bytes, Callable[[], None]]) -> threading.Thread | None:
    """The loops' process: the handler of each byte its starter sends (WAKE_SCHEDULER...: the starter's loops do
    not run, and what its API changed is this process's to act on), until the starter's end closes. None when this
    process was handed no such channel."""
    raw = os.environ.get(WORKER_WAKE_ENV, "")
    if not raw.isdigit():
        return None
    sock = socket.socket(fileno=int(raw))

    def run() -> None:
        with sock:
            while True:
                try:
                    data = sock.recv(64)
                except OSError:
                    return
                if not data:
                    return
                handler = handlers.get(data)  # one byte a message (Workers.tell)
                if handler is not None:
                    try:
                        handler()
                    except Exception:  # noqa: BLE001 - one failed wake never stops the channel
                        log.exception("a wake from the starter failed")

    thread = threading.Thread(target=run, name="corral-worker-wakes", daemon=True)
    thread.start()
    return thread


def worker_replica_id() -> str | None:
    """A worker's replica id: its starter's, then `/worker-<pid>`. Replicas whose id extends another's this way are
    one server's processes (a worker forwards its agents' telemetry batches to its starter: that one's alert round
    needs no read-back of what the worker stored). None when the starter named none."""
    of = os.environ.get(WORKER_REPLICA_ENV, "")
    return f"{of}/worker-{os.getpid()}" if of else None


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` resolves to, as asyncio binds them (SO_REUSEADDR, IPv6 sockets
    IPv6-only), inheritable by the workers. Raises OSError when one cannot be bound."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys((i[0], i[1], i[2], "", i[4]) for i in infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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


def inherited_sockets() -> list[socket.socket]:
    """The agents' listening sockets this worker's starter handed it."""
    fds = [int(x) for x in os.environ.get(WORKER_FDS_ENV, "").split(",") if x.isdigit()]
    sockets = [socket.socket(fileno=fd) for fd in fds]
    for sock in sockets:
        sock.setblocking(False)
    return sockets


class BatchChannel:
    """A worker's end of its channel to the starter: each telemetry batch it received and stored, for the starter's
    latest values (`GET /metrics/latest`, the `/metrics` GPU and host gauges, the check before enabling a GPU). A
    datagram each; never blocks the agent's request: a batch the starter has no room for yet is dropped (the next
    one, seconds later, replaces it anyway)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        # a datagram is at most the send buffer, which the kernel doubles (up to net.core.wmem_max): at most
        # MAX_MESSAGE, what the reader receives whole (a larger one would arrive cut short)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE // 2)
        self.dropped = 0

    def send_wake(self) -> None:
        """Ask the leader's scheduler for a pass soon (a job ended and freed GPUs, a node registered, a GPU failed
        or came back): its starter relays this to the loops' process. Never blocks; a wake it has no room for is
        replaced by the leader's next pass, at most CORRAL_SCHEDULE_INTERVAL_S later."""
        try:
            self.sock.send(WAKE_MESSAGE)
        except OSError:
            self.dropped += 1

    def send(self, batch: TelemetryBatch, stored: int) -> None:
        data = _encoded(batch, stored)
        try:
            self.sock.send(data)
            return
        except OSError as e:  # full (the starter is busy), too large, or the starter is gone
            if e.errno != errno.EMSGSIZE:
                self.dropped += 1
                return
        # Larger than the channel's buffer (a batch may carry 64 GPUs' process lists and 1,000 events with long
        # details): the GPUs' values, health and events' kinds without the process lists and the details' tails,
        # so that the starter still holds this node's newest values (its alert rounds read nothing back for it).
        slim = replace(
            batch,
            gpus=tuple(replace(g, processes=()) for g in batch.gpus),
            events=tuple(replace(e, detail=e.detail[:SLIM_DETAIL]) for e in batch.events),
        )
        for attempt in (slim, replace(slim, events=())):  # the events last: the GPUs' values count most
            try:
                self.sock.send(_encoded(attempt, stored))
                return
            except OSError as e:
                if e.errno != errno.EMSGSIZE:
                    break
        self.dropped += 1


WAKE_MESSAGE = b'{"wake":1}'  # on a worker's channel: not a batch, a wake for the leader's scheduler
SLIM_DETAIL = 80  # characters of an event's detail kept when a batch is too large for the channel


def _encoded(batch: TelemetryBatch, stored: int) -> bytes:
    return json.dumps({"stored": stored, "batch": batch_to_dict(batch)}, separators=(",", ":")).encode()


def inherited_relay() -> socket.socket | None:
    """The loops' process: its end of the channel on which its starter relays the agents' workers' batches."""
    raw = os.environ.get(WORKER_RELAY_ENV, "")
    return socket.socket(fileno=int(raw)) if raw.isdigit() else None


def inherited_channel() -> BatchChannel | None:
    raw = os.environ.get(WORKER_CHANNEL_ENV, "")
    return BatchChannel(socket.socket(fileno=int(raw))) if raw.isdigit() else None


def read_batches(
    sock: socket.socket,
    on_batch: Callable[[TelemetryBatch, int], None],
    relay: Callable[[bytes], None] | None = None,
    on_wake: Callable[[], None] | None = None,
) -> threading.Thread:
    """The starter's end: `on_batch` for each batch the worker sends, and `on_wake` for each wake
    (BatchChannel.send_wake), until the worker's end closes; `relay` gets each batch as it came (the starter hands it
    on to the loops' process, which reads the relayed ones the same way)."""

    def run() -> None:
        with sock:
            while True:
                try:
                    data = sock.recv(MAX_MESSAGE)
                except OSError:
                    return
                if not data:
                    return  # the worker exited
                try:
                    if data == WAKE_MESSAGE:
                        if on_wake is not None:
                            on_wake()
                        continue
                    message = json.loads(data)
                    on_batch(batch_from_dict(message["batch"]), int(message["stored"]))
                    if relay is not None:  # one that reads as a batch
                        relay(data)
                except Exception:  # noqa: BLE001 - one bad message never stops the channel
                    log.exception("a worker's telemetry batch could not be read")

    thread = threading.Thread(target=run, name="corral-worker-batches", daemon=True)
    thread.start()
    return thread


STUCK_AFTER_S = 120.0  # a loop of the loops' process that finished no pass this long is stuck (watch_progress)


class Passes(Protocol):
    name: str
    passes: int


def watch_progress(
    loops: Sequence[Passes],
    on_stuck: Callable[[str], None],
    stuck_after_s: float = STUCK_AFTER_S,
    every_s: float = 5.0,
    stop: threading.Event | None = None,
) -> threading.Thread:
    """The loops' process: `on_stuck(name)` once one of `loops` (the lease's renewal, the scheduler) has finished
    no pass for `stuck_after_s` (a query that never returns, a lock never released). Nothing else on this machine
    may take the lease over, so the process exits and its starter starts another (server/workers.py)."""
    stop = stop or threading.Event()

    def watch() -> None:
        seen = {id(loop): (loop.passes, time.monotonic()) for loop in loops}
        while not stop.wait(every_s):
            now = time.monotonic()
            for loop in loops:
                passes, since = seen[id(loop)]
                if loop.passes != passes:
                    seen[id(loop)] = (loop.passes, now)
                elif now - since >= stuck_after_s:
                    on_stuck(loop.name)
                    return

    thread = threading.Thread(target=watch, name="corral-loops-watch", daemon=True)
    thread.start()
    return thread


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


def _send_nowait(sock: socket.socket | None, data: bytes) -> None:
    """One message on a non-blocking channel to the loops' process; none when it has no room or is gone."""
    if sock is None:
        return
    try:
        sock.send(data)
    except OSError:
        pass


class Workers:
    """The other server processes of this one, kept running until `stop`: `settings.workers - 1` serving `sockets`
    (the agents' port), and one that runs the leader's loops (the scheduler's passes, alert rounds, schedules,
    services, cloud pools), so that no pass holds the interpreter of a process that answers requests. It alone
    leads (the others never claim the lease), writes what people are told of the queue to the data dir
    (server/background/scheduler_view.py: view_path) and is woken by `tell` (what the starter's API changed)."""

    def __init__(
        self,
        settings: Settings,
        sockets: list[socket.socket],
        on_batch: Callable[[TelemetryBatch, int], None] | None = None,
        replica_of: str = "",
    ) -> None:
        """`on_batch`: each telemetry batch a worker received and stored (BatchChannel). `replica_of`: this
        process's replica id, which the workers' ids extend (worker_replica_id)."""
        self.count = settings.workers - 1
        self.roles = ["agents"] * self.count + ["loops"]
        self.on_batch = on_batch
        self._wake: socket.socket | None = None  # the starter's end of the loops' process's wake channel
        self._relay: socket.socket | None = None  # and of the channel it relays the agents' workers' batches on
        self.fds = [sock.fileno() for sock in sockets]
        self.env = dict(os.environ)
        # What flags gave this process reaches the workers as the settings they stand for.
        self.env.update(
            CORRAL_HOST=settings.host,
            CORRAL_PORT=str(settings.port),
            CORRAL_DATA_DIR=str(settings.data_dir),
            CORRAL_POLICY=settings.policy,
            CORRAL_WORKERS=str(settings.workers),
            **{
                WORKER_OF_ENV: str(os.getpid()),
                WORKER_FDS_ENV: ",".join(map(str, self.fds)),
                WORKER_ROLE_ENV: "agents",
            },
        )
        if replica_of:
            self.env[WORKER_REPLICA_ENV] = replica_of
        if settings.database_url:
            self.env["CORRAL_DATABASE_URL"] = settings.database_url
        self.procs: list[tuple[subprocess.Popen[bytes], float, float] | None] = [None] * len(
            self.roles
        )  # (proc, start, delay), in the order of `roles`
        self._lock = threading.Lock()  # a worker is never started once `stop` began
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="corral-workers", daemon=True)

    def start(self) -> None:
        with self._lock:
            for i, role in enumerate(self.roles):
                self.procs[i] = (self._spawn(role), time.monotonic(), RESTART_AFTER_S)
        self._watcher.start()

    def tell(self, kind: bytes) -> None:
        """Wake one of the loops' process's loops (WAKE_SCHEDULER...). Never blocks: a wake the channel has no room
        for (hundreds wait already, while the loops' process starts) is dropped, and that loop acts at its next pass
        (each loop's first pass comes as the process starts); when the loops' process is gone, the one started again
        begins with a pass of each loop."""
        _send_nowait(self._wake, kind)

    def relay(self, data: bytes) -> None:
        """Hand an agents' worker's telemetry batch on to the loops' process (its alert rounds read the GPUs' events,
        its autoscaler the GPUs' use); never blocks: a batch it has no room for is replaced by the node's next."""
        _send_nowait(self._relay, data)

    def _spawn(self, role: str) -> subprocess.Popen[bytes]:
        code = "import sys\nfrom corral.cli.main import main\nsys.exit(main(['server']))"
        if role == "loops":
            wake, wake_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            relay, relay_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            wake.setblocking(False)
            relay.setblocking(False)
            relay.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE // 2)
            with wake_theirs, relay_theirs:
                env = self.env | {
                    WORKER_ROLE_ENV: "loops",
                    WORKER_WAKE_ENV: str(wake_theirs.fileno()),
                    WORKER_RELAY_ENV: str(relay_theirs.fileno()),
                }
                proc = subprocess.Popen(
                    [sys.executable, "-c", code],
                    env=env,
                    pass_fds=(*self.fds, wake_theirs.fileno(), relay_theirs.fileno()),
                )
            old = (self._wake, self._relay)
            self._wake, self._relay = wake, relay
            for sock in old:
                if sock is not None:
                    sock.close()
            return proc
        if self.on_batch is None:
            return subprocess.Popen([sys.executable, "-c", code], env=self.env, pass_fds=self.fds)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            env = self.env | {WORKER_CHANNEL_ENV: str(theirs.fileno())}
            proc = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(*self.fds, theirs.fileno()))
        read_batches(mine, self.on_batch, relay=self.relay, on_wake=lambda: self.tell(WAKE_SCHEDULER))
        return proc

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            now = time.monotonic()
            with self._lock:
                if self._stopping.is_set():
                    return
                for i, entry in enumerate(self.procs):
                    if entry is None:
                        continue
                    proc, started, delay = entry
                    if proc.poll() is None:
                        continue
                    lived = now - started
                    wait = RESTART_AFTER_S if lived >= STABLE_AFTER_S else delay
                    if lived < wait:
                        continue  # dead, started again once it has been gone long enough
                    log.warning("server worker %d exited (%s): starting it again", proc.pid, proc.returncode)
                    self.procs[i] = (self._spawn(self.roles[i]), now, min(wait * 2, RESTART_MAX_S))

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to every worker (each gives up the lead at once if it had it), then SIGKILL after `timeout_s`."""
        with self._lock:
            self._stopping.set()
            live = [e[0] for e in self.procs if e is not None and e[0].poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in live:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for sock in (self._wake, self._relay):
            if sock is not None:
                sock.close()
        self._wake = self._relay = None
