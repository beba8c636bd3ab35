"""Who listens on a job's web-UI port: the agent's side of the job proxy's check (Linux /proc).

A port counts as the job's only while every listening TCP socket on it (IPv4 and IPv6, any address) is held by a
process of the job: one in the session or process group its shim leads, or a descendant of the shim. The job's
Unix user is not the test (jobs of one user, or every job in single-user mode, share it), and a process that left
both the session and the shim's tree (setsid and a double fork) is no longer the job's. A socket the agent
cannot find among the job's processes' open files (another process's, or one it may not read) is not the job's.

Cost: the socket tables (/proc/net/tcp, tcp6) every check; the process table and the job's file descriptors
only when something listens on a watched port (not a scan of every process's descriptors).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Mapping

from corral.api.schemas import RunRef, WebPortCheck, WebPortReport

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


def load_process_table(proc: str = "/proc") -> ProcessTable:
    """Every process's parent, process group and session, from /proc/PID/stat (processes that end meanwhile
    are skipped)."""
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


WEB_PORT_CHECK_S = 1.0  # how often the agent looks again (a change is reported at once, not at the next long poll)


class WebPortWatch:
    """The web-UI ports the server asked this agent to watch (one per run, from each sync's reply) and what the
    agent last found there. `leader_of(run key)` is the pid of a running job's shim (None: not running). Thread-safe:
    the sync thread sets checks and reads reports, the watch thread refreshes."""

    def __init__(self, leader_of: Callable[[str], int | None], interval_s: float = WEB_PORT_CHECK_S) -> None:
        self._leader_of = leader_of
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
        table = load_process_table() if any(listeners.values()) else {}  # only when something listens
        found: dict[RunRef, tuple[int, bool, str]] = {}
        for run, port in checks.items():
            leader = self._leader_of(run.key)
            held = listeners.get(port, set())
            mine = load_socket_inodes(compute_job_pids(leader, table)) if leader is not None and held else set()
            found[run] = (port, *compute_port_verdict(port, leader, held, mine))
        return found
