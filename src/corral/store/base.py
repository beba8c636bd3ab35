"""The StateStore protocol: what the scheduler loop, the agent-facing services and bootstrap persist.

Contracts that hold for every implementation:
- every method is one transaction: it either fully happens or not at all;
- state-changing job methods are guarded compare-and-set: they return False (and change nothing)
  when the job is not in the state they expect, so concurrent callers cannot double-apply;
- every method blocks on the database and may raise sqlalchemy errors only for infrastructure failures;
- datetimes come back timezone-aware (UTC).

Admin-only features (schedules, telemetry, alert rules, audit, cordon/disable, user and token management)
are typed against SqlStore directly: they have a single implementation and no caller needs a double.
`tests/contract/test_state_store_contract.py` checks that SqlStore satisfies this protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.records import Job, JobEvent, JobSpec, Node, Queue, Quota, SecretRecord, Tenant, TokenRecord, User


class StateStore(Protocol):
    def migrate(self) -> None:
        """Create or upgrade the schema to the newest migration. Idempotent."""

    def close(self) -> None:
        """Release connections. Idempotent; the store is unusable afterwards."""

    # users and tokens
    def create_user(self, name: str, role: str, now: datetime, tenant_id: int | None = None,
                    password_hash: str = "") -> User:
        """Raises ConflictError when the name is taken (not idempotent). `tenant_id` must exist."""

    def get_user(self, user_id: int) -> User | None:
        """The user, or None if unknown. Read-only."""

    def count_users(self) -> int:
        """How many users exist (bootstrap creates the admin when 0). Read-only."""

    def create_token(self, token_hash: str, kind: str, name: str, user_id: int | None, now: datetime,
                     expires_at: datetime | None = None) -> TokenRecord:
        """Store a token by its hash (never the secret). Not idempotent: each call adds a row."""

    def find_token(self, token_hash: str) -> TokenRecord | None:
        """The non-revoked token with this hash, or None (expiry is the caller's check). Read-only."""

    # tenants, quotas, queues (the queueing core's inputs)
    def create_tenant(self, name: str, now: datetime, parent_id: int | None = None, weight: float = 1.0) -> Tenant:
        """Creates the tenant and its `default` queue. Raises ConflictError when the name is taken."""

    def find_tenant(self, name: str) -> Tenant | None:
        """The tenant of that name, or None. Read-only."""

    def list_tenants(self) -> list[Tenant]:
        """Every tenant, ordered by id. Read-only."""

    def list_quotas(self, tenant_id: int | None = None) -> list[Quota]:
        """Quotas ordered by (tenant, GPU model); `tenant_id` filters. Read-only."""

    def list_queues(self, tenant_id: int | None = None) -> list[Queue]:
        """Queues ordered by (tenant, name); `tenant_id` filters. Read-only."""

    def save_usage(self, gpu_seconds: dict[int, float], as_of: datetime) -> None:
        """Replace fair share's decayed usage (tenant id -> GPU-seconds); unknown tenants are dropped. Idempotent."""

    def load_usage(self) -> tuple[dict[int, float], datetime | None]:
        """The last saved usage and when it was taken (None: nothing saved yet). Read-only."""

    # nodes
    def upsert_node(
        self, name: str, hostname: str, backend: str, cpu_milli: int, memory_mib: int,
        labels: dict[str, str], gpus: Sequence[GpuInfo], now: datetime, address: str = "", isolation: str = "",
    ) -> Node:
        """Register or re-register a node, replacing its GPU inventory (GPU health and admin state follow the
        GPU's UUID); marks it READY. `address` defaults to the hostname; `isolation` is what its agent reported
        (users | single-user). Idempotent."""

    def get_node(self, name: str) -> Node | None:
        """The node with its GPUs, or None. Read-only."""

    def list_nodes(self) -> list[Node]:
        """Every node (any state) with its GPUs, ordered by name. Read-only."""

    def touch_node(self, name: str, now: datetime) -> bool:
        """Record a heartbeat (a LOST node is READY again); False for an unknown node."""

    def mark_nodes_lost(self, heartbeat_before: datetime) -> list[str]:
        """READY nodes whose last heartbeat is older than `heartbeat_before` become LOST; returns their names."""

    def add_node_event(self, node: str, gpu_index: int | None, kind: str, message: str, now: datetime) -> None:
        """Append to the node's event log (`gpu_index` None: the whole node). Not idempotent."""

    # jobs
    def create_job(self, spec: JobSpec, now: datetime) -> Job:
        """Persist an accepted job as PENDING (durable when this returns). Not idempotent."""

    def create_job_once(self, spec: JobSpec, now: datetime, owner: str, key: str, request_hash: str,
                        keep: timedelta) -> tuple[Job, bool]:
        """create_job made idempotent by (owner, key): (the job, True) when this call created it; (the job an earlier
        call with the same owner, key and request_hash made within `keep`, False) otherwise, also when the two calls
        race (exactly one creates). Raises IdempotencyKeyReused for the same key with another request_hash. The key
        and the job are written in one transaction; keys older than `keep` are forgotten."""

    def get_job(self, job_id: int) -> Job | None:
        """The job, or None if unknown. Read-only."""

    def list_jobs(self, states: Sequence[JobState] | None = None, limit: int | None = None,
                  tenant_id: int | None = None, newest_first: bool = False, before_id: int | None = None,
                  node: str | None = None, schedule_id: int | None = None) -> list[Job]:
        """Jobs ordered by id (descending with `newest_first`); every other argument filters. Read-only."""

    def list_node_jobs(self, node: str) -> list[Job]:
        """RUNNING jobs with a part on `node` (a gang's job is listed on each of its nodes). Read-only."""

    def assign_job(self, job_id: int, node: str, gpu_indices: Sequence[int], now: datetime) -> bool:
        """PENDING -> RUNNING on `node` with those GPUs (one part). Compare-and-set."""

    def assign_job_parts(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        """PENDING -> RUNNING with one (node, GPU indices) part per node, all at once; `parts` is not empty.
        Compare-and-set: False if the job is no longer PENDING."""

    def mark_delivered(self, job_ids: Sequence[int], node: str | None = None) -> None:
        """Note that `node`'s agent holds its part of these RUNNING jobs (others are skipped). Idempotent."""

    def set_job_port(self, job_id: int, port: int) -> bool:
        """Record the web-UI port assigned to a RUNNING job on its node (False: not RUNNING or unknown). Idempotent."""

    def record_part_exit(self, job_id: int, node: str, exit_code: int) -> dict[str, int]:
        """Keep a gang part's exit code; returns every part's exit code so far ({} for an unknown job).
        Idempotent per (job, node)."""

    def request_cancel(self, job_id: int, now: datetime) -> Job | None:
        """PENDING -> CANCELLED at once; RUNNING -> cancel_requested (the agent stops it).
        Returns the job after the change; None if unknown. Terminal jobs are returned unchanged."""

    def request_preempt(self, job_id: int, reason: str, now: datetime) -> bool:
        """Flag a RUNNING job for preemption (its agent stops it, then it requeues; it keeps its GPUs until then).
        Compare-and-set: False if not RUNNING or already being preempted or cancelled."""

    def finish_job(self, job_id: int, state: JobState, exit_code: int | None, reason: str, now: datetime) -> bool:
        """RUNNING (or PENDING, for FAILED and CANCELLED) -> `state`, as core.states.TRANSITIONS allows; False when
        the job is not in a state that may move there (a terminal job never moves). Compare-and-set. Raises
        ValueError when `state` is not terminal."""

    def requeue_job(self, job_id: int, reason: str, now: datetime, not_before: datetime | None = None,
                    failure: bool = False, preempted: bool = False) -> bool:
        """RUNNING -> PENDING (node and GPUs released, place in the queue and attained GPU-seconds kept), not
        started before `not_before`; `failure` / `preempted` count the cause. Compare-and-set: False otherwise."""

    def add_event(self, job_id: int, kind: str, message: str, now: datetime) -> None:
        """Append to the job's event log. Not idempotent."""

    def list_events(self, job_id: int) -> list[JobEvent]:
        """The job's events, oldest first ([] for an unknown job). Read-only."""

    # secrets (values stay sealed: the store never sees a plain one)
    def find_secrets(self, tenant_id: int, names: Iterable[str]) -> dict[str, SecretRecord]:
        """The tenant's secrets among `names`, by name; absent ones are missing from the result. Read-only."""
