"""Jobs' web-UI ports: the port a job gets on its node at hand-over, and what agents last verified about who
listens on it (the job proxy connects only to a port the job's own processes hold).

Verification: an agent reports, in every sync, each of its runs' web-UI port with whether only that run's processes
listen there. A change the agent sees reaches the server within its check interval (WEB_PORT_CHECK_S on the agent)
plus one request; a report counts for REPORT_TTL_S at most, so an agent that stops syncing stops vouching for its
jobs' ports after that (its node is LOST soon after, and its jobs with it). The replica the agent syncs with keeps
the reports in memory and writes them to the database when they change (and every PERSIST_EVERY_S), so that any
replica's proxy can check a port whose agent syncs with another replica (issue 17).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from corral.api.schemas import WebPortCheck, WebPortReport
from corral.core.webports import select_job_port
from corral.store.base import StateStore
from corral.store.records import Job

REPORT_TTL_S = 75.0  # the longest long poll (60 s) and a margin: a live agent always reports again within it
PERSIST_EVERY_S = 30.0  # an unchanged report is written again this often (its age is what other replicas check)
READ_AGAIN_S = 1.0  # another replica's reports, read from the database, are kept this long for the proxy


def is_head(job: Job, node: str) -> bool:
    """Whether `node` runs the job's rank 0, where its web UI is served."""
    parts = job.placed_parts
    return bool(parts) and parts[0][0] == node


def assign_web_port(
    store: StateStore, job: Job, node: str, ports_by_job: dict[int, int], ports: range, salt: int = 0
) -> int | None:
    """The port `job`'s web UI gets on `node` (None: it has none here, or the range is full), recorded on the job.
    `ports_by_job` (job id -> port) holds this node's other jobs' ports and is updated."""
    if job.spec.port is None or not is_head(job, node):
        return None
    held = {p for j, p in ports_by_job.items() if j != job.id}
    port = select_job_port(job.id, job.spec.port, held, ports, salt)
    if port is not None:
        ports_by_job[job.id] = port
        if port != job.spec.port:
            store.set_job_port(job.id, port)
    return port


def compute_web_port_checks(jobs: Sequence[Job], node: str) -> list[WebPortCheck]:
    """The runs of `node` whose web-UI port its agent must watch: RUNNING, head here, a port assigned (any port:
    the ownership check is what makes one safe to proxy to, the range only keeps jobs apart)."""
    return [
        WebPortCheck(job_id=j.id, attempt=max(j.attempt, 1), rank=0, port=j.spec.port)
        for j in jobs
        if j.spec.port and is_head(j, node)
    ]


@dataclass(frozen=True, slots=True)
class _Seen:
    report: WebPortReport
    expires_at: float  # time.monotonic()


class WebPortStore(Protocol):
    def save_web_ports(self, node: str, reports: list[dict[str, Any]], now: datetime) -> None: ...

    def load_web_ports(self, node: str) -> tuple[list[dict[str, Any]], datetime | None]: ...


class WebPortRegistry:
    """What each node's agent last reported about its runs' web-UI ports. Thread-safe. With a `store`, reports of
    agents syncing with this replica are shared through it, and reports of the others are read from it."""

    def __init__(self, ttl_s: float = REPORT_TTL_S, store: WebPortStore | None = None) -> None:
        self._ttl_s = ttl_s
        self._store = store
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[int, _Seen]] = {}
        self._mine: dict[str, tuple[list[dict[str, Any]], float]] = {}  # node -> (last written, when: monotonic)
        self._read: dict[str, float] = {}  # node -> when its reports were last read from the store (monotonic)

    def record(self, node: str, reports: Sequence[WebPortReport], now: float | None = None) -> None:
        """A sync's reports replace the node's earlier ones (a sync carries all of them)."""
        at = time.monotonic() if now is None else now
        expires = at + self._ttl_s
        with self._lock:
            self._by_node[node] = {r.job_id: _Seen(r, expires) for r in reports}
            self._read.pop(node, None)
            dumped = [r.model_dump() for r in reports]
            last = self._mine.get(node)
            # An unchanged report is written again for its age (other replicas trust it REPORT_TTL_S), but an empty
            # one vouches for no port at any age: it is written once (1,000 idle nodes: no write a second).
            due = last is None or last[0] != dumped or (bool(dumped) and at - last[1] >= PERSIST_EVERY_S)
            if due:
                self._mine[node] = (dumped, at)
        if due and self._store is not None:
            self._store.save_web_ports(node, dumped, datetime.now(UTC))

    def _from_store(self, node: str, now: float) -> None:
        """The node's reports as another replica wrote them, when this replica has none of its own that live."""
        if self._store is None:
            return
        with self._lock:
            own = self._by_node.get(node)
            if node in self._mine and own and any(s.expires_at > now for s in own.values()):
                return  # the agent syncs here
            if now - self._read.get(node, float("-inf")) < READ_AGAIN_S:
                return
            self._read[node] = now
        reports, at = self._store.load_web_ports(node)
        if at is None:
            return
        age = max((datetime.now(UTC) - at).total_seconds(), 0.0)
        expires = now + self._ttl_s - age
        parsed = {r.job_id: _Seen(r, expires) for r in (WebPortReport.model_validate(x) for x in reports)}
        with self._lock:
            if node not in self._mine or not self._by_node.get(node):
                self._by_node[node] = parsed

    def why_not(self, node: str, job_id: int, attempt: int, port: int, now: float | None = None) -> str | None:
        """Why the proxy may not connect to `port` on `node` for this run now (None: it may)."""
        now = time.monotonic() if now is None else now
        self._from_store(node, now)
        with self._lock:
            seen = self._by_node.get(node, {}).get(job_id)
        if seen is None or seen.expires_at <= now:
            return f"node {node} has not confirmed that the job listens on port {port} yet"
        r = seen.report
        if (r.attempt, r.rank, r.port) != (max(attempt, 1), 0, port):
            return f"node {node} has not checked port {port} for this run of the job yet"
        if not r.listening:
            return r.detail or f"nothing of the job listens on port {port}"
        return None
