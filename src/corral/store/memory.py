"""MemoryStore: the SchedulingStore (jobs, nodes, tenancy) in memory, for the simulators and tests.

Same behaviour as SqlStore (tests/contract runs one suite over both): job moves follow core.states.TRANSITIONS,
assign_job_parts re-checks capacity with corral.scheduler.recheck, every method holds one lock (one method = one
transaction). Jobs are indexed by state, so listing PENDING or RUNNING jobs costs O(those jobs) however many
finished jobs a long simulation keeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from corral.core.arrays import assign_array_ids, compute_array_group
from corral.core.errors import ConflictError, IdempotencyKeyReused
from corral.core.resources import GpuInfo
from corral.core.staging import OUT_PENDING
from corral.core.states import JobState, can_transition
from corral.core.tenancy import check_active_limit, count_by_tenant
from corral.scheduler.recheck import NodeUse, compute_node_use, compute_recheck
from corral.store.records import GpuStatus, Job, JobEvent, JobSpec, Node, Queue, Quota, SubmitLists, Tenant


class MemoryStore:
    """Implements corral.store.protocols.SchedulingStore (and node cordon / GPU disable and health)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._jobs: dict[int, Job] = {}
        self._by_state: dict[JobState, dict[int, Job]] = {s: {} for s in JobState}
        self._versions: dict[int, int] = {}  # job id -> how often it was changed (list_jobs_changed)
        self._on_node: dict[str, set[int]] = {}  # node -> RUNNING jobs with a part there
        self._events: dict[int, list[JobEvent]] = {}
        self._keys: dict[tuple[str, str], tuple[str, tuple[int, ...], datetime]] = {}
        self._nodes: dict[str, Node] = {}
        self._tenants: dict[int, Tenant] = {}
        self._quotas: dict[tuple[int, str], Quota] = {}
        self._queues: dict[tuple[int, str], Queue] = {}
        self._usage: tuple[dict[int, float], datetime | None] = ({}, None)
        self._next = {"job": 1, "tenant": 1, "queue": 1}

    def migrate(self) -> None:
        """Nothing to create. Idempotent."""

    def close(self) -> None:
        """Nothing to release. Idempotent."""

    def _id(self, kind: str) -> int:
        n = self._next[kind]
        self._next[kind] = n + 1
        return n

    def _put(self, job: Job) -> Job:
        old = self._jobs.get(job.id)
        if old is not None:
            del self._by_state[old.state][job.id]
            if old.state is JobState.RUNNING:
                for n, _ in old.placed_parts:
                    self._on_node[n].discard(job.id)
        self._jobs[job.id] = job
        self._versions[job.id] = self._versions.get(job.id, -1) + 1  # as the SQL store's row_version: 0 when made
        self._by_state[job.state][job.id] = job
        if job.state is JobState.RUNNING:
            for n, _ in job.placed_parts:
                self._on_node.setdefault(n, set()).add(job.id)
        return job

    def _event(self, job_id: int, kind: str, message: str, now: datetime) -> None:
        self._events.setdefault(job_id, []).append(JobEvent(job_id=job_id, at=now, kind=kind, message=message))

    # ---- jobs -------------------------------------------------------------
    def create_job(self, spec: JobSpec, now: datetime) -> Job:
        return self.create_jobs([spec], now)[0]

    def create_jobs(self, specs: Sequence[JobSpec], now: datetime, max_active: int | None = None) -> list[Job]:
        with self._lock:
            for tenant_id, n in sorted((count_by_tenant(specs) if max_active is not None else {}).items()):
                active = self.count_jobs(states=[JobState.PENDING, JobState.RUNNING], tenant_id=tenant_id)
                check_active_limit(active, n, max_active)
            groups = [compute_array_group(spec.array_id, spec.array_index) for spec in specs]
            ids = [self._id("job") for _ in specs]
            out: list[Job] = []
            for spec, job_id, array_id in zip(specs, ids, assign_array_ids(groups, ids), strict=True):
                spec = replace(spec, array_id=array_id)
                job = self._put(Job(id=job_id, spec=spec, state=JobState.PENDING, created_at=now))
                self._event(job.id, "submitted", f"by schedule {spec.schedule_id}" if spec.schedule_id else "", now)
                out.append(job)
            return out

    def create_job_once(
        self, spec: JobSpec, now: datetime, owner: str, key: str, request_hash: str, keep: timedelta
    ) -> tuple[Job, bool]:
        jobs, created = self.create_jobs_once([spec], now, owner, key, request_hash, keep)
        return jobs[0], created

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
        if not specs:
            raise ValueError("create_jobs_once needs at least one job")
        with self._lock:
            self._keys = {k: v for k, v in self._keys.items() if v[2] >= now - keep}
            found = self._keys.get((owner, key))
            if found is not None:
                if found[0] != request_hash:
                    raise IdempotencyKeyReused(key)
                return [self._jobs[i] for i in found[1] if i in self._jobs], False
            jobs = self.create_jobs(specs, now, max_active)
            self._keys[(owner, key)] = (request_hash, tuple(j.id for j in jobs), now)
            return jobs, True

    def get_job(self, job_id: int) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def get_jobs(self, job_ids: Iterable[int]) -> list[Job]:
        with self._lock:
            return [self._jobs[i] for i in sorted(set(job_ids)) if i in self._jobs]

    def list_jobs_changed(
        self, states: Sequence[JobState], known: Mapping[int, int]
    ) -> tuple[list[int], list[tuple[Job, int]]]:
        with self._lock:
            ids = sorted(i for st in set(states) for i in self._by_state[st])
            return ids, [(self._jobs[i], v) for i in ids if (v := self._versions[i]) != known.get(i)]

    def list_job_ids(self, states: Sequence[JobState], limit: int) -> list[int]:
        with self._lock:
            return sorted((i for st in set(states) for i in self._by_state[st]), reverse=True)[:limit]

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
        text = (name_contains or "").casefold()
        with self._lock:
            pool: Iterable[Job] = (
                self._jobs.values() if states is None else [j for s in set(states) for j in self._by_state[s].values()]
            )
            jobs = [
                j
                for j in pool
                if (tenant_id is None or j.spec.tenant_id == tenant_id)
                and (before_id is None or j.id < before_id)
                and (after_id is None or j.id > after_id)
                and (array_id is None or j.spec.array_id == array_id)
                and (node is None or j.node == node)
                and (schedule_id is None or j.spec.schedule_id == schedule_id)
                and (service_id is None or j.spec.service_id == service_id)
                and (user_id is None or j.spec.user_id == user_id)
                and text in j.spec.name.casefold()
            ]
            jobs.sort(key=lambda j: j.id, reverse=newest_first)
            return jobs[:limit] if limit is not None else jobs

    def count_jobs(
        self,
        states: Sequence[JobState] | None = None,
        tenant_id: int | None = None,
        user_id: int | None = None,
        name_contains: str | None = None,
        node: str | None = None,
        array_id: int | None = None,
    ) -> int:
        return len(
            self.list_jobs(
                states=states,
                tenant_id=tenant_id,
                user_id=user_id,
                name_contains=name_contains,
                node=node,
                array_id=array_id,
            )
        )

    def count_jobs_by_tenant(self, states: Sequence[JobState]) -> dict[int | None, int]:
        counts: dict[int | None, int] = {}
        for j in self.list_jobs(states=states):
            counts[j.spec.tenant_id] = counts.get(j.spec.tenant_id, 0) + 1
        return counts

    def list_node_jobs(self, node: str) -> list[Job]:
        with self._lock:
            return [self._jobs[i] for i in sorted(self._on_node.get(node, ()))]

    def get_node_with_jobs(self, name: str) -> tuple[Node | None, list[Job]]:
        with self._lock:
            return self.get_node(name), self.list_node_jobs(name)

    def list_gpu_holders(self) -> list[tuple[int, str | None, list[int], list[Any], int]]:
        with self._lock:
            return [
                (j.id, j.node, list(j.gpu_indices), [[n, list(g)] for n, g in j.parts], j.spec.gpu_milli)
                for j in sorted(self._by_state[JobState.RUNNING].values(), key=lambda j: j.id)
            ]

    def assign_job(self, job_id: int, node: str, gpu_indices: Sequence[int], now: datetime) -> bool:
        """One-part assign_job_parts, as SqlStore's."""
        return self._assign(job_id, [(node, tuple(gpu_indices))], now)

    def assign_job_parts(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        return self._assign(job_id, parts, now)

    def assign_jobs_parts(
        self, assignments: Sequence[tuple[int, Sequence[tuple[str, Sequence[int]]]]], now: datetime
    ) -> list[bool]:
        with self._lock:  # re-entrant: each _assign re-checks against what the ones before it placed
            return [self._assign(job_id, parts, now) for job_id, parts in assignments]

    def _assign(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not can_transition(job.state, JobState.RUNNING):
                return False
            names = {n for n, _ in parts}
            if compute_recheck(parts, job.spec.request, self._nodes, self._use_on(names)) is not None:
                return False
            placed = tuple((n, tuple(g)) for n, g in parts)
            self._put(
                replace(
                    job,
                    state=JobState.RUNNING,
                    node=placed[0][0],
                    gpu_indices=placed[0][1],
                    parts=placed,
                    delivered_to=frozenset(),
                    part_exits={},
                    image_digest="",
                    phase="",
                    started_at=now,
                    delivered=False,
                    reason="",
                    attempt=job.attempt + 1,
                    not_before=None,
                    stage_state="",
                    stage_node=None,
                    stage_progress="",
                    stage_nodes=(),
                    stage_done=(),
                    stage_out_state=OUT_PENDING if job.stage_out_state else "",
                    stage_out_message="",
                )
            )
            where = "; ".join(f"node {n}, GPUs {','.join(map(str, g)) or 'none'}" for n, g in placed)
            self._event(job_id, "assigned", where, now)
            return True

    def _use_on(self, names: set[str]) -> dict[str, NodeUse]:
        ids = set().union(*(self._on_node.get(n, set()) for n in names))
        held = (self._jobs[i] for i in ids)
        return compute_node_use(
            ((j.placed_parts, j.spec.gpu_milli, j.spec.cpu_milli, j.spec.memory_mib) for j in held), only=names
        )

    def mark_delivered(self, job_ids: Sequence[int], node: str | None = None) -> None:
        with self._lock:
            for job_id in job_ids:
                job = self._by_state[JobState.RUNNING].get(job_id)
                if job is None:
                    continue
                to = job.delivered_to | ({node} if node else set())
                if not job.delivered or to != job.delivered_to:  # nothing new: no write, as the SQL store
                    self._put(replace(job, delivered=True, delivered_to=to))

    def set_job_port(self, job_id: int, port: int) -> bool:
        with self._lock:
            job = self._by_state[JobState.RUNNING].get(job_id)
            if job is None:
                return False
            self._put(replace(job, spec=replace(job.spec, port=port)))
            return True

    def set_image_digest(self, job_id: int, attempt: int, digest: str) -> bool:
        with self._lock:
            job = self._by_state[JobState.RUNNING].get(job_id)
            if job is None or job.attempt != attempt:
                return False
            self._put(replace(job, image_digest=digest[:255]))
            return True

    def move_job_parts(self, job_id: int, attempt: int, parts: Sequence[tuple[str, Sequence[int]]]) -> bool:
        with self._lock:
            job = self._by_state[JobState.RUNNING].get(job_id)
            if job is None or job.attempt != attempt or not parts:
                return False
            head = parts[0][0]
            delivered = frozenset({head}) if job.node in job.delivered_to else frozenset()
            self._put(
                replace(
                    job,
                    node=head,
                    gpu_indices=tuple(parts[0][1]),
                    parts=tuple((n, tuple(g)) for n, g in parts),
                    delivered_to=delivered,
                )
            )
            return True

    def set_job_phase(self, job_id: int, attempt: int, phase: str) -> bool:
        with self._lock:
            job = self._by_state[JobState.RUNNING].get(job_id)
            if job is None or job.attempt != attempt:
                return False
            self._put(replace(job, phase=phase[:64]))
            return True

    def set_node_images(self, name: str, images: Sequence[str]) -> bool:
        with self._lock:
            node = self._nodes.get(name)
            if node is None:
                return False
            self._nodes[name] = replace(node, images=tuple(images))
            return True

    def record_part_exit(self, job_id: int, node: str, exit_code: int) -> dict[str, int]:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return {}
            exits = {**job.part_exits, node: exit_code}
            self._put(replace(job, part_exits=exits))
            return dict(exits)

    def request_cancel(self, job_id: int, now: datetime) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not can_transition(job.state, JobState.CANCELLED):
                return job
            if job.state is JobState.PENDING:
                self._event(job_id, "cancelled", "cancelled while pending", now)
                return self._put(
                    replace(job, state=JobState.CANCELLED, finished_at=now, reason="cancelled before start")
                )
            if job.state is JobState.RUNNING and not job.cancel_requested:
                self._event(job_id, "cancel_requested", "", now)
                return self._put(replace(job, cancel_requested=True))
            return job

    def request_preempt(self, job_id: int, reason: str, now: datetime, for_job_id: int | None = None) -> bool:
        with self._lock:
            job = self._by_state[JobState.RUNNING].get(job_id)
            if job is None or job.preempt_requested or job.cancel_requested:
                return False
            self._put(replace(job, preempt_requested=True, preempted_for=for_job_id, reason=reason))
            self._event(job_id, "preempting", reason, now)
            return True

    def finish_job(self, job_id: int, state: JobState, exit_code: int | None, reason: str, now: datetime) -> bool:
        if not state.terminal:
            raise ValueError(f"finish_job needs a terminal state, not {state}")
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not can_transition(job.state, state):
                return False
            self._put(replace(job, state=state, exit_code=exit_code, reason=reason, finished_at=now))
            self._event(job_id, state.value.lower(), f"exit code {exit_code}" if exit_code is not None else reason, now)
            return True

    def finish_jobs(
        self,
        finishes: Sequence[tuple[int, JobState, int | None, str]],
        now: datetime,
        runs: Mapping[int, int] | None = None,
    ) -> list[bool]:
        runs = runs or {}
        with self._lock:
            return [
                self._run_is(job_id, runs.get(job_id)) and self.finish_job(job_id, state, code, reason, now)
                for job_id, state, code, reason in finishes
            ]

    def _run_is(self, job_id: int, attempt: int | None) -> bool:
        """Whether the job is RUNNING at `attempt` (None: any job)."""
        if attempt is None:
            return True
        job = self._jobs.get(job_id)
        return job is not None and job.state is JobState.RUNNING and job.attempt == attempt

    def requeue_job(
        self,
        job_id: int,
        reason: str,
        now: datetime,
        not_before: datetime | None = None,
        failure: bool = False,
        preempted: bool = False,
    ) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not can_transition(job.state, JobState.PENDING):
                return False
            ran_s = max((now - job.started_at).total_seconds(), 0.0) if job.started_at else 0.0
            attained = job.attained_gpu_s + ran_s * job.spec.gpus * job.spec.gpu_milli / 1000
            self._put(
                replace(
                    job,
                    state=JobState.PENDING,
                    node=None,
                    gpu_indices=(),
                    started_at=None,
                    parts=(),
                    delivered_to=frozenset(),
                    part_exits={},
                    delivered=False,
                    cancel_requested=False,
                    preempt_requested=False,
                    preempted_for=None,
                    reason=reason,
                    not_before=not_before,
                    failures=job.failures + int(failure),
                    preemptions=job.preemptions + int(preempted),
                    attained_gpu_s=attained,
                )
            )
            self._event(job_id, "preempted" if preempted else "requeued", reason, now)
            return True

    def add_event(self, job_id: int, kind: str, message: str, now: datetime) -> None:
        with self._lock:
            self._event(job_id, kind, message, now)

    def list_events(self, job_id: int) -> list[JobEvent]:
        with self._lock:
            return list(self._events.get(job_id, ()))

    # ---- nodes ------------------------------------------------------------
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
        with self._lock:
            old = self._nodes.get(name)
            kept = {g.uuid: s for g, s in zip(old.gpus, old.gpu_status, strict=True)} if old else {}
            status = tuple(
                replace(kept[g.uuid], index=g.index, healthy=kept[g.uuid].healthy and g.healthy)
                if g.uuid in kept
                else GpuStatus(g.index, g.healthy, "" if g.healthy else "reported")
                for g in gpus
            )
            node = Node(
                name=name,
                hostname=hostname,
                backend=backend,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                state="READY",
                registered_at=old.registered_at if old else now,
                last_heartbeat_at=now,
                labels=dict(labels),
                cordoned=old.cordoned if old else False,
                address=address or hostname,
                isolation=isolation,
                runtimes=tuple(runtimes),
                images=old.images if old else (),
                gpus=(),
                gpu_status=status,
            )
            return self._set_node(node, gpus)

    def _set_node(self, node: Node, gpus: Sequence[GpuInfo]) -> Node:
        """Store `node` with `gpus`, each GPU's `healthy` folding in its status (as SqlStore reads them back)."""
        by_index = {s.index: s for s in node.gpu_status}
        folded = tuple(replace(g, healthy=by_index[g.index].healthy and not by_index[g.index].disabled) for g in gpus)
        self._nodes[node.name] = replace(node, gpus=folded)
        return self._nodes[node.name]

    def get_node(self, name: str) -> Node | None:
        with self._lock:
            return self._nodes.get(name)

    def list_nodes(self) -> list[Node]:
        with self._lock:
            return [self._nodes[n] for n in sorted(self._nodes)]

    def touch_node(self, name: str, now: datetime) -> bool:
        with self._lock:
            node = self._nodes.get(name)
            if node is not None:
                self._nodes[name] = replace(node, last_heartbeat_at=now, state="READY")
            return node is not None

    def mark_nodes_lost(self, heartbeat_before: datetime) -> list[str]:
        with self._lock:
            names = [n.name for n in self.list_nodes() if n.state == "READY" and n.last_heartbeat_at < heartbeat_before]
            for name in names:
                self._nodes[name] = replace(self._nodes[name], state="LOST")
            return names

    def mark_node_lost(self, node: str) -> bool:
        with self._lock:
            found = self._nodes.get(node)
            if found is not None:
                self._nodes[node] = replace(found, state="LOST")
            return found is not None

    def set_node_cordoned(self, name: str, cordoned: bool) -> bool:
        with self._lock:
            node = self._nodes.get(name)
            if node is not None:
                self._nodes[name] = replace(node, cordoned=cordoned)
            return node is not None

    def set_gpu_disabled(self, node: str, index: int, disabled: bool) -> bool:
        return self._set_gpu_status(node, index, disabled=disabled)

    def set_gpu_health(self, node: str, index: int, healthy: bool, reason: str) -> bool:
        """True only when the health changed (as SqlStore)."""
        with self._lock:
            found = self._nodes.get(node)
            status = next((s for s in found.gpu_status if s.index == index), None) if found else None
            if status is None or status.healthy == healthy:
                return False
            return self._set_gpu_status(node, index, healthy=healthy, reason="" if healthy else reason)

    def _set_gpu_status(self, node: str, index: int, **changes: object) -> bool:
        with self._lock:
            found = self._nodes.get(node)
            if found is None or all(s.index != index for s in found.gpu_status):
                return False
            status = tuple(
                replace(s, **changes) if s.index == index else s  # type: ignore[arg-type]
                for s in found.gpu_status
            )
            raw = tuple(replace(g, healthy=True) for g in found.gpus)  # healthy is re-folded from the status
            self._set_node(replace(found, gpu_status=status), raw)
            return True

    # ---- tenancy ----------------------------------------------------------
    def create_tenant(self, name: str, now: datetime, parent_id: int | None = None, weight: float = 1.0) -> Tenant:
        with self._lock:
            if any(t.name == name for t in self._tenants.values()):
                raise ConflictError(f"tenant {name!r} already exists")
            tenant = Tenant(id=self._id("tenant"), name=name, parent_id=parent_id, weight=weight, created_at=now)
            self._tenants[tenant.id] = tenant
            self._queues[(tenant.id, "default")] = Queue(self._id("queue"), tenant.id, "default", "best-effort", 0)
            return tenant

    def get_tenant(self, tenant_id: int) -> Tenant | None:
        with self._lock:
            return self._tenants.get(tenant_id)

    def find_tenant(self, name: str) -> Tenant | None:
        with self._lock:
            return next((t for t in self._tenants.values() if t.name == name), None)

    def list_tenants(self) -> list[Tenant]:
        with self._lock:
            return [self._tenants[i] for i in sorted(self._tenants)]

    def set_tenant_weight(self, tenant_id: int, weight: float) -> bool:
        with self._lock:
            tenant = self._tenants.get(tenant_id)
            if tenant is not None:
                self._tenants[tenant_id] = replace(tenant, weight=weight)
            return tenant is not None

    def set_quota(self, quota: Quota) -> Quota:
        with self._lock:
            self._quotas[(quota.tenant_id, quota.gpu_model)] = quota
            return quota

    def delete_quota(self, tenant_id: int, gpu_model: str) -> bool:
        with self._lock:
            return self._quotas.pop((tenant_id, gpu_model), None) is not None

    def list_quotas(self, tenant_id: int | None = None) -> list[Quota]:
        with self._lock:
            return [self._quotas[k] for k in sorted(self._quotas) if tenant_id is None or k[0] == tenant_id]

    def upsert_queue(self, tenant_id: int, name: str, mode: str, priority: int) -> Queue:
        with self._lock:
            old = self._queues.get((tenant_id, name))
            queue = Queue(old.id if old else self._id("queue"), tenant_id, name, mode, priority)
            self._queues[(tenant_id, name)] = queue
            return queue

    def list_queues(self, tenant_id: int | None = None) -> list[Queue]:
        with self._lock:
            return [self._queues[k] for k in sorted(self._queues) if tenant_id is None or k[0] == tenant_id]

    def read_submit_lists(self, tenant_id: int) -> SubmitLists:
        return SubmitLists(self.list_queues(tenant_id), self.list_quotas(tenant_id), [], self.list_nodes())  # no pools

    def save_usage(self, gpu_seconds: dict[int, float], as_of: datetime) -> None:
        with self._lock:
            self._usage = ({t: v for t, v in gpu_seconds.items() if t in self._tenants}, as_of)

    def load_usage(self) -> tuple[dict[int, float], datetime | None]:
        with self._lock:
            usage, as_of = self._usage
            return dict(usage), as_of if usage else None


if TYPE_CHECKING:  # mypy checks here that MemoryStore satisfies the role it implements
    from corral.store.protocols import SchedulingStore

    _MEMORY_STORE_IS_A_SCHEDULING_STORE: type[SchedulingStore] = MemoryStore
