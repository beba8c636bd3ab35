"""The services controller: keeps each service's replica jobs as its row asks, on the leader, once a second.

Per service and pass: replicas that ended without being asked are counted as crashes (their replacement waits
1, 2, 4 ... s); a ready replica that stops answering its health path for `unhealthy_after_s` is restarted; the
autoscaler sets the replica count from the gateways' request counts (core/services.py); the rollout step
(core/services.plan_rollout) says how many replicas of the serving revision to start and which to stop. A ready
replica is drained before it is stopped: marked in the row, so every gateway takes it out of its balance within
its next refresh, and cancelled once no gateway reports a request in flight to it (at least DRAIN_S after the mark,
at most the service's `drain_timeout_s`). A new revision whose replicas never become ready (past
`progress_deadline_s`, or STALL_CRASHES crashes) stalls the rollout: the last complete revision serves on.

Every decision is an event of the service, with its reason. Readiness is this server's gateway's own health checks
(every server probes every replica it may route to).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from corral.api.services import SETTING_DEFAULTS
from corral.core.errors import CorralError
from corral.core.models import Job
from corral.core.services import STALL_CRASHES, Autoscaler, ReplicaView, plan_rollout, restart_delay_s
from corral.core.states import JobState
from corral.server.background.loop import Loop
from corral.server.services.jobs import NO_SUBMIT_RULES, SubmitRules
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.services import LIVE, replica_spec, scale_policy
from corral.store.base import StateStore
from corral.store.records import Service

log = logging.getLogger("corral.services")
# A drained replica gets no new request after the gateways' next refresh (0.5 s), and a request sent before that is in
# their next counts (every FLUSH_S, 1 s): its requests in flight are known by then.
DRAIN_S = 2.0
RATE_WINDOW_S = 5.0  # the request rate is measured over this
SAMPLE_EVERY_S = 5.0  # a point of the graphs
SAMPLES_KEPT = timedelta(days=7)
TRAFFIC_FRESH_S = 10.0  # a server's counts older than this are of a server that is gone


class Readiness(Protocol):
    """This server's gateway health checks (corral.gateway.prober)."""

    def ready(self, job_id: int, attempt: int) -> bool: ...

    def detail(self, job_id: int) -> str: ...


@dataclass(slots=True)
class ServiceTraffic:
    """One service's request counts summed over the gateways, as the controller follows them."""

    total: float = 0.0  # requests since this controller began following (restarts of servers folded in)
    errors: float = 0.0
    hist: list[float] = field(default_factory=list)  # latency histogram buckets, same
    last_raw: dict[str, tuple[float, float, list[float]]] = field(default_factory=dict)  # server -> its counts
    history: list[tuple[float, float, float, list[float]]] = field(default_factory=list)  # (t, total, errors, hist)
    waiting: int = 0
    in_flight: int = 0
    in_flight_by_job: dict[int, int] = field(default_factory=dict)  # replica job -> requests in flight to it
    last_request_at: float | None = None  # wall clock, epoch seconds

    def rate(self, now: float, window_s: float = RATE_WINDOW_S) -> tuple[float, float, list[float]]:
        """(requests/s, errors/s, histogram delta) over about the last `window_s`."""
        past = [h for h in self.history if h[0] <= now - window_s] or self.history[:1]
        if not past:
            return 0.0, 0.0, []
        t0, total0, err0, hist0 = past[-1]
        dt = max(now - t0, 1e-6)
        if dt < 0.5:
            return 0.0, 0.0, []
        delta = [a - b for a, b in zip(self.hist, hist0, strict=False)] if hist0 else list(self.hist)
        return (self.total - total0) / dt, (self.errors - err0) / dt, delta


def _ready_revision(views: Sequence[ReplicaView], other_than: int) -> int:
    """The revision most ready replicas run, other than `other_than` (0: none is ready)."""
    counts = Counter(v.revision for v in views if v.ready and v.revision != other_than)
    return counts.most_common(1)[0][0] if counts else 0


def quantile_ms(hist: Sequence[float], bounds_ms: Sequence[float], q: float) -> float | None:
    """The `q` quantile of a histogram (counts per bucket, the last bucket unbounded): the upper bound of the bucket
    it falls in (None without a count)."""
    n = sum(hist)
    if n <= 0:
        return None
    rank, seen = q * n, 0.0
    for i, c in enumerate(hist):
        seen += c
        if seen >= rank and c > 0:
            return float(bounds_ms[i]) if i < len(bounds_ms) else float(bounds_ms[-1]) * 2
    return float(bounds_ms[-1]) * 2


class ServiceController(Loop):
    def __init__(
        self,
        store: StateStore,
        scheduler_trigger: Trigger,
        notifier: NodeNotifier,
        readiness: Readiness,
        bounds_ms: Sequence[float],
        interval_s: float = 1.0,
        *,
        clock: Callable[[], float] = time.time,
        rules: SubmitRules = NO_SUBMIT_RULES,
    ) -> None:
        super().__init__("services", interval_s, log=log)
        self.rules = rules  # what the server's settings allow in a replica (host mounts)
        self.store = store
        self.scheduler_trigger = scheduler_trigger
        self.notifier = notifier
        self.readiness = readiness
        self.bounds_ms = list(bounds_ms)
        self.clock = clock
        self.autoscalers: dict[int, Autoscaler] = {}
        self.traffic: dict[int, ServiceTraffic] = {}
        self._seen: dict[int, set[int]] = {}  # service -> its live replica jobs at the last pass
        self._asked: set[int] = set()  # replica jobs this controller stopped (their end is no crash)
        self._last_ready: dict[int, float] = {}  # replica job -> when it was last seen ready
        self._created: dict[int, float] = {}  # replica job -> when this controller first saw it
        self._last_sample = 0.0
        self._last_prune = 0.0
        self.latest: dict[int, dict[str, Any]] = {}  # service -> its newest figures (show, graphs)
        self._started_at = clock()

    # ---- one pass ---------------------------------------------------------------------------------------------

    def run_pass(self) -> float | None:
        now = self.clock()
        self._follow_traffic(now)
        services = self.store.list_services()
        replicas = self._replicas_by_service()
        waits: list[float] = []
        for svc in services:
            try:
                wait = self.reconcile(svc, replicas.get(svc.id, []), now)
                if wait is not None:
                    waits.append(wait)
            except Exception:  # one broken service must not stop the others
                log.exception("service %s: reconcile failed", svc.name)
        known = {s.id for s in services}
        for gone in (set(self._seen) | set(self.autoscalers) | set(self.traffic) | set(self.latest)) - known:
            self._forget(gone)
        if now - self._last_sample >= SAMPLE_EVERY_S:
            self._last_sample = now
            self._write_samples(services, replicas, now)
        return min(waits) if waits else None

    def _forget(self, service_id: int) -> None:
        self._seen.pop(service_id, None)
        self.autoscalers.pop(service_id, None)
        self.traffic.pop(service_id, None)
        self.latest.pop(service_id, None)

    def _replicas_by_service(self) -> dict[int, list[Job]]:
        out: dict[int, list[Job]] = {}
        for j in self.store.live_replicas():
            if j.spec.service_id is not None:
                out.setdefault(j.spec.service_id, []).append(j)
        return out

    def reconcile(self, svc: Service, live: list[Job], now: float) -> float | None:
        wall = datetime.fromtimestamp(now, UTC)
        events: list[tuple[str, str]] = []
        state = dict(svc.state)
        draining: dict[str, float] = {k: float(v) for k, v in state.get("draining", {}).items()}
        live_ids = {j.id for j in live}
        # replicas that ended since the last pass without being asked: crashes
        crashed = 0
        for job_id in self._seen.get(svc.id, set()) - live_ids:
            draining.pop(str(job_id), None)
            self._last_ready.pop(job_id, None)
            self._created.pop(job_id, None)
            if job_id in self._asked:
                self._asked.discard(job_id)
                continue
            job = self.store.get_job(job_id)
            if job is None or svc.deleting:
                continue
            crashed += 1
            ended = f"exited {job.exit_code}" if job.exit_code is not None else job.state.value.lower()
            events.append(
                (
                    "crashed",
                    f"replica job {job_id} (revision {job.spec.service_revision}) {ended}: {job.reason or 'no reason given'}".rstrip(
                        ": "
                    ),
                )
            )
            if job.spec.service_revision == svc.revision and state.get("rollout", {}).get("state") == "progressing":
                state["rollout_crashes"] = int(state.get("rollout_crashes", 0)) + 1
        self._seen[svc.id] = live_ids
        for k in [k for k in draining if int(k) not in live_ids]:
            draining.pop(k)
        if crashed:
            crashes = int(state.get("crashes", 0)) + crashed
            delay = restart_delay_s(crashes)
            state["crashes"] = crashes
            state["crashed_at"] = now
            state["restart_after"] = now + delay
            events.append(("restarting", f"a replacement starts in {delay:g} s (crash {crashes} in a row)"))

        if svc.deleting:
            for j in live:
                self._stop_replica(j, wall, "the service is being deleted")
            if not live:
                self.store.delete_service(svc.id)
                self._forget(svc.id)
                log.info("service %s deleted", svc.name)
                return None
            if events:
                self._save(svc, {"state": {**state, "draining": draining}}, wall, events)
            return 1.0

        settings = svc.settings
        views: list[ReplicaView] = []
        for j in live:
            self._created.setdefault(j.id, now)
            if str(j.id) in draining:
                continue
            if j.cancel_requested or j.preempt_requested:
                continue
            ready = j.state is JobState.RUNNING and self.readiness.ready(j.id, j.attempt)
            if ready:
                self._last_ready[j.id] = now
                crashed_at = float(state.get("crashed_at", 0.0))
                if int(state.get("crashes", 0)) and self._created.get(j.id, 0.0) >= crashed_at:
                    state["crashes"] = 0  # a replacement started after the last crash answers: back-off over
            elif j.id in self._last_ready and j.state is JobState.RUNNING:
                silent = now - self._last_ready[j.id]
                if silent >= float(settings.get("unhealthy_after_s", 10.0)):
                    why = self.readiness.detail(j.id) or "no answer"
                    events.append(
                        (
                            "unhealthy",
                            f"replica job {j.id} failed its health checks for {silent:.0f} s ({why}): restarting it",
                        )
                    )
                    self._stop_replica(j, wall, f"restarted: health checks failed for {silent:.0f} s ({why})")
                    state["crashes"] = int(state.get("crashes", 0)) + 1
                    state["crashed_at"] = now
                    state["restart_after"] = now + restart_delay_s(int(state["crashes"]))
                    continue
            views.append(ReplicaView(j.id, j.spec.service_revision or 0, ready))

        # autoscaling
        changes: dict[str, Any] = {}
        desired = svc.replicas
        policy = scale_policy(settings, svc.replicas)
        if policy.autoscaled:
            t = self.traffic.get(svc.id) or ServiceTraffic()
            rps, _, _ = t.rate(now)
            scaler = self.autoscalers.setdefault(svc.id, Autoscaler())
            # idle counts from the newest request, the service's creation or this controller's start, whichever is
            # latest (a new service, or one a new leader just took over, is not scaled to zero at once)
            last = max(t.last_request_at or 0.0, svc.created_at.timestamp(), self._started_at)
            decision = scaler.decide(policy, svc.replicas, rps, now, last, t.waiting)
            if decision.desired != svc.replicas:
                desired = decision.desired
                changes["replicas"] = desired
                events.append(("autoscaled", decision.reason))

        # the rollout
        rollout = dict(state.get("rollout", {}))
        stalled = rollout.get("state") == "stalled" and rollout.get("revision") == svc.revision
        # what serves if the rollout stalls: the last revision that completed, or (an update came before the
        # controller saw the previous rollout complete) the revision of the replicas ready now
        fallback = svc.stable_revision or _ready_revision(views, svc.revision)
        target = fallback if stalled and fallback else svc.revision
        if rollout.get("state") == "progressing" and target == svc.revision and fallback:
            why = self._stall_reason(svc, live, state, settings, now)
            if why:
                rollout = {"state": "stalled", "revision": svc.revision, "message": why, "since": wall.isoformat()}
                events.append(("rollout-stalled", f"{why}; revision {fallback} keeps serving"))
                target = fallback
                if not svc.stable_revision:
                    changes["stable_revision"] = fallback
                state.pop("rollout_crashes", None)
        step = plan_rollout(
            views, target, desired, int(settings.get("max_surge", 1)), int(settings.get("max_unavailable", 0))
        )
        by_id = {j.id: j for j in live}
        for job_id in step.stop:
            j = by_id[job_id]
            ready = any(v.job_id == job_id and v.ready for v in views)
            if ready:
                draining[str(job_id)] = now  # out of the balance first; stopped DRAIN_S later
                events.append(
                    ("draining", f"replica job {job_id} (revision {j.spec.service_revision}) drains and stops")
                )
            else:
                self._stop_replica(j, wall, "stopped by its service's rollout or scale-down")
                events.append(
                    ("stopped", f"replica job {job_id} (revision {j.spec.service_revision}, not ready) stopped")
                )
        self._stop_drained(svc, draining, by_id, now, wall, events)
        wait: float | None = None
        restart_after = float(state.get("restart_after", 0.0))
        if step.start:
            if now < restart_after:
                wait = restart_after - now
            else:
                revision = svc.revision_of(target) or svc.current
                started = self._start(svc, revision, step.start, wall, events)
                if started:
                    rollout.setdefault("state", "progressing")
        # complete once the old replicas are gone too (not only drained or asked to stop)
        leftovers = any(j.spec.service_revision != target for j in live)
        done = f"revision {svc.revision}: {desired} replica(s) ready"
        if step.complete and not leftovers and target == svc.revision and rollout.get("state") != "complete":
            rollout = {"state": "complete", "revision": svc.revision, "message": done, "since": wall.isoformat()}
            changes["stable_revision"] = svc.revision
            state.pop("rollout_crashes", None)
            events.append(("rollout-complete", rollout["message"]))
        elif rollout.get("state") == "complete" and step.complete:  # a scale since: the count in words follows
            rollout["message"] = done
        state["rollout"] = rollout
        state["draining"] = draining
        if state != svc.state:
            changes["state"] = state
        if changes or events:
            self._save(svc, changes, wall, events)
        if draining:
            return DRAIN_S / 2
        return wait

    def _stop_drained(
        self,
        svc: Service,
        draining: Mapping[str, float],
        by_id: Mapping[int, Job],
        now: float,
        wall: datetime,
        events: list[tuple[str, str]],
    ) -> None:
        """Stop each draining replica whose requests in flight have ended (at the gateways that report them), or
        whose drain timeout has passed; never before DRAIN_S, when a gateway may not yet know it drains."""
        t = self.traffic.get(svc.id)
        timeout_s = float(svc.settings.get("drain_timeout_s", SETTING_DEFAULTS["drain_timeout_s"]))
        for key, since in draining.items():
            j = by_id.get(int(key))
            waited = now - since
            if j is None or j.cancel_requested or waited < DRAIN_S:
                continue
            left = t.in_flight_by_job.get(j.id, 0) if t is not None else 0
            if not left:
                self._stop_replica(j, wall, "drained and stopped by its service")
            elif waited >= timeout_s:
                why = f"{left} request(s) still in flight after the drain timeout ({timeout_s:g} s)"
                self._stop_replica(j, wall, f"stopped by its service: {why}")
                events.append(("drain-timeout", f"replica job {j.id} stopped with {why}"))

    def _stall_reason(
        self, svc: Service, live: Sequence[Job], state: Mapping[str, Any], settings: Mapping[str, Any], now: float
    ) -> str:
        crashes = int(state.get("rollout_crashes", 0))
        if crashes >= STALL_CRASHES:
            return (
                f"rollout of revision {svc.revision} stopped: its replicas ended {crashes} times before becoming ready"
            )
        deadline = float(settings.get("progress_deadline_s", 300.0))
        for j in live:
            if j.spec.service_revision != svc.revision or j.id in self._last_ready:
                continue
            age = now - self._created.get(j.id, now)
            if age >= deadline:
                if j.state is JobState.PENDING:
                    why = "still pending (no room for it)"
                else:
                    why = self.readiness.detail(j.id) or "no answer"
                return (
                    f"rollout of revision {svc.revision} stopped: replica job {j.id} not ready after {age:.0f} s "
                    f"(health {svc.current['health_path']}: {why})"
                )
        return ""

    def _start(
        self, svc: Service, revision: Mapping[str, Any], n: int, wall: datetime, events: list[tuple[str, str]]
    ) -> int:
        try:
            spec = replica_spec(self.store, svc, revision, self.rules)
        except CorralError as e:
            message = f"cannot start a replica of revision {revision['revision']}: {e}"
            if not svc.events or svc.events[-1].get("message") != message:
                events.append(("error", message))
            return 0
        for _ in range(n):
            job = self.store.create_job(spec, wall)
            self._created[job.id] = self.clock()
            self._seen.setdefault(svc.id, set()).add(job.id)
            events.append(("started", f"replica job {job.id} of revision {revision['revision']} submitted"))
        self.scheduler_trigger.fire()
        return n

    def _stop_replica(self, job: Job, wall: datetime, why: str) -> None:
        if job.cancel_requested:
            return
        self._asked.add(job.id)
        stopped = self.store.request_cancel(job.id, wall)
        self.store.add_event(job.id, "service", why, wall)
        if stopped is not None and stopped.node and not stopped.state.terminal:
            self.notifier.notify(stopped.node)
        self.scheduler_trigger.fire()

    def _save(self, svc: Service, changes: dict[str, Any], wall: datetime, events: list[tuple[str, str]]) -> None:
        for kind, message in events:
            log.info("service %s: %s: %s", svc.name, kind, message)
        version = svc.version

        def change(current: Service) -> dict[str, Any]:
            if current.version != version:  # changed meanwhile (an update, a scale): redo next pass, keep events
                out: dict[str, Any] = {}
                if "state" in changes:  # what the controller alone writes
                    st = dict(current.state)
                    for k in ("draining", "crashes", "crashed_at", "restart_after", "rollout_crashes"):
                        if k in changes["state"]:
                            st[k] = changes["state"][k]
                    out["state"] = st
                return {**out, "_events": events}
            return {**changes, "_events": events}

        self.store.modify_service(svc.id, change, wall)

    # ---- traffic ----------------------------------------------------------------------------------------------

    def _follow_traffic(self, now: float) -> None:
        rows = self.store.load_service_traffic()
        for service_id, servers in rows.items():
            t = self.traffic.setdefault(service_id, ServiceTraffic())
            waiting = in_flight = 0
            by_job: Counter[int] = Counter()
            for server, data in servers.items():
                updated = data.get("_updated_at")
                fresh = updated is not None and now - updated.timestamp() <= TRAFFIC_FRESH_S
                req, err = float(data.get("requests", 0)), float(data.get("errors", 0))
                hist = [float(x) for x in data.get("latency_hist", [])]
                last = t.last_raw.get(server)
                if last is None:  # a server first seen: its counts so far are the baseline
                    d_req, d_err, d_hist = 0.0, 0.0, [0.0] * len(hist)
                elif req >= last[0]:
                    d_req, d_err = req - last[0], err - last[1]
                    d_hist = [a - b for a, b in zip(hist, last[2], strict=False)] if len(hist) == len(last[2]) else hist
                else:  # that server restarted: its counts began again
                    d_req, d_err, d_hist = req, err, hist
                t.last_raw[server] = (req, err, hist)
                t.total += d_req
                t.errors += d_err
                if len(t.hist) < len(d_hist):
                    t.hist.extend([0.0] * (len(d_hist) - len(t.hist)))
                for i, x in enumerate(d_hist):
                    t.hist[i] += x
                if fresh:
                    waiting += int(data.get("waiting", 0))
                    in_flight += int(data.get("outstanding", 0))
                    by_job.update({int(k): int(n) for k, n in data.get("outstanding_by_job", {}).items()})
                at = data.get("last_request_at")
                if at is not None and (t.last_request_at is None or float(at) > t.last_request_at):
                    t.last_request_at = float(at)
            t.waiting, t.in_flight, t.in_flight_by_job = waiting, in_flight, dict(by_job)
            t.history.append((now, t.total, t.errors, list(t.hist)))
            horizon = now - 4 * RATE_WINDOW_S
            t.history = [h for h in t.history if h[0] >= horizon]

    def figures(self, service_id: int, now: float | None = None) -> dict[str, Any] | None:
        """The service's request rate, error rate, p50/p99 (ms) over the last few seconds, and requests in flight."""
        t = self.traffic.get(service_id)
        if t is None:
            return None
        now = self.clock() if now is None else now
        rps, eps, hist = t.rate(now)
        return {
            "rps": round(rps, 3),
            "error_rate": round(eps / rps, 4) if rps > 0 else 0.0,
            "p50_ms": quantile_ms(hist, self.bounds_ms, 0.5),
            "p99_ms": quantile_ms(hist, self.bounds_ms, 0.99),
            "in_flight": t.in_flight,
        }

    def _write_samples(self, services: Sequence[Service], replicas: Mapping[int, list[Job]], now: float) -> None:
        wall = datetime.fromtimestamp(now, UTC)
        rows: list[tuple[int, dict[str, Any]]] = []
        for svc in services:
            f = self.figures(svc.id, now) or {"rps": 0.0, "error_rate": 0.0, "p50_ms": None, "p99_ms": None}
            live = replicas.get(svc.id, [])
            ready = sum(1 for j in live if j.state is JobState.RUNNING and self.readiness.ready(j.id, j.attempt))
            point = {
                **{k: f.get(k) for k in ("rps", "error_rate", "p50_ms", "p99_ms")},
                "desired": svc.replicas,
                "ready": ready,
            }
            self.latest[svc.id] = point
            rows.append((svc.id, point))
        if rows:
            self.store.add_service_samples(rows, wall)
        if now - self._last_prune >= 3600:
            self._last_prune = now
            self.store.prune_service_samples(wall - SAMPLES_KEPT)


__all__ = ["LIVE", "ServiceController", "quantile_ms"]
