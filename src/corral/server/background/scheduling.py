"""The scheduling loop: load a snapshot, compute one Plan (pure), apply it guarded, wake the agents.

load (store -> Snapshot) -> compute_plan (corral.scheduler.plan: queueing and placement, the same code the
simulators run) -> apply_plan (corral.store.applier: each assignment re-checked against the store in its
transaction; a conflicting one is rejected and tried again next cycle) -> notify the agents of touched nodes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from corral.core.staging import CODE_STAGING, IN_STAGED, IN_STAGING
from corral.core.states import JobState
from corral.scheduler.plan import UNRANKED, Plan, Snapshot, compute_plan, is_quiet, is_same_work
from corral.scheduler.queueing import compute_decayed_usage, get_queueing_policy
from corral.scheduler.queueing.prediction import DurationPrediction
from corral.server.background.loop import Loop
from corral.server.background.scheduler_view import ViewFollower, sweep_views, write_view
from corral.server.health.consequences import requeue_after_failure
from corral.server.services.notify import NodeNotifier
from corral.server.services.prediction import HISTORY_JOBS, RunTimePredictions
from corral.server.services.staging import compute_staging_reasons, describe_stage_nodes
from corral.store.applier import AppliedPlan, apply_plan
from corral.store.protocols import OperationsStore, SchedulingStore, StagingStore
from corral.store.records import Job, Tenant, User
from corral.store.snapshot import JobCache, KeptBuilds, compute_running_job, load_snapshot

log = logging.getLogger("corral.scheduler")
SWEEP_EVERY_S = 5.0  # how often the newest successful jobs are read for the run-time predictions
SWEEP_JOBS = 500  # how many: more than finish in SWEEP_EVERY_S at the burst rates measured (bench/burst.py)
USAGE_SAVE_EVERY_S = 30.0  # fair share's history is written this often (and on stop), read back on start
LOST_CHECK_EVERY = timedelta(seconds=1)  # silent nodes are looked for at most this often (each pass did)


class UserNames(Protocol):
    def list_users(self, tenant_id: int | None = None) -> list[User]: ...


class LoopStore(SchedulingStore, OperationsStore, StagingStore, UserNames, Protocol):
    """What the loop reads and writes: the scheduling roles, plus node events (a node it finds lost), user names
    (run-time predictions key on them) and where jobs' input is staged."""


REASON_CONFLICT = "its GPUs were taken by another writer at the last moment; it is placed again next cycle"
CODE_CONFLICT = "conflict"
CODE_RETRY = "retry-backoff"
CODE_BUDGET = "budget"  # its tenant's budget is used up and its policy holds new jobs
MAX_STAGING_PER_NODE = 8  # jobs whose input a node stages (or holds staged) at once


RECHECK_S = 10.0  # a quiet plan over unchanged work is kept this long (Slurm's sched_interval is 60 s)
WAKE_EVERY_S = 0.5  # a worker serving agents looks for news for them this often (CORRAL_WORKERS)


# reasons, codes and (position, ETA) of the jobs a plan leaves pending, by job id
_Described = tuple[dict[int, str], dict[int, str], dict[int, tuple[int, datetime | None]]]


class Scheduler(Loop):
    """Runs scheduling passes on its own thread (Loop); `trigger` asks for one soon."""

    def __init__(
        self,
        store: LoopStore,
        notifier: NodeNotifier,
        policy: str,
        interval_s: float,
        node_lost_after_s: float = 60.0,
        retry_backoff_s: float = 1.0,
        queueing: str | None = None,
        cancel_grace_s: float = 10.0,
        leading: Callable[[], bool] | None = None,
        explains: bool = True,
        recheck_s: float = RECHECK_S,
        view_out: Path | None = None,
        view_in: Path | None = None,
    ) -> None:
        # rest_ratio: under load the passes grow long; resting as long as the last pass took keeps the scheduler to
        # half the server's interpreter and lets each pass take more jobs at once (idle, a pass takes milliseconds)
        # A worker serving agents (explains False) passes more often: its pass only reads what changed and wakes the
        # agents it holds, and a run the leader placed waits for it to reach the agent.
        interval_s = interval_s if explains else min(interval_s, WAKE_EVERY_S)
        super().__init__("scheduler", interval_s, log=log, rest_ratio=1.0, max_rest_s=1.0)
        # Whether this server replica leads (server/background/leadership.py): only the leader applies plans,
        # marks nodes lost and saves fair share's history; the others compute the same plan to answer why jobs
        # wait, and wake the agents whose long polls they hold when the leader gave those nodes work.
        self.leading: Callable[[], bool] = leading or (lambda: True)
        # A replica that answers no one why a job waits (a worker serving only agents: server/workers.py) computes
        # no plan while it does not lead; it still wakes the agents it holds when the leader gave them work.
        self.explains = explains
        # CORRAL_WORKERS (server/background/scheduler_view.py): the loops' process writes what people are told to
        # `view_out` after each pass that changed it; the people's process (explains False) reads it from `view_in`.
        self.view_out = view_out
        if view_out is not None:
            sweep_views(view_out.parent)
        self._published: tuple[object, ...] = ()
        # what the leader's other loops know that people read (scheduler_view.SchedulerView.extra): asked of them
        # at each write on the loops' side (`view_extra`), as last read on the people's (`leader_facts`)
        self.view_extra: Callable[[], dict[str, Any]] = dict
        self.leader_facts: dict[str, Any] = {}
        self._follower = ViewFollower(view_in) if view_in is not None else None
        self.store = store
        self.notifier = notifier
        self.policy = policy
        self.node_lost_after_s = node_lost_after_s
        self.retry_backoff_s = retry_backoff_s
        self.queueing = get_queueing_policy(queueing)
        self.cancel_grace_s = cancel_grace_s
        # A pass whose snapshot is the same work as that of the last plan computed (is_same_work), when that plan
        # was quiet (nothing started, preempted or nominated), keeps it instead of computing it again, for at most
        # recheck_s (0: every pass computes). A long queue that fits nowhere cost the server half its interpreter
        # (10,000 pending jobs planned every 2 s); what time alone moves (fair share's order, ETAs) waits this long.
        self.recheck_s = recheck_s
        # the last plan computed, with its snapshot and time, when it was quiet
        self._quiet_plan: tuple[Snapshot, datetime, Plan] | None = None
        self.passes_kept = 0  # passes that kept the last plan (for tests and the benchmarks)
        self.pending_info: dict[int, tuple[int, datetime | None]] = {}  # job id -> (queue position, ETA)
        self.pending_reasons: dict[int, str] = {}  # job id -> one plain sentence (the API's pending_reason)
        self.pending_codes: dict[int, str] = {}  # job id -> its stable code (pending_code)
        self._usage: dict[str, float] = {}
        self._usage_at: datetime | None = None
        self._usage_loaded = False
        self._usage_saved_at: datetime | None = None
        # job id -> when running jobs were first preempted for it: it gets the freed GPUs first
        self._nominated: dict[int, float] = {}
        self._latencies: deque[float] = deque(maxlen=10_000)  # submit -> placement, seconds
        self._placements = 0  # how many were added to _latencies (a change to publish)
        # Run times learnt from finished jobs (the store's history at start, then each job that succeeds).
        self.predictions = RunTimePredictions()
        self._history_learnt = False
        self._swept_at = 0.0
        self._was_running: set[int] = set()
        self._placed_nodes: dict[int, tuple[str, ...]] = {}  # running job -> its nodes, as of the last pass
        self._lost_checked_at: datetime | None = None  # when silent nodes were last looked for
        # Each pass reads the pending and running jobs; only those whose row changed since are loaded again.
        self._pending = JobCache(store, [JobState.PENDING])
        self._running = JobCache(store, [JobState.RUNNING])
        self._kept = KeptBuilds()  # their QueuedJobs and the nodes' NodeInfos, built again only on change
        self._user_names: dict[int, str] = {}
        self._lock = threading.Lock()
        # The cloud pools' part (server/background/autoscaler.py): the last cycle's input and plan, which the
        # autoscaler asks what fits; the taints of the nodes pools started; why a job waits on a pool (job id ->
        # (code, sentence)), which replaces the cycle's reason for that job.
        self.last_cycle: tuple[Snapshot, Plan, datetime] | None = None
        self.node_taints: Mapping[str, tuple[str, ...]] = {}
        self.pool_notes: Mapping[int, tuple[str, str]] = {}
        self.on_waiting: Callable[[], None] = lambda: None  # after a pass that left jobs waiting (the autoscaler)
        # tenant id -> why its jobs are held (its budget is used up with policy hold: server/services/budgets.py)
        self.held_tenants: Callable[[], Mapping[int, str]] = dict
        self._held: dict[int, str] = {}
        self._staging: dict[int, str] = {}  # job id -> how staging its input goes (it waits outside the pass)
        # the last plan and pool notes described (_plan_reasons), with what was published of them
        self._described: tuple[Plan, Mapping[int, tuple[str, str]], _Described] | None = None
        # node -> pending jobs whose input is staged (or being staged) there, as of the last pass (the autoscaler
        # keeps such a node)
        self.staging_nodes: Mapping[str, int] = {}

    def set_pool_notes(self, notes: Mapping[int, tuple[str, str]]) -> None:
        """Why jobs wait on the cloud pools; applied to the published reasons now and after each pass."""
        self.pool_notes = notes
        if notes:
            reasons, codes = dict(self.pending_reasons), dict(self.pending_codes)
            for job_id, (code, text) in notes.items():
                if job_id in reasons and codes.get(job_id) not in (CODE_RETRY, CODE_CONFLICT):
                    reasons[job_id], codes[job_id] = text, code
            self.pending_reasons, self.pending_codes = reasons, codes

    def run_pass(self) -> float | None:
        self.run_once(datetime.now(UTC))
        if self.view_out is not None:
            self.publish_view()
        return None

    def publish_view(self) -> None:
        """Write what people are told (reasons, codes, positions and ETAs, latencies) to `view_out` when it changed
        since the last write: the published dicts are replaced whole on a change, never changed in place."""
        assert self.view_out is not None
        now = (self.pending_reasons, self.pending_codes, self.pending_info, self._placements, self.view_extra())
        # the same objects, or equal ones (a pass with reasons from outside its plan copies them): nothing to write
        if self._published and all(a is b or a == b for a, b in zip(now, self._published, strict=True)):
            self._published = now
            return
        write_view(self.view_out, self.pending_reasons, self.pending_codes, self.pending_info, self._latencies, now[-1])
        self._published = now

    def follow_view(self) -> None:
        """The people's process: take the loops' process's view when it changed."""
        view = self._follower.changed() if self._follower is not None else None
        if view is not None:
            self.pending_reasons, self.pending_codes, self.pending_info = view.reasons, view.codes, view.info
            self._latencies = deque(view.latencies_s, maxlen=self._latencies.maxlen)
            self.leader_facts = view.extra

    def on_stop(self) -> None:
        if self.leading():
            self._save_usage()  # at most USAGE_SAVE_EVERY_S of history is lost if the store is gone already

    @property
    def usage_gpu_s(self) -> dict[str, float]:
        """Fair share's history: decayed GPU-seconds per tenant name, as of the last pass."""
        return dict(self._usage)

    def latencies_s(self) -> list[float]:
        """Recent submit-to-placement latencies (for the scheduling-latency histogram)."""
        return list(self._latencies)

    def reconcile_lost_nodes(self, now: datetime) -> list[str]:
        """Nodes silent for longer than node_lost_after_s become LOST; their jobs go back to the queue
        (a job whose cancel was already requested ends CANCELLED instead)."""
        if self._lost_checked_at is not None and timedelta(0) <= now - self._lost_checked_at < LOST_CHECK_EVERY:
            return []  # a node is lost after tens of seconds of silence: once a second is soon enough
        self._lost_checked_at = now
        lost = self.store.mark_nodes_lost(now - timedelta(seconds=self.node_lost_after_s))
        for name in lost:
            log.warning("node %s lost: no heartbeat for %.0f s", name, self.node_lost_after_s)
            self.store.add_node_event(name, None, "lost", f"no heartbeat for {self.node_lost_after_s:g} s", now)
            for job in self.store.list_node_jobs(name):
                requeue_after_failure(self.store, job, f"node {name} lost", now, self.retry_backoff_s)
        return lost

    def run_once(self, now: datetime) -> list[int]:
        """One pass: load -> compute_plan -> apply_plan -> notify. Returns the ids of the jobs started."""
        with self._lock:
            leading = self.leading()
            if not leading and not self.explains:
                running = self._running.read()
                self._wake_nodes_with_news(running)
                if self._follower is not None:  # the people's process of several: what it tells, the loops' one knew
                    self.follow_view()
                    self._learn_run_times(running, self.store.list_tenants())  # running jobs' predicted end
                    self._refresh_users(running)
                return []
            if leading:
                self.reconcile_lost_nodes(now)
            pending = self._pending.read()
            running = self._running.read()
            tenants = self.store.list_tenants()
            self._wake_nodes_with_news(running)
            self._update_usage(running, tenants, now, save=leading)
            self._learn_run_times(running, tenants)
            if not pending:
                self.pending_reasons, self.pending_codes, self.pending_info = {}, {}, {}
                self.last_cycle = self._quiet_plan = None
                self._kept = KeptBuilds()  # the last pass's jobs are not held once the queue is empty
                self._described = None
                self.predictions.forget_answers()
                self.staging_nodes = {}
                return []
            if leading:
                pending = self._unstage_lost(pending, now)
            self.staging_nodes = Counter(n for j in pending for n in j.stage_nodes)
            # Jobs in retry backoff, and jobs whose input is being staged, wait outside the cycle; the rest (with or
            # without GPUs) go through it.
            waiting = [j for j in pending if j.not_before is not None and j.not_before > now]
            self._staging = compute_staging_reasons(pending)
            ready = [j for j in pending if (j.not_before is None or j.not_before <= now) and j.id not in self._staging]
            held_tenants = self.held_tenants()
            self._held = {
                j.id: held_tenants[t] for j in ready if (t := j.spec.tenant_id) is not None and t in held_tenants
            }
            if self._held:
                ready = [j for j in ready if j.id not in self._held]
            predicted = self._predict(ready, running, tenants) if self.queueing.order == "predict" else None
            snapshot: Snapshot = load_snapshot(
                self.store,
                now,
                grace_s=self.cancel_grace_s,
                nominated=self._nominated,
                usage_gpu_s=self._usage,
                pending=ready,
                running=running,
                tenants=tenants,
                node_taints=self.node_taints,
                predicted=predicted,
                kept=self._kept,
            )
            kept_plan = self._kept_plan(snapshot, now)
            if kept_plan is not None:  # why each job waits outside the plan (staging, retry, budget) is published anew
                self.passes_kept += 1
                if kept_plan.pending:
                    self.on_waiting()
                self._after_apply(kept_plan, AppliedPlan(), pending, ready, waiting, now)
                return []
            plan = compute_plan(snapshot, now.timestamp(), self.policy, self.queueing)
            self._quiet_plan = (snapshot, now, plan) if is_quiet(plan) else None
            plan = self._stage_first(plan, snapshot, pending, now if leading and self.leading() else None)
            self.last_cycle = (snapshot, plan, now)
            if plan.pending:
                self.on_waiting()
            if leading and not self.leading():  # lost the lease while computing (a pause): apply nothing
                leading = False
            applied = apply_plan(self.store, plan, now) if leading else AppliedPlan()
            self._was_running.update(int(j) for j in applied.started)  # seen leaving it, however soon it ends
            self._after_apply(plan, applied, pending, ready, waiting, now)
            return [int(j) for j in applied.started]

    def _kept_plan(self, snapshot: Snapshot, now: datetime) -> Plan | None:
        """The last plan, when this pass keeps it: it was quiet, computed less than recheck_s ago, on the same work."""
        kept = self._quiet_plan
        if kept is None or not timedelta(0) <= now - kept[1] < timedelta(seconds=self.recheck_s):
            return None
        return kept[2] if is_same_work(kept[0], snapshot) else None

    def _wake_nodes_with_news(self, running: list[Job]) -> None:
        """Wake the long polls this replica holds of agents that have news (a run to start or to stop, which another
        replica may have written: the leader's plan, a cancel through a replica the agent is not connected to, a job
        sent back to the queue from a node being drained), so the agent hears of it within a pass, not at the end of
        its poll (meanwhile the old run would go on beside the new one). With one replica these were woken already."""
        for job in running:
            news = job.cancel_requested or job.preempt_requested
            for node, _ in job.placed_parts:
                if news or node not in job.delivered_to:
                    self.notifier.notify(node)
        # Jobs that left RUNNING since the last pass (few): those back in the queue have a run to stop.
        left = self._placed_nodes.keys() - {j.id for j in running}
        for job in self.store.get_jobs(sorted(left)) if left else ():
            if job.state is JobState.PENDING:
                for node in self._placed_nodes[job.id]:
                    self.notifier.notify(node)
        self._placed_nodes = {j.id: tuple(node for node, _ in j.placed_parts) for j in running}

    def _after_apply(
        self, plan: Plan, applied: AppliedPlan, pending: list[Job], ready: list[Job], waiting: list[Job], now: datetime
    ) -> None:
        """Wake the touched nodes' agents, keep nominations, and publish why each job still waits."""
        for admit in plan.admit:
            if admit.job_id in applied.started:
                for p in admit.placements:
                    self.notifier.notify(p.node)
        for node in applied.preempted_nodes:
            self.notifier.notify(node)
        for victim in plan.preempt:
            if victim.job_id in applied.preempted:
                log.info("preempting job %s for job %s (%s)", victim.job_id, victim.for_job_id, victim.kind)
        # Waiting on GPUs that preempted jobs release: it keeps its claim on them from the first cycle it was nominated.
        for job_id in plan.nominate:
            self._nominated.setdefault(int(job_id), now.timestamp())
        pending_ids = {j.id for j in pending}
        self._nominated = {k: v for k, v in self._nominated.items() if k in pending_ids}
        if applied.started:
            created = {str(j.id): j.created_at for j in ready}
            for job_id in applied.started:
                self._latencies.append(max((now - created[job_id]).total_seconds(), 0.0))
                self._placements += 1
        reasons, codes, info = self._plan_reasons(plan)
        # why jobs wait outside the plan (few): ahead of the plan's own reason
        outside: dict[int, tuple[str, str]] = {}
        for job in waiting:
            outside[job.id] = (f"waiting to retry at {job.not_before:%H:%M:%S} UTC after: {job.reason}", CODE_RETRY)
        for job_id in applied.rejected:
            outside[int(job_id)] = (REASON_CONFLICT, CODE_CONFLICT)
        for jid, why in self._held.items():
            outside[jid] = (why, CODE_BUDGET)
        for jid, why in self._staging.items():
            outside[jid] = (why, CODE_STAGING)
        if outside:
            reasons, codes = dict(reasons), dict(codes)
            for jid, (why, code) in outside.items():
                reasons[jid], codes[jid] = why, code
                note = self.pool_notes.get(jid) if str(jid) in plan.pending else None
                if note is not None and code not in (CODE_RETRY, CODE_CONFLICT):
                    codes[jid], reasons[jid] = note
        self.pending_reasons, self.pending_codes, self.pending_info = reasons, codes, info

    def _plan_reasons(self, plan: Plan) -> _Described:
        """Why each of the plan's pending jobs waits (its reason, code, queue position and ETA), a cloud pool's note
        in place of the plan's reason. Kept for the plan and the notes it was made from: a pass that keeps the
        plan publishes the same (10,000 pending jobs cost 30 ms a pass to describe again). Never changed in place:
        callers copy before they add."""
        notes = self.pool_notes
        made = self._described
        if made is not None and made[0] is plan and made[1] is notes:
            return made[2]
        reasons: dict[int, str] = {}
        codes: dict[int, str] = {}
        info: dict[int, tuple[int, datetime | None]] = {}
        for job_id, status in plan.pending.items():
            jid = int(job_id)
            reasons[jid] = status.text or (f"{status.reason}: {status.detail}" if status.detail else status.reason)
            codes[jid] = status.reason
            note = notes.get(jid)
            if note is not None and status.reason not in (CODE_RETRY, CODE_CONFLICT):
                codes[jid], reasons[jid] = note
            if status.position != UNRANKED:
                eta = datetime.fromtimestamp(status.eta_s, UTC) if status.eta_s is not None else None
                info[jid] = (status.position, eta)
        self._described = (plan, notes, (reasons, codes, info))
        return reasons, codes, info

    def _unstage_lost(self, pending: list[Job], now: datetime) -> list[Job]:
        """A job whose input is staged (or being staged) on a node that no longer takes work (lost, removed,
        cordoned, released) is staged again elsewhere: the pending list with those jobs reset."""
        staged = [j for j in pending if j.stage_state in (IN_STAGING, IN_STAGED)]
        if not staged:
            return pending
        usable = {n.name for n in self.store.list_nodes() if n.state == "READY" and not n.cordoned}
        reset: set[int] = set()
        for job in staged:
            gone = [n for n in job.stage_nodes if n not in usable]
            if gone or not job.stage_nodes:
                why = f"node {', '.join(gone) or job.stage_node} no longer takes work: its input is staged again"
                if self.store.update_staging(job.id, (job.stage_state, job.stage_node), "", None, ""):
                    self.store.add_event(job.id, "unstaged", why, now)
                    reset.add(job.id)
        if not reset:
            return pending
        fresh = {j.id: j for j in self.store.list_jobs(states=[JobState.PENDING])}
        return [fresh[j.id] if j.id in reset and j.id in fresh else j for j in pending if j.id in fresh]

    def _stage_first(self, plan: Plan, snapshot: Snapshot, pending: list[Job], now: datetime | None) -> Plan:
        """A job with input to stage that the plan places is not bound: its input is staged on the node the plan
        chose, its GPUs stay free meanwhile, and it is placed there once the input is in (`now` None: a replica
        that does not lead only computes the plan without them). A node stages at most what its free GPUs could
        run (the jobs staging or staged there claim theirs) and MAX_STAGING_PER_NODE jobs at once: jobs that hold
        no GPUs cannot make a node download without end."""
        unstaged = {str(j.id): j for j in pending if j.spec.stage_in and not j.stage_state}
        if not unstaged:
            return plan
        chosen = [a for a in plan.admit if a.job_id in unstaged]
        if not chosen:
            return plan
        free = {n.info.name: sum(1 for u in n.gpu_used_milli if u == 0) for n in snapshot.nodes}
        claimed: dict[str, int] = {}
        count: dict[str, int] = {}
        for j in pending:
            if j.stage_state:
                for n in j.stage_nodes:
                    claimed[n] = claimed.get(n, 0) + j.spec.gpus
                    count[n] = count.get(n, 0) + 1
        for admit in chosen:
            nodes = list(dict.fromkeys(p.node for p in admit.placements))  # a gang's input goes to each of its nodes
            gpus = unstaged[admit.job_id].spec.gpus
            busy = next(
                (
                    n
                    for n in nodes
                    if claimed.get(n, 0) + gpus > free.get(n, 0) or count.get(n, 0) >= MAX_STAGING_PER_NODE
                ),
                None,
            )
            if busy is not None:
                self._staging[int(admit.job_id)] = f"waiting to stage its input: node {busy} stages for others"
                continue
            for n in nodes:
                claimed[n] = claimed.get(n, 0) + gpus
                count[n] = count.get(n, 0) + 1
            text = describe_stage_nodes(nodes)
            if now is not None and self.store.update_staging(
                int(admit.job_id), ("", None), IN_STAGING, nodes[0], text, nodes
            ):
                self.store.add_event(
                    int(admit.job_id), "staging", "its input is " + text.replace("staging input", "staged", 1), now
                )
                self._staging[int(admit.job_id)] = text
                for n in nodes:
                    self.notifier.notify(n)
        ids = {a.job_id for a in chosen}
        return replace(
            plan,
            admit=tuple(a for a in plan.admit if a.job_id not in ids),
            preempt=tuple(p for p in plan.preempt if p.for_job_id not in ids),
            nominate=tuple(n for n in plan.nominate if n not in ids),
        )

    def user_names(self) -> Mapping[int, str]:
        """User id -> name, as last read (replaced whole, never changed in place: callers may keep it, not copy it;
        a job page lists up to 500 jobs and asked for a copy per job)."""
        return self._user_names

    def _learn_run_times(self, running: list[Job], tenants: list[Tenant]) -> None:
        """Teach the predictor the store's recent successful jobs once, then each job that left the running set
        since the last pass and succeeded (one read for all of them; the jobs this replica started count as running
        from the moment they start: run_once)."""
        names = {t.id: t.name for t in tenants}
        now_running = {j.id for j in running}
        clock = time.monotonic()
        if not self._history_learnt:  # at start: the store's history
            self._history_learnt, self._swept_at = True, clock
            history = self.store.list_jobs(states=[JobState.SUCCEEDED], newest_first=True, limit=HISTORY_JOBS)
            self._refresh_users(history)
            self.predictions.learn(history, names, self._user_names)
        elif clock - self._swept_at >= SWEEP_EVERY_S:
            # Then, every few seconds, the newest successes not learnt yet: jobs another replica (or a tool) started
            # that ended between two passes never show in the running set below. Their ids are read first (an
            # index), the jobs only when new.
            self._swept_at = clock
            ids = self.store.list_job_ids([JobState.SUCCEEDED], SWEEP_JOBS)
            news = self.store.get_jobs(self.predictions.unknown(ids))
            if news:
                self._refresh_users(news)
                self.predictions.learn(news, names, self._user_names)
        left = self.store.get_jobs(self._was_running - now_running)
        self._was_running = now_running
        if left:
            self._refresh_users(left)
            self.predictions.learn(left, names, self._user_names)

    def _refresh_users(self, jobs: list[Job]) -> None:
        if any(j.spec.user_id is not None and j.spec.user_id not in self._user_names for j in jobs):
            self._user_names = {u.id: u.name for u in self.store.list_users()}

    def _predict(
        self, pending: list[Job], running: list[Job], tenants: list[Tenant]
    ) -> dict[int, DurationPrediction | None]:
        """Each pending and running job's predicted run time (the `predict` ordering reads it); an answer is kept
        while its job and what the predictor learnt stay the same (RunTimePredictions.predict_all)."""
        self._refresh_users([*pending, *running])
        return self.predictions.predict_all((*pending, *running), {t.id: t.name for t in tenants}, self._user_names)

    def _update_usage(self, running: list[Job], tenants: list[Tenant], now: datetime, save: bool = True) -> None:
        """Decayed GPU-seconds per tenant (fair share's history), advanced to `now`. The history is read from the
        store on the first pass and written back every USAGE_SAVE_EVERY_S: a restart keeps it (the jobs running
        across the gap are counted as having run through it)."""
        names = {t.id: t.name for t in tenants}
        if not self._usage_loaded:
            self._usage_loaded = True
            stored, as_of = self.store.load_usage()
            if as_of is not None and as_of <= now:
                self._usage = {names[t]: v for t, v in stored.items() if t in names}
                self._usage_at = as_of
                self._usage_saved_at = now
        if self._usage_at is not None:
            dt = max((now - self._usage_at).total_seconds(), 0.0)
            held = [compute_running_job(j, names, (), {}, now, 0.0) for j in running]
            self._usage = compute_decayed_usage(self._usage, held, dt, self.queueing.half_life_s)
        self._usage_at = now
        due = self._usage_saved_at is None or (now - self._usage_saved_at).total_seconds() >= USAGE_SAVE_EVERY_S
        if save and due:
            self._save_usage(names)

    def _save_usage(self, names: dict[int, str] | None = None) -> None:
        if self._usage_at is None:
            return
        ids = {n: i for i, n in (names or {t.id: t.name for t in self.store.list_tenants()}).items()}
        self.store.save_usage({ids[n]: v for n, v in self._usage.items() if n in ids}, self._usage_at)
        self._usage_saved_at = self._usage_at
