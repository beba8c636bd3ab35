"""Who listens on a job's web-UI port: the agent's side of the job proxy's check (Linux /proc).

A port counts as the job's only while every listening TCP socket on it (IPv4 and IPv6, any address) is held by a
process of the job: one in the session or process group its shim leads, or a descendant of the shim. The job's
Unix user is not the test (jobs of one user, or every job in single-user mode, share it), and a process that left
both the session and the shim's tree (setsid and a double fork) is no longer the job's. A socket the agent
cannot find among the job's processes' open files (another process's, or one it may not read) is not the job's.

A container job's port (its processes are in their own network namespace) counts as the job's only while its
engine says this run's container runs and publishes that node port, something listens on the port inside the
container, and every listening socket on the node port is held by the engine's own forwarder of this very
container: Docker's docker-proxy (root, a child of a root dockerd, its command line naming this port, the
container's address and its port inside) or Podman's conmon (root, its command line naming the container's id).
None of that can be had by a tenant: jobs never run as root, cannot become dockerd's children, and no job publishes
ports but through Corral. No listener at all (an engine forwarding by NAT only) is fine; rootless engines'
forwarders (rootlesskit, rootlessport) run as a user and are not accepted.

Cost: the socket tables (/proc/net/tcp, tcp6) every check; the process table and the job's file descriptors
only when something listens on a watched port (not a scan of every process's descriptors).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from corral.api.schemas import RunRef, WebPortCheck, WebPortReport
from corral.executors.base import PublishedPort

Listeners = dict[int, set[int]]  # port -> inodes of the sockets listening on it
ProcessTable = dict[int, tuple[int, int, int]]  # pid -> (parent pid, process group, session)
_TCP_LISTEN = "0A"


def load_listeners(ports: Collection[int], proc: str = "/proc") -> Listeners:
    """Listening TCP sockets (IPv4 and IPv6) on `ports`, by port. Raises OSError when no table can be read."""
    found: Listeners = {p: set() for p in ports}
    read = 0
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:  # a kernel without IPv6
            continue
        read += 1
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in found:
                found[port].add(int(fields[9]))
    if not read:
        raise OSError(f"no TCP socket table under {proc}/net")
    return found


def load_process_table(proc: str = "/proc", names: dict[int, str] | None = None) -> ProcessTable:
    """Every process's parent, process group and session, from /proc/PID/stat (processes that end meanwhile
    are skipped); each one's command name (comm) into `names` when given."""
    table: ProcessTable = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
        if len(rest) >= 4:
            table[int(name)] = (int(rest[1]), int(rest[2]), int(rest[3]))
            if names is not None:
                names[int(name)] = stat[stat.find("(") + 1 : stat.rfind(")")]
    return table


def compute_job_pids(leader: int, table: Mapping[int, tuple[int, int, int]]) -> set[int]:
    """The job's processes: the shim (`leader`), those in its process group or session, and its descendants."""
    pids = {pid for pid, (_, pgid, sid) in table.items() if pid == leader or pgid == leader or sid == leader}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    stack, seen = [leader], {leader}
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return pids | seen


def load_socket_inodes(pids: Collection[int], proc: str = "/proc") -> set[int]:
    """Inodes of the sockets these processes hold open (a process that ends meanwhile is skipped)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{proc}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def compute_port_verdict(port: int, leader: int | None, listeners: set[int], job_sockets: set[int]) -> tuple[bool, str]:
    """(listening, why not) for a job's port: every socket listening on it must be one the job's processes hold."""
    if leader is None:
        return False, "the job is not running on this node"
    if not listeners:
        return False, f"nothing listens on port {port}"
    if not listeners <= job_sockets:
        return False, f"port {port} is held by a process that is not the job's"
    return True, ""


ENGINE_FORWARDERS = ("docker-proxy", "conmon")  # the processes that may hold a container's published port


def load_root_uids(pid: int, proc: str = "/proc") -> bool:
    """The process runs as root (real and effective uid 0); False when it cannot be read."""
    try:
        with open(f"{proc}/{pid}/status", encoding="utf-8", errors="replace") as f:
            uid = next((line.split()[1:3] for line in f if line.startswith("Uid:")), None)
    except OSError:
        return False
    return uid == ["0", "0"]


def load_cmdline(pid: int, proc: str = "/proc") -> list[str]:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def is_engine_forwarder(name: str, args: Sequence[str], parent: str, port: int, published: PublishedPort) -> bool:
    """A root process named `name` (command line `args`, its parent's name `parent`) forwards `port` to exactly
    this container for its engine: docker-proxy, a child of dockerd, naming the node port, one of the container's
    addresses and its port inside; or conmon naming the container's id."""
    if name == "docker-proxy" and parent == "dockerd":
        flags = dict(zip(args[1::2], args[2::2], strict=False))
        return (
            flags.get("-host-port") == str(port)
            and flags.get("-container-port") == str(published.container_port)
            and flags.get("-container-ip", "") in published.container_ips
        )
    if name == "conmon" and published.container_id:
        return any(
            (a in ("-c", "--cid") and b == published.container_id) or a == f"--cid={published.container_id}"
            for a, b in zip(args, [*args[1:], ""], strict=True)
        )
    return False


def find_forwarder_pids(
    port: int, published: PublishedPort, table: ProcessTable, names: Mapping[int, str], proc: str = "/proc"
) -> set[int]:
    """The processes that forward `port` to the container for its engine (is_engine_forwarder, run as root, with
    a parent that runs as root)."""
    found: set[int] = set()
    for pid, name in names.items():
        if name not in ENGINE_FORWARDERS or pid not in table:
            continue
        ppid = table[pid][0]
        parent_ok = name == "conmon" or load_root_uids(ppid, proc)  # conmon is re-parented to init on purpose
        if (
            parent_ok
            and load_root_uids(pid, proc)
            and is_engine_forwarder(name, load_cmdline(pid, proc), names.get(ppid, ""), port, published)
        ):
            found.add(pid)
    return found


def compute_container_port_verdict(
    port: int, published: PublishedPort, inside: bool | None, listeners: set[int], forwarder_sockets: set[int]
) -> tuple[bool, str]:
    """(listening, why not) for a container job's node port: the engine publishes it for the running container,
    something listens inside (`inside`; None: not known), and every listener on the node port is the engine's."""
    if published.host_port != port:
        return False, f"the job's container publishes port {published.host_port}, not {port}"
    if inside is False:
        return False, f"nothing listens on port {published.container_port} inside the job's container"
    if not listeners <= forwarder_sockets:
        return False, f"port {port} is held by a process that is not the job's container engine's"
    return True, ""


def load_inside_listening(published: PublishedPort, proc: str = "/proc") -> bool | None:
    """Something listens on the container's port inside its network namespace (seen through its main process);
    None when that cannot be read (the engine's forwarding is then trusted alone)."""
    if not published.pid:
        return None
    try:
        return bool(load_listeners([published.container_port], f"{proc}/{published.pid}")[published.container_port])
    except OSError:
        return None


WEB_PORT_CHECK_S = 1.0  # how often the agent looks again (a change is reported at once, not at the next long poll)


class WebPortWatch:
    """The web-UI ports the server asked this agent to watch (one per run, from each sync's reply) and what the
    agent last found there. `leader_of(run key)` is the pid of a running job's shim (None: not running);
    `published_of(run key)` what the engine publishes for a container run (Executor.published_port). Thread-safe:
    the sync thread sets checks and reads reports, the watch thread refreshes."""

    def __init__(
        self,
        leader_of: Callable[[str], int | None],
        interval_s: float = WEB_PORT_CHECK_S,
        published_of: Callable[[str], PublishedPort | None] | None = None,
    ) -> None:
        self._leader_of = leader_of
        self._published_of = published_of or (lambda _key: None)
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._checks: dict[RunRef, int] = {}
        self._found: dict[RunRef, tuple[int, bool, str]] = {}  # run -> (port, listening, why not)
        self._due = 0.0

    def set_checks(self, checks: Collection[WebPortCheck]) -> None:
        wanted = {RunRef(job_id=c.job_id, attempt=c.attempt, rank=c.rank): c.port for c in checks}
        with self._lock:
            if wanted != self._checks:
                self._checks = wanted
                self._due = 0.0  # a new run's port: look at once

    def reports(self) -> list[WebPortReport]:
        with self._lock:
            return [
                WebPortReport(
                    job_id=run.job_id,
                    attempt=run.attempt,
                    rank=run.rank,
                    port=port,
                    listening=found[1] if found and found[0] == port else False,
                    detail=(found[2] if found and found[0] == port else "not checked yet")[:500],
                )
                for run, port in self._checks.items()
                for found in [self._found.get(run)]
            ]

    def refresh(self) -> bool:
        """Look again when due; whether any run's verdict changed (then the agent reports at once)."""
        now = time.monotonic()
        with self._lock:
            if now < self._due or not self._checks:
                return False
            self._due = now + self._interval_s
            checks = dict(self._checks)
        try:
            found = self._look(checks)
        except OSError as e:  # not verified is the safe answer: the proxy then refuses
            found = {
                run: (port, False, f"the agent cannot read the node's sockets: {e}") for run, port in checks.items()
            }
        with self._lock:
            changed = found != {r: f for r, f in self._found.items() if r in checks}
            self._found = found
        return changed

    def _look(self, checks: Mapping[RunRef, int]) -> dict[RunRef, tuple[int, bool, str]]:
        listeners = load_listeners(set(checks.values()))
        names: dict[int, str] = {}
        table = load_process_table(names=names) if any(listeners.values()) else {}  # only when something listens
        found: dict[RunRef, tuple[int, bool, str]] = {}
        for run, port in checks.items():
            leader = self._leader_of(run.key)
            held = listeners.get(port, set())
            published = self._published_of(run.key) if leader is None else None
            if published is not None:  # a container: the engine's word, then its forwarder's sockets
                forwarders = find_forwarder_pids(port, published, table, names) if held else set()
                theirs = load_socket_inodes(forwarders) if forwarders else set()
                inside = load_inside_listening(published)
                found[run] = (port, *compute_container_port_verdict(port, published, inside, held, theirs))
                continue
            mine = load_socket_inodes(compute_job_pids(leader, table)) if leader is not None and held else set()
            found[run] = (port, *compute_port_verdict(port, leader, held, mine))
        return found
