"""The cluster bridge (the leader's loop): Corral in front of existing clusters (slurm and kubernetes pools).

Each pass, for each cluster pool: read its nodes into the inventory (`corral nodes`: pool and source), hand the
jobs the scheduler placed on them to the cluster (which places them on its own nodes and starts them), and follow
the cluster's jobs back: phase while queued there, the output into the job's log as it grows (`corral logs
--follow`), the exit code and the cluster's reason at the end. Cancels and preemptions become the cluster's cancel.

The store says what should run and the cluster says what does; nothing else is remembered, so a restart of either
side reconciles by name (`corral-<job>-<attempt>`): a job Corral placed but the cluster does not have is submitted
(submit is idempotent by name), a cluster job for an attempt that is no longer current is cancelled, and a job the
cluster was given but no longer knows (purged while the server was away) fails with that reason.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from corral.clusters.base import (
    CANCELLED,
    QUEUED,
    STARTED,
    ClusterBackend,
    ClusterError,
    ClusterJob,
    ClusterNode,
    RegistryLogin,
    Submission,
)
from corral.clusters.registry import create_backend
from corral.core.errors import ValidationError
from corral.core.pools import CLUSTER_KINDS, KUBERNETES, POOL_LABEL, SOURCE_LABEL, PoolSpec, compute_model_memory
from corral.core.resources import GpuInfo
from corral.core.states import JobState, state_for_exit
from corral.core.unix_identity import UidRange
from corral.server.background.loop import Loop
from corral.server.keyring import Keyring
from corral.server.services.agents import DEFAULT_UID_RANGE, load_job_identity
from corral.server.services.logs import LogStore
from corral.server.services.secrets import SecretUnavailable, resolve_registry_secret, resolve_secret_env
from corral.store.base import StateStore
from corral.store.records import Job, Node

log = logging.getLogger("corral.clusters")
INTERVAL_S = 0.5  # squeue takes ~50 ms: a job ended is seen (and its GPUs given again) within half a second
INVENTORY_EVERY_S = 5.0  # and so the nodes' heartbeat: a cluster unreachable past node_lost_after_s loses them
LOG_CHUNK = 1 << 20
CLOCK_SLACK_S = 5.0  # the server's and the cluster's clocks may differ this much
MISSES_BEFORE_LOST = 3
IDENTITY_TTL_S = 30.0  # a user's Unix identity (the account their cluster jobs run as) is read again this often
SUBMIT_THREADS = 8  # submissions in flight at once to one cluster (sbatch takes ~0.1 s; a burst hands out hundreds)  # passes a handed-over job may be missing from the cluster's list (a watch catching up)
_LABEL_SAFE = str.maketrans({c: "-" for c in " ,;:=\"'\\/"})


def node_name(pool: str, cluster_node: str) -> str:
    """The inventory name of a cluster's node: `<pool>.<its name>` (never an agent's name: agents cannot take it)."""
    return f"{pool}.{cluster_node}"[:63]


@dataclass
class _Held:
    version: int
    backend: ClusterBackend
    nodes: dict[str, str]  # inventory name -> the cluster's own name
    inventory_at: float = 0.0
    error: str = ""


class ClusterBridge(Loop):
    def __init__(
        self,
        store: StateStore,
        logs: LogStore,
        keyring: Keyring | None,
        *,
        leading: Callable[[], bool] | None = None,
        on_freed: Callable[[], None] = lambda: None,
        uids: UidRange = DEFAULT_UID_RANGE,
        interval_s: float = INTERVAL_S,
        inventory_every_s: float = INVENTORY_EVERY_S,
        add_events: Callable[[Sequence[tuple[str, str, str, str]]], None] | None = None,
    ) -> None:
        super().__init__("clusters", interval_s, log=log)
        self.store = store
        self.logs = logs
        self.keyring = keyring
        self.leading: Callable[[], bool] = leading or (lambda: True)
        self.on_freed = on_freed  # GPUs were given back: the scheduler looks again
        self.uids = uids
        self.inventory_every_s = inventory_every_s
        self.add_events = add_events or (lambda ev: store.add_pool_events(ev, datetime.now(UTC)))
        self._held: dict[str, _Held] = {}
        self._misses: dict[tuple[int, int], int] = {}
        self._cancelled: set[str] = set()  # cluster ids asked to stop (asked again only after a while)
        self._identities: dict[int | None, tuple[float, int | None, bool]] = {}  # user id -> (read at, uid, mapped)
        self.cluster_nodes: frozenset[str] = frozenset()  # inventory names of every cluster pool's node

    # ---- wiring ----
    def on_node_notified(self, node: str) -> None:
        """The scheduler or a cancel touched `node`: a pass now when it is a cluster pool's."""
        if node in self.cluster_nodes:
            self.wake()

    def on_stop(self) -> None:
        for held in self._held.values():
            try:
                held.backend.close()
            except Exception:  # closing must go on for the others
                log.exception("closing a cluster backend failed")

    # ---- the pass ----
    def run_pass(self) -> float | None:
        if not self.leading():
            return None
        self.run_once(datetime.now(UTC))
        return None

    def run_once(self, now: datetime) -> None:
        pools = [p for p in self.store.list_pools() if p.spec.kind in CLUSTER_KINDS]
        for gone in set(self._held) - {p.name for p in pools}:
            self._held.pop(gone).backend.close()
        if not pools:
            self.cluster_nodes = frozenset()
            return
        running = self.store.list_jobs(states=[JobState.RUNNING])
        all_nodes: set[str] = set()
        for pool in pools:
            held = self._backend(pool.spec, pool.version)
            if held is None:
                continue
            try:
                if now.timestamp() - held.inventory_at >= self.inventory_every_s:
                    self._inventory(pool.spec, held, now)
                self._jobs(pool.spec, held, running, now)
                if held.error:
                    self.add_events([(pool.name, "", "reachable", f"the {pool.spec.kind} cluster answers again")])
                    held.error = ""
            except ClusterError as e:
                if str(e) != held.error:  # said once per change, not every second
                    log.warning("pool %s: %s", pool.name, e)
                    self.add_events([(pool.name, "", "unreachable", str(e)[:500])])
                    held.error = str(e)
            all_nodes |= set(held.nodes)
        self.cluster_nodes = frozenset(all_nodes)

    def _backend(self, spec: PoolSpec, version: int) -> _Held | None:
        held = self._held.get(spec.name)
        if held is not None and held.version == version:
            return held
        if held is not None:
            held.backend.close()
        try:
            backend = create_backend(spec)
        except ClusterError as e:
            log.warning("pool %s: %s", spec.name, e)
            return None
        held = _Held(version=version, backend=backend, nodes=dict(held.nodes) if held else {})
        self._held[spec.name] = held
        return held

    # ---- inventory ----
    def _inventory(self, spec: PoolSpec, held: _Held, now: datetime) -> None:
        nodes = held.backend.list_nodes()
        held.inventory_at = now.timestamp()
        existing = {n.name: n for n in self.store.list_nodes()}
        seen: dict[str, str] = {}
        for cn in nodes:
            name = node_name(spec.name, cn.name)
            other = existing.get(name)
            if other is not None and other.labels.get(SOURCE_LABEL) != spec.kind:
                log.warning("pool %s: node %s is an agent's name: not taken", spec.name, name)
                continue
            if cn.state == "down":  # not touched: lost after node_lost_after_s, its jobs handed out again
                continue
            seen[name] = cn.name
            self._upsert(spec, name, cn, now)
        held.nodes = seen

    def _upsert(self, spec: PoolSpec, name: str, cn: ClusterNode, now: datetime) -> Node:
        model, memory = compute_model_memory(cn.gpu_model or "unknown", cn.gpu_memory_mib)
        gpus = [
            GpuInfo(index=i, uuid=f"{spec.kind}-{name}-{i}", model=model, memory_mib=memory) for i in range(cn.gpus)
        ]
        labels = {
            k.translate(_LABEL_SAFE)[:63]: str(v).translate(_LABEL_SAFE)[:63]
            for k, v in list(cn.labels.items())[:24]
            if k not in (POOL_LABEL, SOURCE_LABEL)
        }
        labels.update({POOL_LABEL: spec.name, SOURCE_LABEL: spec.kind})
        return self.store.upsert_node(
            name,
            cn.name,
            spec.kind,
            cn.cpus * 1000,
            cn.memory_mib,
            labels,
            gpus,
            now,
            runtimes=("docker",) if spec.kind == KUBERNETES else ("process",),
        )

    # ---- jobs ----
    def _jobs(self, spec: PoolSpec, held: _Held, running: Sequence[Job], now: datetime) -> None:
        mine = [j for j in running if j.placed_parts and j.placed_parts[0][0] in held.nodes]
        theirs: dict[tuple[int, int], ClusterJob] = {}
        by_key = {(j.id, max(j.attempt, 1)): j for j in mine}
        for cj in held.backend.list_jobs():
            key = (cj.job_id, cj.attempt)
            if key in by_key and not self._is_ours(held, by_key[key], cj):
                continue  # another installation's or another cluster user's job of that name: not this job
            if key not in theirs or (theirs[key].ended and not cj.ended):  # a live one wins over an ended one
                theirs[key] = cj
        current = {(j.id, max(j.attempt, 1)) for j in mine}
        freed = False
        new: list[Job] = []
        for job in mine:
            key = (job.id, max(job.attempt, 1))
            if (
                key not in theirs
                and job.placed_parts[0][0] not in job.delivered_to
                and not (job.cancel_requested or job.preempt_requested)
            ):
                new.append(job)
                continue
            freed |= self._follow(spec, held, job, theirs.get(key), now)
        freed |= self._submit_all(spec, held, new, now)
        # the cluster's jobs for attempts that are not current (cancelled, requeued, ended here): stopped
        for key, cj in theirs.items():
            if key in current or cj.ended or cj.external_id in self._cancelled:
                continue
            known = self.store.get_job(cj.job_id)
            if known is None or not self._is_ours(held, known, cj):
                continue  # not this server's job (another Corral's, another user's, a restored store): left alone
            if known.state is JobState.RUNNING and max(known.attempt, 1) == cj.attempt:
                continue  # placed on another pool's node? not ours to stop
            log.info("pool %s: stopping %s (job %s attempt %s is not current)", spec.name, cj.external_id, *key)
            held.backend.cancel(cj.external_id)
            self._cancelled.add(cj.external_id)
        if freed:
            self.on_freed()

    def _follow(self, spec: PoolSpec, held: _Held, job: Job, cj: ClusterJob | None, now: datetime) -> bool:
        """One job placed on this pool. Returns whether its GPUs were given back."""
        attempt = max(job.attempt, 1)
        head = job.placed_parts[0][0]
        key = (job.id, attempt)
        if cj is None:
            if head in job.delivered_to:
                misses = self._misses.get(key, 0) + 1
                self._misses[key] = misses
                if misses < MISSES_BEFORE_LOST:
                    return False
                self._misses.pop(key, None)
                return self.store.finish_job(
                    job.id, JobState.FAILED, None, f"lost: the {spec.kind} cluster no longer knows this job", now
                )
            if job.cancel_requested or job.preempt_requested:  # never handed over: nothing runs
                return self._ended(job, None, "", now)
            return self._submit_all(spec, held, [job], now)
        self._misses.pop(key, None)
        if head not in job.delivered_to:
            self.store.mark_delivered([job.id], head)  # submitted by an earlier server (or pass) that died after
        stopping = job.cancel_requested or job.preempt_requested
        if stopping and not cj.ended and cj.external_id not in self._cancelled:
            held.backend.cancel(cj.external_id)
            self._cancelled.add(cj.external_id)
        if cj.state == STARTED:
            self._record_placement(spec, held, job, cj)
        if cj.state == STARTED or cj.ended:
            self._pull_log(held.backend, job, cj)
        phase = f"queued in {spec.kind} ({cj.external_id}): {cj.detail}"[:200] if cj.state == QUEUED else ""
        if phase != job.phase and not cj.ended:
            self.store.set_job_phase(job.id, attempt, phase)
        if not cj.ended:
            return False
        self._cancelled.discard(cj.external_id)
        reason = cj.detail if cj.exit_code != 0 else ""
        if cj.state == CANCELLED and not job.cancel_requested and not job.preempt_requested:
            return self.store.finish_job(
                job.id, JobState.FAILED, cj.exit_code, f"cancelled in the {spec.kind} cluster: {cj.detail}", now
            )
        return self._ended(job, cj.exit_code, reason, now)

    def _is_ours(self, held: _Held, job: Job, cj: ClusterJob) -> bool:
        """Whether a cluster job named after `job` is the one Corral submitted for it: made after Corral placed that
        attempt, and run as the account Corral submits it as (a cluster user can name a job of their own alike)."""
        if cj.submitted_s is not None and cj.submitted_s < _since(job) - CLOCK_SLACK_S:
            return False
        if cj.uid is None:
            return True
        want = held.backend.runs_as(self._identity(job)[0])
        return want is None or want == cj.uid

    def _identity(self, job: Job) -> tuple[int | None, bool]:
        """(uid, whether an admin mapped it) of the job's user, read at most every IDENTITY_TTL_S per user."""
        key = job.spec.user_id
        now = time.monotonic()
        held = self._identities.get(key)
        if held is None or now - held[0] > IDENTITY_TTL_S:
            try:
                identity = load_job_identity(self.store, job, self.uids)
                owner = self.store.get_user(key) if key is not None else None
                held = (now, identity.uid, owner is not None and owner.unix_uid is not None)
            except ValidationError:
                held = (now, None, False)
            self._identities[key] = held
        return held[1], held[2]

    def _record_placement(self, spec: PoolSpec, held: _Held, job: Job, cj: ClusterJob) -> None:
        """Where the cluster put it (its nodes and, where it says, GPU indices) replaces Corral's own placement."""
        if not cj.placement or len(cj.placement) > max(job.spec.nodes, 1):
            # none, or more nodes than the job asked for: left as Corral placed it (the store counts a job's parts
            # beyond its first node only for jobs of several nodes)
            return
        mine = dict(job.placed_parts)
        parts = []
        for cluster_node, gpus in cj.placement.items():
            name = node_name(spec.name, cluster_node)
            if name not in held.nodes:
                return  # a node this pool does not read (another partition): left as Corral placed it
            given = tuple(gpus) if len(gpus) == job.spec.gpus else mine.get(name, tuple(range(job.spec.gpus)))
            parts.append((name, given))
        if sorted(parts) != sorted((n, tuple(g)) for n, g in job.placed_parts):
            self.store.move_job_parts(job.id, max(job.attempt, 1), parts)

    def _ended(self, job: Job, exit_code: int | None, reason: str, now: datetime) -> bool:
        if job.preempt_requested and not job.cancel_requested:  # stopped to make room: back to the queue
            return self.store.requeue_job(job.id, job.reason or "preempted", now, preempted=True)
        state = state_for_exit(exit_code if exit_code is not None else 1, job.cancel_requested)
        return self.store.finish_job(job.id, state, exit_code, reason, now)

    def _pull_log(self, backend: ClusterBackend, job: Job, cj: ClusterJob) -> None:
        attempt = max(job.attempt, 1)
        for _ in range(8 if cj.ended else 1):  # at the end, what is left (up to 8 MB a pass)
            offset = self.logs.run_size(job.id, attempt)
            if self.logs.max_run_bytes and offset > self.logs.max_run_bytes:
                return  # this run's log is full and says so (the rest is dropped): not read again
            try:
                data = backend.read_log(cj.external_id, offset, LOG_CHUNK)
            except ClusterError as e:
                log.info("job %s: cannot read its log: %s", job.id, e)
                return
            if not data:
                return
            self.logs.append(job.id, offset, data, attempt)
            if len(data) < LOG_CHUNK:
                return

    def _submit_all(self, spec: PoolSpec, held: _Held, jobs: Sequence[Job], now: datetime) -> bool:
        """Hand these jobs to the cluster, SUBMIT_THREADS calls at a time (a burst of an array); each one's
        outcome is written here, in order."""
        freed = False
        subs: list[tuple[Job, Submission]] = []
        for job in jobs:
            try:
                subs.append((job, self._submission(spec, job)))
            except (SecretUnavailable, ValidationError) as e:
                freed |= self.store.finish_job(job.id, JobState.FAILED, None, f"cannot start: {e.message}", now)
        if not subs:
            return freed

        def call(sub: Submission) -> str | ClusterError:
            try:
                return held.backend.submit(sub)
            except ClusterError as e:
                return e

        if len(subs) == 1:
            results = [call(subs[0][1])]
        else:
            with ThreadPoolExecutor(max_workers=SUBMIT_THREADS, thread_name_prefix="corral-submit") as pool:
                results = list(pool.map(call, [s for _, s in subs]))
        unreachable: ClusterError | None = None
        for (job, _), got in zip(subs, results, strict=True):
            if isinstance(got, ClusterError):
                if got.transient:  # the cluster is out of reach: tried again next pass
                    unreachable = got
                    continue
                reason = f"the {spec.kind} cluster refused it: {got}"
                freed |= self.store.finish_job(job.id, JobState.FAILED, None, reason, now)
                continue
            self.store.mark_delivered([job.id], job.placed_parts[0][0])
            self.store.set_job_phase(job.id, max(job.attempt, 1), f"submitted to {spec.kind} ({got})")
            log.info("pool %s: job %s attempt %s is %s", spec.name, job.id, job.attempt, got)
        if unreachable is not None:
            raise unreachable
        return freed

    def _submission(self, spec: PoolSpec, job: Job) -> Submission:
        s = job.spec
        env = dict(s.env)
        if s.secret_env:
            if self.keyring is None:
                raise SecretUnavailable("the server has no secrets keyring")
            env.update(resolve_secret_env(self.store, self.keyring, s.tenant_id, s.secret_env))
        env["CORRAL_ATTEMPT"] = str(max(job.attempt, 1))
        if s.array_index is not None:
            env["CORRAL_ARRAY_INDEX"] = str(s.array_index)
            env["CORRAL_ARRAY_JOB_ID"] = str(s.array_id)
        if job.attempt > 1:
            env["CORRAL_PREEMPTED"] = "1"
        identity = load_job_identity(self.store, job, self.uids)
        tenant = self.store.get_tenant(s.tenant_id) if s.tenant_id is not None else None
        login = None
        if s.container is not None and s.container.registry_secret:
            if self.keyring is None:
                raise SecretUnavailable("the server has no secrets keyring")
            host, user, password = resolve_registry_secret(
                self.store, self.keyring, s.tenant_id, s.container.registry_secret
            )
            login = RegistryLogin(host=host, username=user, password=password)
        return Submission(
            job_id=job.id,
            attempt=max(job.attempt, 1),
            tenant=tenant.name if tenant is not None else "default",
            command=tuple(s.command),
            env=env,
            workdir=s.workdir,
            gpus=s.gpus,
            gpu_model=s.gpu_models[0] if len(s.gpu_models) == 1 else "",
            nodes=s.nodes,
            cpus=math.ceil(s.cpu_milli / 1000) if s.cpu_milli else 0,
            memory_mib=s.memory_mib,
            time_limit_s=s.time_limit_s,
            image=s.container.image if s.container is not None else "",
            registry_login=login,
            tolerations=tuple(t for t in s.tolerations if t not in CLUSTER_KINDS),
            uid=identity.uid,
            gid=identity.gid,
            since_s=_since(job),
            uid_mapped=self._identity(job)[1],
        )


def _since(job: Job) -> float:
    """When this attempt was placed (the job's start), or when it was made."""
    return (job.started_at or job.created_at).timestamp()


__all__ = ["ClusterBridge", "node_name"]
