"""The StateStore protocol: everything the server persists, behind one interface.

Contracts that hold for every implementation:
- every method is one transaction: it either fully happens or not at all;
- state-changing job methods are guarded compare-and-set: they return False (and change nothing)
  when the job is not in the state they expect, so concurrent callers cannot double-apply;
- methods block on the database and may raise sqlalchemy errors only for infrastructure failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.records import Job, JobEvent, JobSpec, Node, TokenRecord, User


class StateStore(Protocol):
    def migrate(self) -> None:
        """Create or upgrade the schema to the newest migration. Idempotent."""

    def close(self) -> None:
        """Release connections."""

    # users and tokens
    def create_user(self, name: str, role: str, now: datetime) -> User:
        """Raises ConflictError when the name is taken."""

    def get_user(self, user_id: int) -> User | None: ...

    def count_users(self) -> int: ...

    def create_token(self, token_hash: str, kind: str, name: str, user_id: int | None, now: datetime) -> TokenRecord: ...

    def find_token(self, token_hash: str) -> TokenRecord | None:
        """The non-revoked token with this hash, or None."""

    # nodes
    def upsert_node(
        self, name: str, hostname: str, backend: str, cpu_milli: int, memory_mib: int,
        labels: dict[str, str], gpus: Sequence[GpuInfo], now: datetime,
    ) -> Node:
        """Register or re-register a node, replacing its GPU inventory; marks it READY."""

    def get_node(self, name: str) -> Node | None: ...

    def list_nodes(self) -> list[Node]: ...

    def touch_node(self, name: str, now: datetime) -> bool:
        """Record a heartbeat (a LOST node is READY again); False for an unknown node."""

    def mark_nodes_lost(self, heartbeat_before: datetime) -> list[str]:
        """READY nodes whose last heartbeat is older than `heartbeat_before` become LOST; returns their names."""

    # jobs
    def create_job(self, spec: JobSpec, now: datetime) -> Job:
        """Persist an accepted job as PENDING (durable when this returns)."""

    def get_job(self, job_id: int) -> Job | None: ...

    def list_jobs(self, states: Sequence[JobState] | None = None, limit: int | None = None) -> list[Job]:
        """Jobs ordered by id; `states` filters."""

    def list_node_jobs(self, node: str) -> list[Job]:
        """RUNNING jobs assigned to `node`."""

    def assign_job(self, job_id: int, node: str, gpu_indices: Sequence[int], now: datetime) -> bool:
        """PENDING -> RUNNING on `node` with those GPUs."""

    def mark_delivered(self, job_ids: Sequence[int]) -> None:
        """Note that the node's agent has received these RUNNING jobs."""

    def request_cancel(self, job_id: int, now: datetime) -> Job | None:
        """PENDING -> CANCELLED at once; RUNNING -> cancel_requested (the agent stops it).
        Returns the job after the change; None if unknown. Terminal jobs are returned unchanged."""

    def finish_job(self, job_id: int, state: JobState, exit_code: int | None, reason: str, now: datetime) -> bool:
        """RUNNING (or PENDING) -> a terminal state; False if already terminal."""

    def requeue_job(self, job_id: int, reason: str, now: datetime) -> bool:
        """RUNNING -> PENDING (node and GPUs released, attempt kept), e.g. its node was lost. False otherwise."""

    def add_event(self, job_id: int, kind: str, message: str, now: datetime) -> None: ...

    def list_events(self, job_id: int) -> list[JobEvent]: ...
