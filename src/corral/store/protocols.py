"""The store's role protocols: each groups the methods of one concern, with the contract every implementation keeps.

Contracts that hold for every method of every role unless it says otherwise:
- one call is one transaction: it fully happens or not at all;
- state-changing job methods are guarded compare-and-set: they return False (changing nothing) when the job is not
  in a state core.states.TRANSITIONS lets it leave for the target, so concurrent callers cannot double-apply;
- a call blocks on the database and raises (sqlalchemy errors) only for infrastructure failures;
- datetimes come back timezone-aware (UTC); "Read-only" methods change nothing.

Every public method of SqlStore belongs to exactly one role (tests/contract/test_state_store_contract.py checks it).
`SchedulingStore` is what the scheduling loop and the simulators need; MemoryStore implements it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from corral.core.budgets import Budget
from corral.core.pools import PoolNode, PoolSpec
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.records import (
    AuditEntry,
    Job,
    JobEvent,
    JobSpec,
    Lease,
    Node,
    NodeEvent,
    NodeWork,
    Pool,
    PoolEvent,
    Queue,
    Quota,
    Replica,
    Schedule,
    SecretRecord,
    Service,
    SubmitLists,
    Tenant,
    TokenRecord,
    User,
)

if TYPE_CHECKING:
    from corral.core.directory import GroupMapping
    from corral.core.login_backoff import BackoffPolicy
    from corral.store.identity import JoinTokenRecord, NodeCertRecord
    from corral.store.migrate import SchemaState
    from corral.store.telemetry import AlertHistoryRecord, AlertRuleRecord, Point, SeriesKey


class LifecycleStore(Protocol):
    def migrate(self) -> None:
        """Create or upgrade the schema to the newest migration. Idempotent."""

    def close(self) -> None:
        """Release connections. Idempotent; the store is unusable afterwards."""


class JobStore(Protocol):
    def create_job(self, spec: JobSpec, now: datetime) -> Job:
        """Persist an accepted job as PENDING with its `submitted` event (durable when this returns). Not idempotent."""

    def create_job_once(
        self, spec: JobSpec, now: datetime, owner: str, key: str, request_hash: str, keep: timedelta
    ) -> tuple[Job, bool]:
        """create_job made idempotent by (owner, key): (the job, True) when this call created it; (the job an earlier
        call with the same owner, key and request_hash made within `keep`, False) otherwise, also when the two calls
        race (exactly one creates). Raises IdempotencyKeyReused for the same key with another request_hash."""

    def create_jobs(self, specs: Sequence[JobSpec], now: datetime, max_active: int | None = None) -> list[Job]:
        """create_job for several jobs of one tenant in one transaction (all or none), in order. The tasks of each
        job array get its first task's id as their `array_id` (a spec's `array_id`, before it is stored, is the
        key of its array within the call: core.arrays.compute_array_group). `max_active`: refused with
        TooManyRequestsError when the tenant's pending and running jobs would pass it, counted in the same
        transaction (concurrent calls cannot pass it together)."""

    def create_jobs_once(
        self,
        specs: Sequence[JobSpec],
        now: datetime,
        owner: str,
        key: str,
        request_hash: str,
        keep: timedelta,
        max_active: int | None = None,
    ) -> tuple[list[Job], bool]:
        """create_jobs made idempotent by (owner, key), as create_job_once; a replay returns every job of the
        first request (before `max_active` is checked)."""

    def get_job(self, job_id: int) -> Job | None:
        """The job, or None if unknown. Read-only."""

    def get_jobs(self, job_ids: Iterable[int]) -> list[Job]:
        """The jobs of these ids that exist, by id, in one read. Read-only."""

    def list_jobs_changed(
        self, states: Sequence[JobState], known: Mapping[int, int]
    ) -> tuple[list[int], list[tuple[Job, int]]]:
        """(the ids of the jobs in `states`, by id; those of them whose row version is not `known[id]`, loaded, each
        with the version it was read at). A job's version changes with every change to it, so a reader that keeps
        what it read (store.snapshot.JobCache) loads only what changed. Read-only."""

    def list_job_ids(self, states: Sequence[JobState], limit: int) -> list[int]:
        """The ids of the newest `limit` jobs in `states`, newest (highest id) first: no job is loaded. Read-only."""

    def list_jobs(
        self,
        states: Sequence[JobState] | None = None,
        limit: int | None = None,
        tenant_id: int | None = None,
        newest_first: bool = False,
        before_id: int | None = None,
        node: str | None = None,
        schedule_id: int | None = None,
        after_id: int | None = None,
        array_id: int | None = None,
        user_id: int | None = None,
        name_contains: str | None = None,
        service_id: int | None = None,
    ) -> list[Job]:
        """Jobs ordered by id (descending with `newest_first`); every other argument filters (`node`: the first
        part's node; `before_id` / `after_id`: ids below / above, for pages; `array_id`: the tasks of an array;
        `service_id`: the replicas of a service;
        `name_contains`: names holding that text, any case, `%` and `_` taken literally). Read-only."""

    def count_jobs(
        self,
        states: Sequence[JobState] | None = None,
        tenant_id: int | None = None,
        user_id: int | None = None,
        name_contains: str | None = None,
        node: str | None = None,
        array_id: int | None = None,
    ) -> int:
        """How many jobs match the filters (as list_jobs reads them). Read-only."""

    def count_jobs_by_tenant(self, states: Sequence[JobState]) -> dict[int | None, int]:
        """tenant id (None: no tenant) -> how many jobs in `states` it has; tenants without any are left out.
        One GROUP BY, no job loaded. Read-only."""

    def list_node_jobs(self, node: str) -> list[Job]:
        """RUNNING jobs with a part on `node` (a gang's job is listed on each of its nodes), by id. Read-only."""

    def list_gpu_holders(self) -> list[tuple[int, str | None, list[int], list[Any], int]]:
        """(job id, node, GPU indices, parts as [[node, [indices]]...], gpu_milli) of every RUNNING job. Read-only."""

    def assign_job(self, job_id: int, node: str, gpu_indices: Sequence[int], now: datetime) -> bool:
        """PENDING -> RUNNING on one node, compare-and-set on the job's state only: no capacity re-check. For tests
        and tools that place by hand; the scheduler commits through assign_job_parts."""

    def assign_job_parts(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        """PENDING -> RUNNING with one (node, GPU indices) part per node, all at once; `parts` is not empty.
        Guarded: in the same transaction, serialised against every other assign on the touched nodes, it re-checks
        (corral.scheduler.recheck) that each node is READY and not cordoned, each GPU exists, is healthy and not
        disabled and has room for the job's gpu_milli beside the RUNNING jobs' shares, and host CPU and memory fit.
        False (nothing written) when the job is no longer PENDING or anything does not fit: the caller retries on a
        fresh snapshot. A gang is never partly placed."""

    def assign_jobs_parts(
        self, assignments: Sequence[tuple[int, Sequence[tuple[str, Sequence[int]]]]], now: datetime
    ) -> list[bool]:
        """assign_job_parts for each (job id, parts) in order, all in one transaction (one commit for a cycle's
        admissions): each is re-checked against the RUNNING jobs and the ones admitted before it in the list; the
        result is, per assignment, whether it was placed (False: nothing written for it, as assign_job_parts)."""

    def mark_delivered(self, job_ids: Sequence[int], node: str | None = None) -> None:
        """Note that `node`'s agent holds its part of these RUNNING jobs (others are skipped). Idempotent."""

    def set_job_port(self, job_id: int, port: int) -> bool:
        """Record the web-UI port assigned to a RUNNING job on its node (False: not RUNNING or unknown). Idempotent."""

    def set_image_digest(self, job_id: int, attempt: int, digest: str) -> bool:
        """Record the image a RUNNING container job's `attempt` runs, as its node's engine named it (False: not that
        attempt RUNNING, or unknown). Idempotent."""

    def set_job_phase(self, job_id: int, attempt: int, phase: str) -> bool:
        """Record what a RUNNING job's `attempt` does before its command starts ("pulling 43%"; "" once it runs).
        False: not that attempt RUNNING, or unknown. Idempotent."""

    def set_node_images(self, name: str, images: Sequence[str]) -> bool:
        """Record the container images cached on a node, most recently used first (False: unknown node)."""

    def record_part_exit(self, job_id: int, node: str, exit_code: int) -> dict[str, int]:
        """Keep a gang part's exit code; returns every part's exit code so far ({} for an unknown job).
        Idempotent per (job, node)."""

    def request_cancel(self, job_id: int, now: datetime) -> Job | None:
        """PENDING -> CANCELLED at once; RUNNING -> cancel_requested (the agent stops it).
        Returns the job after the change; None if unknown. Terminal jobs are returned unchanged."""

    def request_preempt(self, job_id: int, reason: str, now: datetime, for_job_id: int | None = None) -> bool:
        """Flag a RUNNING job for preemption (its agent stops it, then it requeues; it keeps its GPUs until then),
        for the waiting job `for_job_id` (the GPUs it releases are that job's). Compare-and-set: False if not
        RUNNING or already being preempted or cancelled."""

    def finish_job(self, job_id: int, state: JobState, exit_code: int | None, reason: str, now: datetime) -> bool:
        """RUNNING (or PENDING, for FAILED and CANCELLED) -> `state`, as core.states.TRANSITIONS allows; False when
        the job is not in a state that may move there (a terminal job never moves). Compare-and-set. Raises
        ValueError when `state` is not terminal."""

    def finish_jobs(
        self,
        finishes: Sequence[tuple[int, JobState, int | None, str]],
        now: datetime,
        runs: Mapping[int, int] | None = None,
    ) -> list[bool]:
        """finish_job for each (job id, state, exit code, reason), in one transaction; whether each moved (a job
        named twice moves at most once). A job in `runs` (job id -> attempt: the end of that run, as its agent
        reported it) moves only while RUNNING at that attempt: not once it was requeued or placed again since the
        caller read it."""

    def requeue_job(
        self,
        job_id: int,
        reason: str,
        now: datetime,
        not_before: datetime | None = None,
        failure: bool = False,
        preempted: bool = False,
    ) -> bool:
        """RUNNING -> PENDING (node and GPUs released, place in the queue kept, the GPU-seconds it ran added to
        attained_gpu_s), not started before `not_before`; `failure` / `preempted` count the cause.
        Compare-and-set: False otherwise."""

    def add_event(self, job_id: int, kind: str, message: str, now: datetime) -> None:
        """Append to the job's event log. Not idempotent."""

    def list_events(self, job_id: int) -> list[JobEvent]:
        """The job's events, oldest first ([] for an unknown job). Read-only."""


class NodeStore(Protocol):
    def upsert_node(
        self,
        name: str,
        hostname: str,
        backend: str,
        cpu_milli: int,
        memory_mib: int,
        labels: dict[str, str],
        gpus: Sequence[GpuInfo],
        now: datetime,
        address: str = "",
        isolation: str = "",
        runtimes: Sequence[str] = ("process",),
    ) -> Node:
        """Register or re-register a node, replacing its GPU inventory (GPU health and admin state follow the
        GPU's UUID); marks it READY. `address` defaults to the hostname; `isolation` is what its agent reported
        (users | single-user), `runtimes` how it runs jobs (process, docker). Idempotent."""

    def get_node(self, name: str) -> Node | None:
        """The node with its GPUs, or None. Read-only."""

    def get_node_with_jobs(self, name: str) -> tuple[Node | None, list[Job]]:
        """get_node and list_node_jobs read in one transaction (what an agent's sync and telemetry batch read first).
        Read-only."""

    def list_nodes(self) -> list[Node]:
        """Every node (any state) with its GPUs, ordered by name. Read-only."""

    def touch_node(self, name: str, now: datetime) -> bool:
        """Record a heartbeat (a LOST node is READY again); False for an unknown node. Idempotent."""

    def mark_nodes_lost(self, heartbeat_before: datetime) -> list[str]:
        """READY nodes whose last heartbeat is older than `heartbeat_before` become LOST; returns their names."""

    def mark_node_lost(self, node: str) -> bool:
        """Mark one node LOST now (e.g. its certificates were revoked). False when unknown. Idempotent."""


class TenancyStore(Protocol):
    """Tenants, quotas, queues and fair share's usage: the queueing core's inputs."""

    def create_tenant(self, name: str, now: datetime, parent_id: int | None = None, weight: float = 1.0) -> Tenant:
        """Creates the tenant and its `default` queue. Raises ConflictError when the name is taken."""

    def get_tenant(self, tenant_id: int) -> Tenant | None:
        """The tenant, or None. Read-only."""

    def find_tenant(self, name: str) -> Tenant | None:
        """The tenant of that name, or None. Read-only."""

    def list_tenants(self) -> list[Tenant]:
        """Every tenant, ordered by id. Read-only."""

    def set_tenant_weight(self, tenant_id: int, weight: float) -> bool:
        """Set fair share's weight; False for an unknown tenant. Idempotent."""

    def set_quota(self, quota: Quota) -> Quota:
        """Create or replace the tenant's quota for that GPU model. Idempotent."""

    def delete_quota(self, tenant_id: int, gpu_model: str) -> bool:
        """False when there was no such quota."""

    def list_quotas(self, tenant_id: int | None = None) -> list[Quota]:
        """Quotas ordered by (tenant, GPU model); `tenant_id` filters. Read-only."""

    def upsert_queue(self, tenant_id: int, name: str, mode: str, priority: int) -> Queue:
        """Create or update the tenant's queue of that name. Idempotent."""

    def list_queues(self, tenant_id: int | None = None) -> list[Queue]:
        """Queues ordered by (tenant, name); `tenant_id` filters. Read-only."""

    def read_submit_lists(self, tenant_id: int) -> SubmitLists:
        """What a submission of the tenant is checked against, at once: its queues and quotas (as list_queues and
        list_quotas give them), the cloud pools (list_pools; none where the store keeps no pools) and the nodes'
        shapes: list_nodes, where only what a job could ever ask of a node is sure to be current (which nodes exist,
        their CPUs, memory and labels, their GPUs' models and memory; states, heartbeats and health may be older).
        May be kept between calls, but never older than the last change committed before the call. Cheap to call
        for every submission. Read-only."""

    def save_usage(self, gpu_seconds: dict[int, float], as_of: datetime) -> None:
        """Replace fair share's decayed usage (tenant id -> GPU-seconds); unknown tenants are dropped. Idempotent."""

    def load_usage(self) -> tuple[dict[int, float], datetime | None]:
        """The last saved usage and when it was taken (None: nothing saved yet). Read-only."""


class IdentityStore(Protocol):
    """Users, API tokens, login sessions and login failure counters."""

    def create_user(
        self, name: str, role: str, now: datetime, tenant_id: int | None = None, password_hash: str = ""
    ) -> User:
        """Raises ConflictError when the name is taken (not idempotent). `tenant_id` must exist."""

    def get_user(self, user_id: int) -> User | None:
        """The user, or None if unknown. Read-only."""

    def find_user(self, name: str) -> User | None:
        """The user of that name, or None. Read-only."""

    def count_users(self) -> int:
        """How many users exist (bootstrap creates the admin when 0). Read-only."""

    def list_users(self, tenant_id: int | None = None) -> list[User]:
        """Users ordered by id; `tenant_id` filters. Read-only."""

    def update_user(
        self, user_id: int, *, role: str | None = None, password_hash: str | None = None, disabled: bool | None = None
    ) -> bool:
        """Change the given fields; False for an unknown user. Raises ConflictError (changing nothing) when the
        change would leave no enabled admin (two admins demoting each other at once cannot both succeed)."""

    def set_user_unix_identity(self, user_id: int, uid: int | None, gid: int | None) -> bool:
        """Map the user to a Unix account (uid, gid), or clear the mapping with None. False: no such user."""

    def create_token(
        self,
        token_hash: str,
        kind: str,
        name: str,
        user_id: int | None,
        now: datetime,
        expires_at: datetime | None = None,
        *,
        is_session: bool = False,
        parent_id: int | None = None,
    ) -> TokenRecord:
        """Store a token by its hash (never the secret); `is_session`: a login session (ends with a password
        change); `parent_id`: the token it was opened with. Not idempotent: each call adds a row."""

    def find_token(self, token_hash: str) -> TokenRecord | None:
        """The non-revoked token with this hash, or None (expiry is the caller's check). Read-only."""

    def get_token(self, token_id: int) -> TokenRecord | None:
        """The token (revoked or not), or None. Read-only."""

    def list_tokens(self, user_ids: Sequence[int] | None = None) -> list[TokenRecord]:
        """Tokens of these users (all user tokens when None); join tokens are not listed here. Read-only."""

    def revoke_token(self, token_id: int) -> bool:
        """Revoke the token and every session opened with it (transitively), in one transaction."""

    def revoke_sessions(self, user_id: int, keep_token_id: int | None = None) -> int:
        """Revoke every login session of the user (its API tokens stay) but `keep_token_id`. Returns how many."""

    def load_login_lock(self, keys: Sequence[str], now: datetime) -> datetime | None:
        """The latest time until which any of `keys` is locked, or None when none is locked at `now`. Read-only."""

    def record_login_failure(self, key: str, now: datetime, policy: BackoffPolicy) -> datetime | None:
        """Count one more failure of `key` and lock it as the policy says; until when it is locked (None: not
        locked). Atomic per key."""

    def clear_login_failures(self, key: str) -> None:
        """Forget the failures of `key` (a successful login). Idempotent."""

    def purge_login_failures(self, before: datetime) -> int:
        """Drop counters whose last failure is older than `before` and that are no longer locked. Idempotent."""


class NodeIdentityStore(Protocol):
    """Join tokens and the node certificates issued with them."""

    def create_join_token(
        self, secret_hash: str, description: str, created_by: str, now: datetime, expires_at: datetime, max_uses: int
    ) -> JoinTokenRecord:
        """Store a join token by the hash of its secret. Not idempotent: each call adds a row."""

    def list_join_tokens(self) -> list[JoinTokenRecord]:
        """Every join token, newest first (expired, used up and revoked ones included). Read-only."""

    def get_join_token(self, token_id: int) -> JoinTokenRecord | None:
        """The join token, or None. Read-only."""

    def revoke_join_token(self, token_id: int, now: datetime) -> bool:
        """Revoke an unrevoked token. False when unknown or already revoked."""

    def use_join_token(self, token_id: int, secret_hash: str, now: datetime) -> bool:
        """Spend one use, compare-and-set: True only when id and hash match and the token is unrevoked, unexpired
        and has a use left (two joins racing for the last use: one wins)."""

    def record_node_cert(
        self,
        serial: str,
        fingerprint: str,
        node: str,
        issued_at: datetime,
        not_after: datetime,
        join_token_id: int | None,
    ) -> NodeCertRecord:
        """Record an issued certificate. Not idempotent."""

    def find_node_cert(self, fingerprint: str) -> NodeCertRecord | None:
        """The certificate with this fingerprint (revoked or not), or None. Read-only."""

    def list_node_certs(self, node: str | None = None) -> list[NodeCertRecord]:
        """Certificates (of `node` when given). Read-only."""

    def revoke_node_certs(self, node: str, now: datetime) -> list[str]:
        """Revoke every unrevoked certificate of `node`; returns their serials. Idempotent."""


class TelemetryStore(Protocol):
    """GPU metric points, their rollups, per-job GPU summaries and the run history usage reports read."""

    def insert_points(self, points: Sequence[Point]) -> int:
        """Append raw points; returns how many. Not idempotent."""

    def query_points(
        self,
        metric: str,
        start: float,
        end: float,
        node: str | None = None,
        gpu: int | None = None,
        job_id: int | None = None,
        tenant_id: int | None = None,
    ) -> dict[SeriesKey, list[tuple[float, float]]]:
        """Raw points of one metric in [start, end), grouped by (node, gpu), oldest first. Read-only."""

    def latest_points(self, since: float, nodes: Sequence[str] | None = None) -> list[Point]:
        """Each (node, GPU) series' newest sample at or after `since` (host series: gpu -1): every metric stored at
        that sample's time, one point per (node, gpu, metric). `nodes`: only these nodes (None: all). Read-only."""

    def query_aggregate(
        self,
        metric: str,
        start: float,
        end: float,
        step_s: float,
        agg: str,
        node: str | None = None,
        rollups: bool = False,
    ) -> list[tuple[float, float]]:
        """One series: `agg` (avg, max, min, sum) over every (node, GPU) per `step_s` bucket, computed in the
        database. Read-only."""

    def query_rollups(
        self, metric: str, start: float, end: float, node: str | None = None, gpu: int | None = None
    ) -> dict[SeriesKey, list[tuple[float, float]]]:
        """1-minute averages of one metric in [start, end), grouped by (node, gpu). Read-only."""

    def compute_and_store_rollups(self, since: float, closed_before: float, bucket_s: float = 60.0) -> int:
        """Roll raw points with since <= ts < closed_before into buckets (merged into existing ones)."""

    def latest_rollup_bucket(self) -> float | None:
        """Start of the newest rollup bucket, or None. Read-only."""

    def prune_telemetry(self, raw_before: float, rollup_before: float) -> tuple[int, int]:
        """Delete raw points and rollups older than these; (raw, rollups) deleted. Idempotent."""

    def set_job_gpu_summary(self, job_id: int, summary: dict[str, Any]) -> None:
        """Replace the job's GPU usage summary. Idempotent."""

    def get_job_gpu_summary(self, job_id: int) -> dict[str, Any]:
        """The job's GPU usage summary ({} when none). Read-only."""

    def list_runs_between(
        self, start: datetime, end: datetime, tenant_id: int | None = None, with_placement: bool = True
    ) -> list[tuple[Any, ...]]:
        """Columns of the GPU jobs whose run overlaps [start, end), for usage reports (see SqlStore). Read-only."""


class AlertStore(Protocol):
    def create_alert_rule(
        self, name: str, spec: dict[str, Any], tenant_id: int | None, now: datetime
    ) -> AlertRuleRecord:
        """Store a rule. Not idempotent."""

    def list_alert_rules(self) -> list[AlertRuleRecord]:
        """Every rule. Read-only."""

    def delete_alert_rule(self, rule_id: int) -> bool:
        """False when there was no such rule."""

    def add_alert_history(self, entries: Sequence[AlertHistoryRecord]) -> None:
        """Append firings and resolutions. Not idempotent."""

    def list_alert_history(self, limit: int = 200) -> list[AlertHistoryRecord]:
        """Newest first. Read-only."""

    def save_alert_snapshot(self, alerts: list[dict[str, Any]], at: datetime, holder: str = "") -> None:
        """Replace the leader's current alerts (the API's dicts) as of `at`. Idempotent."""

    def load_alert_snapshot(self) -> tuple[list[dict[str, Any]], datetime | None, str]:
        """(alerts, as of when, which replica saved them) as last saved; ([], None, "") when never. Read-only."""

    def save_silence(self, silence_id: str, spec: dict[str, Any], now: datetime) -> None:
        """Create or replace a silence. Idempotent."""

    def list_silences(self) -> list[tuple[str, dict[str, Any]]]:
        """Every silence as (id, spec). Read-only."""

    def delete_silence(self, silence_id: str) -> bool:
        """False when there was no such silence."""


class ScheduleStore(Protocol):
    def create_schedule(
        self,
        tenant_id: int,
        user_id: int | None,
        name: str,
        expr: str,
        timezone: str,
        concurrency: str,
        paused: bool,
        job: dict[str, Any],
        next_run_at: datetime,
        now: datetime,
    ) -> Schedule:
        """Raises ConflictError (field `name`) when the tenant already has a schedule of that name."""

    def get_schedule(self, schedule_id: int) -> Schedule | None:
        """The schedule, or None. Read-only."""

    def list_schedules(self, tenant_id: int | None = None) -> list[Schedule]:
        """Schedules; `tenant_id` filters. Read-only."""

    def active_schedule_jobs(
        self, tenant_id: int | None = None, schedule_id: int | None = None
    ) -> dict[int, list[int]]:
        """schedule id -> ids of its PENDING or RUNNING jobs. Read-only."""

    def due_schedules(self, now: datetime) -> list[Schedule]:
        """Schedules not paused whose next firing time has come, earliest first. Read-only."""

    def next_schedule_due(self) -> datetime | None:
        """The earliest next firing of a schedule that is not paused (None: nothing scheduled). Read-only."""

    def update_schedule(self, schedule_id: int, **changes: Any) -> Schedule | None:
        """Set the given fields. None if the schedule is gone. ConflictError on a taken name."""

    def delete_schedule(self, schedule_id: int) -> bool:
        """Jobs it started stay (they keep their schedule_id for history)."""

    def fire_schedule(
        self,
        schedule_id: int,
        due_at: datetime | None,
        spec: JobSpec | None,
        next_run_at: datetime | None,
        now: datetime,
        missed: int = 0,
        skip_reason: str = "",
    ) -> tuple[bool, Job | None]:
        """Apply one firing atomically, compare-and-set on `due_at` (None: a manual run); (applied, job started)."""


class SecretStore(Protocol):
    """Tenant secrets; values stay sealed: the store never sees a plain one."""

    def create_secret(
        self,
        tenant_id: int,
        name: str,
        kind: str,
        meta: dict[str, Any],
        key_id: str,
        sealed: str,
        created_by: str,
        now: datetime,
    ) -> SecretRecord:
        """Raises ConflictError (field `name`) when the tenant already has a secret of that name."""

    def update_secret(
        self, tenant_id: int, name: str, key_id: str, sealed: str, now: datetime, meta: dict[str, Any] | None = None
    ) -> SecretRecord | None:
        """Replace the value (and `meta` when given); None when there is no such secret."""

    def find_secrets(self, tenant_id: int, names: Iterable[str]) -> dict[str, SecretRecord]:
        """The tenant's secrets among `names`, by name; absent ones are missing from the result. Read-only."""

    def list_secrets(self, tenant_id: int | None = None) -> list[SecretRecord]:
        """Ordered by (tenant, name); `tenant_id` filters. Read-only."""

    def delete_secret(self, tenant_id: int, name: str) -> bool:
        """False when there was no such secret."""

    def secret_key_ids(self) -> set[str]:
        """Ids of the keys that stored values were sealed with. Read-only."""

    def list_secrets_sealed_with_other_keys(self, key_id: str) -> list[SecretRecord]:
        """Secrets not sealed with `key_id` (what a key rotation has left to re-seal). Read-only."""

    def reseal_secret(self, secret_id: int, old_key_id: str, old_sealed: str, key_id: str, sealed: str) -> bool:
        """Swap a value for the same value sealed with another key; compare-and-set on the old sealed value."""


class DirectoryStore(Protocol):
    """LDAP/OIDC group -> tenant mappings and the users a directory manages."""

    def list_group_mappings(self) -> list[GroupMapping]:
        """Every mapping with its tenant's name, oldest first. Read-only."""

    def create_group_mapping(self, group: str, tenant_id: int, role: str, now: datetime) -> GroupMapping:
        """Raises ConflictError when the group is mapped already."""

    def delete_group_mapping(self, mapping_id: int) -> bool:
        """False when there was no such mapping."""

    def provision_directory_user(self, name: str, source: str, tenant_id: int, role: str, now: datetime) -> User:
        """Create or update the user of a directory login. Raises ConflictError when a user not managed by
        `source` holds the name."""


class AuditStore(Protocol):
    def add_audit(self, actor: str, action: str, target: str, detail: str, now: datetime) -> None:
        """Append to the audit log. Not idempotent."""

    def list_audit(self, limit: int = 200, before_id: int | None = None) -> list[AuditEntry]:
        """Newest first. Read-only."""


class ReplicaStore(Protocol):
    """Several server replicas on one database (issue 17): the leader lease and the replicas' heartbeats."""

    def claim_lease(self, holder: str, now: datetime, ttl_s: float, name: str = "leader") -> Lease:
        """Renew the lease when `holder` has it, take it (a new epoch) when it expired; the lease as it stands."""

    def release_lease(self, holder: str, now: datetime, name: str = "leader") -> bool:
        """Give the lease up now (a clean stop). False when `holder` did not have it."""

    def get_lease(self, name: str = "leader") -> Lease | None:
        """The lease as it stands. Read-only."""

    def touch_replica(self, replica: Replica) -> None:
        """Insert or refresh a replica's heartbeat."""

    def list_replicas(self, seen_since: datetime) -> list[Replica]:
        """Replicas heard from since `seen_since`, oldest first. Read-only."""

    def forget_replicas(self, seen_before: datetime) -> int:
        """Drop heartbeats older than `seen_before`; how many."""

    def load_schema_state(self) -> SchemaState:
        """The database's schema revision, its minimum compatible code revision, this code's newest. Read-only."""

    def advance_report_order(self, node: str, boot: str, seq: int) -> bool:
        """Note that `node`'s agent report (`boot`, `seq`) is applied now, unless one of the same boot numbered as
        high was applied already by any replica: then False (an older snapshot)."""

    def save_web_ports(self, node: str, reports: list[dict[str, Any]], now: datetime) -> None:
        """Record what `node`'s agent reported of its jobs' web-UI ports, as of `now` (for every replica's proxy)."""

    def load_web_ports(self, node: str) -> tuple[list[dict[str, Any]], datetime | None]:
        """(reports, when written) of `node`'s web-UI ports; ([], None) when none. Read-only."""


class OperationsStore(Protocol):
    """Node administration: cordon, GPU disable and health, the node event log."""

    def set_node_cordoned(self, name: str, cordoned: bool) -> bool:
        """False for an unknown node. Idempotent."""

    def delete_node(self, name: str) -> bool:
        """Remove a node and its GPUs from the inventory (a released cloud node); refused (False) while a RUNNING
        job is placed on it. Its jobs, events and samples stay, as history."""

    def set_gpu_disabled(self, node: str, index: int, disabled: bool) -> bool:
        """False for an unknown GPU. Idempotent."""

    def set_gpu_health(self, node: str, index: int, healthy: bool, reason: str) -> bool:
        """Record a health transition; True only when the state changed."""

    def add_node_event(self, node: str, gpu_index: int | None, kind: str, message: str, now: datetime) -> None:
        """Append to the node's event log (`gpu_index` None: the whole node). Not idempotent."""

    def list_node_events(self, node: str, gpu_index: int | None = None, limit: int = 200) -> list[NodeEvent]:
        """Newest first. Read-only."""


class SchedulingStore(JobStore, NodeStore, TenancyStore, Protocol):
    """What the scheduling loop and the simulators read and write."""


class AlertingStore(
    AlertStore,
    JobStore,
    NodeStore,
    TenancyStore,
    IdentityStore,
    TelemetryStore,
    AuditStore,
    OperationsStore,
    ReplicaStore,
    Protocol,
):
    """What alert evaluation and its actions (notify, cordon a node, cancel a job) read and write."""


class ServiceStore(Protocol):
    """Long-running services (corral.core.services): the service rows, the gateways' counts and the graphs' samples.
    Replicas are jobs (JobStore, `service_id`)."""

    def create_service(
        self,
        tenant_id: int,
        user_id: int | None,
        name: str,
        settings: Mapping[str, Any],
        revision: Mapping[str, Any],
        replicas: int,
        now: datetime,
    ) -> Service:
        """A new service at revision 1 (`revision`: its template, port and health path). Raises ConflictError
        (field `name`) when any tenant has a service of that name: names are the cluster's (the gateway's URL)."""

    def get_service(self, service_id: int) -> Service | None:
        """Read-only."""

    def get_service_by_name(self, name: str) -> Service | None:
        """Read-only."""

    def list_services(self, tenant_id: int | None = None) -> list[Service]:
        """By id; `tenant_id` filters. Read-only."""

    def modify_service(
        self,
        service_id: int,
        change: Callable[[Service], Mapping[str, Any] | None],
        now: datetime,
        events: Sequence[tuple[str, str]] = (),
    ) -> Service | None:
        """Read-modify-write of one service under a row lock: `change` gets the current service and returns the
        columns to set (settings, revisions, revision, stable_revision, replicas, state, deleting) and, under
        `_events`, (kind, message) pairs to append to its events with `events`. It may raise: nothing is written.
        The version goes up by one on a write. None: no such service."""

    def live_replicas(self, service_id: int | None = None) -> list[Job]:
        """PENDING and RUNNING replica jobs (of one service, or of all), by id. Read-only."""

    def delete_service(self, service_id: int) -> bool:
        """Remove the service row, its traffic counts and its samples (its replica jobs stay, as history)."""

    def save_service_traffic(self, server: str, data: Mapping[int, Mapping[str, Any]], now: datetime) -> None:
        """Replace one server replica's gateway counts per service (cumulative since that server started)."""

    def load_service_traffic(self) -> dict[int, dict[str, dict[str, Any]]]:
        """service id -> server -> its counts, with `_updated_at`. Read-only."""

    def add_service_samples(self, samples: Sequence[tuple[int, Mapping[str, Any]]], now: datetime) -> None:
        """Append one graph point per (service id, data) at `now`."""

    def service_samples(self, service_id: int, since: datetime) -> list[tuple[datetime, dict[str, Any]]]:
        """A service's graph points from `since`, oldest first. Read-only."""

    def prune_service_samples(self, before: datetime) -> int:
        """Delete graph points older than `before`; how many went."""


class PoolStore(Protocol):
    """Cloud pools (corral.core.pools): the pools declared, the nodes they started (live and as history) and the
    autoscaler's events."""

    def create_pool(self, spec: PoolSpec, created_by: str, now: datetime) -> Pool:
        """Raises ConflictError (field `name`) when a pool of that name exists."""

    def get_pool(self, name: str) -> Pool | None:
        """Read-only."""

    def list_pools(self) -> list[Pool]:
        """By name. Read-only."""

    def update_pool(self, spec: PoolSpec, now: datetime, expected_version: int | None = None) -> Pool | None:
        """Replace the spec of the pool named `spec.name` (version + 1). ConflictError when `expected_version` is
        given and differs. None: no such pool."""

    def delete_pool(self, name: str) -> bool:
        """Remove the pool (its nodes' records stay, as history)."""

    def add_pool_node(self, node: PoolNode, token_id: int | None, job_ids: Sequence[str]) -> None:
        """Record a node a pool is starting (unique name), its one-time join token and the jobs it is for."""

    def update_pool_node(self, name: str, changes: Mapping[str, Any]) -> bool:
        """Set columns of one pool node: state, provider_id, token_id, joined_at, idle_since, ended_at, reason,
        job_ids. False: no such node."""

    def list_pool_nodes(self, pool: str | None = None, live_only: bool = False) -> list[PoolNode]:
        """In launch order; `live_only`: launching, running and draining ones. Read-only."""

    def get_pool_node(self, name: str) -> tuple[PoolNode, int | None, list[str]] | None:
        """The node, its join token's id and the jobs it was started for. Read-only."""

    def pool_node_for_token(self, token_id: int) -> PoolNode | None:
        """The pool node a join token was made for, if any. Read-only."""

    def set_budget(self, tenant_id: int, budget: Budget, now: datetime) -> None:
        """Create or replace the tenant's budget (its period, limits and policy; `budget.tenant` is not read)."""

    def delete_budget(self, tenant_id: int) -> bool:
        """False: the tenant had none."""

    def list_budgets(self) -> list[tuple[int, Budget]]:
        """(tenant id, budget with the tenant's name) by tenant name. Read-only."""

    def add_pool_events(self, events: Sequence[tuple[str, str, str, str]], now: datetime) -> None:
        """Append (pool, node, kind, message) events at `now`; a pool keeps its newest 1,000."""

    def list_pool_events(self, pool: str | None = None, limit: int = 100) -> list[PoolEvent]:
        """The newest `limit` events (of one pool), oldest first. Read-only."""


class StagingStore(Protocol):
    """Data staging (corral.core.staging): where a pending job's input is being staged, and its output's outcome."""

    def update_staging(
        self,
        job_id: int,
        expect: tuple[str, str | None],
        state: str,
        node: str | None,
        progress: str,
        nodes: Sequence[str] = (),
    ) -> bool:
        """Compare-and-set a PENDING job's (stage_state, stage_node) from `expect` to (`state`, `node`) with its
        progress sentence; False when the job is not PENDING or no longer as expected (another writer moved it).
        `nodes`: every node its input is staged on (a gang's; `node` is the first), none done yet; `node` None
        clears them."""

    def finish_staging_on(self, job_id: int, node: str) -> str:
        """`node` has a staging job's input in; once every one of its stage nodes has, the job is staged (IN_STAGED).
        The job's stage state after it (IN_STAGING: others still at it; IN_STAGED: every node has it), or "" when
        the job is not being staged there (or that node already said so)."""

    def list_staging(self, node: str) -> list[Job]:
        """PENDING jobs whose input is being staged on `node` (stage_state staging, on it among their stage nodes
        and not done there), oldest first. Read-only."""

    def list_stage_outs(self, node: str) -> list[Job]:
        """Ended jobs last run on `node` (their first node) whose output is still to ship (stage_out_state pending or
        running), and running gangs whose first part, on `node`, has ended (its output ships from there). Read-only."""

    def read_node_work(self, node: str) -> NodeWork:
        """list_node_jobs, list_staging and list_stage_outs of `node` read in one transaction (what an agent's sync
        hands over). Read-only."""

    def set_stage_out(self, job_id: int, state: str, message: str) -> bool:
        """Record an ended job's stage-out state and outcome; False for an unknown job or one already done/failed."""


class ClusterJobStore(Protocol):
    """Jobs on a Slurm or Kubernetes pool (server/background/clusters.py): the cluster places them itself."""

    def move_job_parts(self, job_id: int, attempt: int, parts: Sequence[tuple[str, Sequence[int]]]) -> bool:
        """Record where the cluster placed a RUNNING job's `attempt` (node -> the GPUs it gave there), in place of
        Corral's own placement: the job shows, and counts on, what the cluster chose (a job delivered to its old
        head node is delivered to the new one). False: not that attempt RUNNING, or unknown."""


class SubmissionStore(TenancyStore, NodeStore, SecretStore, PoolStore, Protocol):
    """What checking a job submission reads (queues, quotas, nodes, secret names, cloud pools)."""


class SchedulesStore(ScheduleStore, JobStore, SubmissionStore, Protocol):
    """What the repeating-job runner and the schedules API read and write."""


ROLES: tuple[type, ...] = (
    LifecycleStore,
    JobStore,
    NodeStore,
    TenancyStore,
    IdentityStore,
    NodeIdentityStore,
    TelemetryStore,
    AlertStore,
    ScheduleStore,
    SecretStore,
    DirectoryStore,
    AuditStore,
    OperationsStore,
    ReplicaStore,
    ServiceStore,
    PoolStore,
    StagingStore,
    ClusterJobStore,
)
