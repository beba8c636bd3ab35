"""The alert service: each round (every few seconds, run by server/background/alerts.py) builds the series (latest
telemetry, GPU health, lost nodes, jobs, queues), evaluates the rules, keeps the history, notifies (webhook, e-mail)
and carries out rule actions. Rules and silences are kept in the store; the built-in rules come from
corral.alerts.defaults."""

from __future__ import annotations

import logging
import re
import string
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from corral.alerts.defaults import DEFAULT_RULES
from corral.alerts.engine import AlertEngine
from corral.alerts.evaluator import ActionRequest, Alert, AlertChange, AlertState, SeriesPoint
from corral.alerts.notifiers import (
    DeliveryStatus,
    EmailNotifier,
    NotificationDispatcher,
    Notifier,
    WebhookNotifier,
)
from corral.alerts.rules import AlertRule, RuleAction, parse_rule, rule_to_dict
from corral.alerts.series import (
    JobPlacement,
    compute_batch_series,
    compute_budget_series,
    compute_health_series,
    compute_job_utilization_series,
    compute_node_lost_series,
    compute_queue_series,
    compute_sample_series,
)
from corral.alerts.silences import MAX_TENANT_SILENCE_S, Silence, parse_silence, silence_to_dict
from corral.core.errors import ConflictError, ForbiddenError, NotFoundError, ValidationError
from corral.core.health import describe_gpu_fault
from corral.core.models import Node
from corral.core.rollup import RetentionPolicy, compute_closed_before, compute_retention_cutoffs
from corral.core.states import JobState
from corral.core.telemetry import TelemetryBatch
from corral.core.tenancy import Action
from corral.core.timestamps import parse_iso_time
from corral.server.auth import Principal
from corral.server.background.alerts import AlertLoop
from corral.server.health import TelemetryService
from corral.server.services.alert_credentials import load_smtp_password, load_webhook_urls
from corral.server.services.audit import record_audit
from corral.server.settings import Settings
from corral.store.protocols import AlertingStore
from corral.store.snapshot import JobCache
from corral.store.telemetry import HOST_GPU, AlertHistoryRecord, Point

log = logging.getLogger("corral.alerts")
MAX_SUMMARY = 1000  # characters of a rule's summary template
_WIDE = re.compile(r"\d{4,}")  # a width or precision of 1000 or more in a format spec


def check_summary_template(template: str) -> None:
    """Raises ValidationError when a rule's summary template would make every alert of the rule a huge string:
    `{value:>300000000}` is 300 MB per alert and evaluation round (kept in memory, the history and every answer),
    and a nested field (`{value:{threshold}}`) takes its width from a number the rule chooses. At most
    MAX_SUMMARY characters, so that many fields 999 wide stay under 100 kB."""
    if len(template) > MAX_SUMMARY:
        raise ValidationError("summary", f"at most {MAX_SUMMARY} characters")
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return  # a broken template is shown as it is (evaluator.compute_summary)
    for _, name, spec, _ in fields:
        if name is not None and spec and ("{" in spec or _WIDE.search(spec)):
            raise ValidationError("summary", f"a field's format may not be nested nor 1000 wide or more ({spec!r})")


_DEFAULT_NAMES = frozenset(r.name for r in DEFAULT_RULES)  # a tenant rule may not take one (it would replace it)


def check_stored_rule(rule: AlertRule) -> None:
    """What a rule must hold to be kept, when it is created and when stored rules are loaded again: a bounded
    summary template, and a tenant's rule never named as a built-in one (a same-named rule replaces the built-in
    for the whole cluster: only an admin's may). Raises ValidationError naming the field."""
    check_summary_template(rule.summary)
    if rule.tenant and rule.name in _DEFAULT_NAMES:
        raise ValidationError("name", f"{rule.name!r} is the name of a built-in rule of the cluster; pick another")


OTHERS_MARGIN_S = 30.0  # a margin on the stale window for replicas' clocks and a heartbeat's period
STALE_AFTER_S = 120.0  # a node's last batch older than this no longer feeds sampled series
MEMORY_FRESH_S = 30.0  # a node's batch in memory older than this: its samples may be newer in the database


def is_same_server(replica_id: str, mine: str) -> bool:
    """The replica is one of this server's processes (CORRAL_WORKERS: a worker's id extends its starter's,
    server/workers.py): the starter, which receives every batch its agents' workers forward, and the loops' process
    (the one that leads and evaluates), to which the starter relays them. Such a replica's batches are in this
    process's memory already (one the channels had no room for is replaced by that node's next)."""
    return replica_id.partition("/")[0] == mine.partition("/")[0]


@dataclass(slots=True)
class StoredSamples:
    """A node's latest samples as the database has them (whichever replica received them): what compute_series
    uses for a node whose latest batch this replica does not hold, or holds older."""

    ts: float = float("-inf")  # the newest sample's time
    gpus: dict[int, dict[str, float]] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)


def group_latest_points(points: Sequence[Point]) -> dict[str, StoredSamples]:
    """store.latest_points' answer by node."""
    out: dict[str, StoredSamples] = {}
    for p in points:
        node = out.setdefault(p.node, StoredSamples())
        node.ts = max(node.ts, p.ts)
        if p.gpu == HOST_GPU:
            node.host[p.metric] = p.value
        else:
            node.gpus.setdefault(p.gpu, {})[p.metric] = p.value
    return out


def newest_sample_ts(batch: TelemetryBatch) -> float:
    """The time of a batch's newest sample (what its stored points carry, to compare with StoredSamples.ts)."""
    times = [s.ts for s in batch.gpus] + ([batch.host.ts] if batch.host is not None else [])
    return max(times, default=batch.ts)


def build_notifiers(settings: Settings) -> list[Notifier]:
    notifiers: list[Notifier] = []
    for i, url in enumerate(load_webhook_urls(settings)):  # URLs may carry tokens: from a file, never logged
        notifiers.append(WebhookNotifier(f"webhook-{i + 1}", url))
    if settings.smtp_host and settings.alert_email_to:
        recipients = [r.strip() for r in settings.alert_email_to.split(",") if r.strip()]
        notifiers.append(
            EmailNotifier(
                "email",
                settings.smtp_host,
                settings.smtp_port,
                settings.alert_email_from,
                recipients,
                username=settings.smtp_username or None,
                password=load_smtp_password(settings),
                tls=settings.smtp_tls,
            )
        )
    return notifiers


def _selector_text(labels: dict[str, Any]) -> str:
    """{label: value} as the selector text the rules parse: label="value",..."""
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def normalize_rule_input(data: dict[str, Any]) -> dict[str, Any]:
    """Accept the portal's spelling too: `op` for `comparison`, a selector object {label: value}."""
    out = dict(data)
    if "op" in out and "comparison" not in out:
        out["comparison"] = out.pop("op")
    if isinstance(out.get("selector"), dict):
        out["selector"] = _selector_text(out["selector"])
    return out


def normalize_silence_input(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    if isinstance(out.get("matchers"), dict):
        out["matchers"] = _selector_text(out["matchers"])
    if "until" in out and "ends_at" not in out:
        until = out.pop("until")
        if isinstance(until, str):
            until = parse_iso_time(until, "until").timestamp()
        out["ends_at"] = until
    return out


def alert_out(a: Alert) -> dict[str, Any]:
    return {
        "id": a.fingerprint,
        "rule": a.rule,
        "severity": a.severity.value,
        "state": a.state.value,
        "labels": a.label_map,
        "value": a.value,
        "message": a.summary,
        "started_at": datetime.fromtimestamp(a.active_since, UTC).isoformat(),
        "fired_at": datetime.fromtimestamp(a.fired_at, UTC).isoformat() if a.fired_at else None,
        "resolved_at": datetime.fromtimestamp(a.resolved_at, UTC).isoformat() if a.resolved_at else None,
        "silenced_by": a.silenced_by,
    }


class AlertService:
    """`shared`: other server replicas may share the database (PostgreSQL). Then each round also reads the latest
    stored samples of the nodes whose telemetry went to another replica, and saves the current alerts for the
    replicas that do not lead; `leading` says whether this replica leads (None: always), and a replica that does not
    answers list_alerts from what the leader saved. One server (SQLite, `shared` False) reads memory only."""

    def __init__(
        self,
        store: AlertingStore,
        telemetry: TelemetryService,
        settings: Settings,
        *,
        shared: bool = False,
        leading: Callable[[], bool] | None = None,
        replica_id: str = "",
    ) -> None:
        self.store = store
        self.telemetry = telemetry
        self.settings = settings
        self.shared = shared
        self.leading = leading
        self.replica_id = replica_id
        self.dispatcher = NotificationDispatcher(build_notifiers(settings))
        self.engine = AlertEngine(submit=self.dispatcher.submit, act=self._act)
        self.retention = RetentionPolicy(
            raw_s=settings.metrics_raw_retention_s, rollup_s=settings.metrics_rollup_retention_s
        )
        self._rolled_until: float | None = None
        self._running = JobCache(store, [JobState.RUNNING])  # each round reads only the jobs that changed
        # tenant -> % of its budget used this period (server/services/budgets.py; set by the app)
        self.budget_used: Callable[[], Mapping[str, float]] = dict
        # the people's process of a server of several: the notifiers' status as the loops' process last told it
        # (server/background/scheduler_view.py); None: this process's own dispatcher's
        self.remote_notifiers: Callable[[], list[dict[str, Any]] | None] | None = None
        self.loop = AlertLoop(self, settings.alert_interval_s)  # rounds on their own thread (server/background)
        self.reload()

    # ---- lifecycle ------------------------------------------------------------------
    def reload(self) -> None:
        rules = []
        for r in self.store.list_alert_rules():
            try:
                rule = parse_rule(r.spec)
            except ValidationError as e:  # a rule stored by an older version that no longer parses
                log.error("alert rule %s ignored: %s", r.name, e)
                continue
            try:
                check_stored_rule(rule)  # one stored before create_rule refused such rules
            except ValidationError as e:
                log.error("alert rule %s ignored: %s", r.name, e)
                continue
            rules.append(rule)
        self.engine.set_custom_rules(rules)
        now = time.time()
        silences: dict[str, Silence] = {}
        for sid, spec in self.store.list_silences():
            try:
                s = parse_silence(self._scoped(spec), id=sid, now=now, created_by=str(spec.get("created_by", "")))
            except ValidationError:
                continue
            if s.ends_at > now:
                silences.setdefault(s.id, s)
        self.engine.replace_silences(list(silences.values()))

    def _sync_shared(self) -> None:
        """With replicas, rules and silences may be added or ended through another one: take the stored ones."""
        if self.shared:
            self.reload()

    def _scoped(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A silence stored before silences had a tenant: a tenant-admin's becomes its tenant's (it was muting the
        whole cluster's alerts), and lasts no longer than a tenant's silence may."""
        if "tenant" in spec:
            return spec
        user = self.store.find_user(str(spec.get("created_by", "")))
        if user is None or user.role == "admin" or user.tenant_id is None:
            return spec
        tenant = self.store.get_tenant(user.tenant_id)
        if tenant is None:
            return spec
        log.warning("silence by %s now mutes only tenant %s's alerts", user.name, tenant.name)
        scoped = spec | {"tenant": tenant.name}
        ends_at, starts_at = spec.get("ends_at"), spec.get("starts_at")
        if isinstance(ends_at, int | float) and isinstance(starts_at, int | float):
            scoped["ends_at"] = min(ends_at, starts_at + MAX_TENANT_SILENCE_S)
        return scoped

    def start(self) -> None:
        self.dispatcher.start()
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()
        self.dispatcher.stop()

    # ---- one round ----------------------------------------------------------------------
    def compute_series(self, now: float) -> list[SeriesPoint]:
        nodes = self.store.list_nodes()
        running = self._running.read()
        tenants = {t.id: t.name for t in self.store.list_tenants()}
        placements = [
            JobPlacement(str(j.id), tenants.get(j.spec.tenant_id or 0, ""), node, gpus)
            for j in running
            for node, gpus in j.placed_parts
        ]
        series: list[SeriesPoint] = []
        # a node's GPU and host series only for the metrics some enabled rule reads (the rules read nothing else;
        # 1,000 nodes make ~100,000 points a round, most of them read by no default rule)
        wanted = {r.metric for r in self.engine.rules() if r.enabled}
        on_node: dict[str, list[JobPlacement]] = {}  # each node's running jobs (not every job for every node)
        for p in placements:
            on_node.setdefault(p.node, []).append(p)
        utilization: dict[tuple[str, int], float] = {}
        # Another replica's agents' samples, from the database (replicas only; one server holds every batch).
        stored = self._read_back(now, nodes)
        for name, batch in self.telemetry.latest().items():
            if now - batch.ts > STALE_AFTER_S:
                continue
            if name in stored and stored[name].ts > newest_sample_ts(batch):
                continue  # the node now sends to another replica: its newer samples are below
            stored.pop(name, None)
            series += compute_batch_series(batch, on_node.get(name, ()), wanted)
            utilization.update(
                {(name, s.index): s.utilization_percent for s in batch.gpus if s.utilization_percent is not None}
            )
        uuids = {n.name: {g.index: g.uuid for g in n.gpus} for n in nodes}
        for name, samples in sorted(stored.items()):
            series += compute_sample_series(
                name, samples.gpus, samples.host, uuids.get(name, {}), on_node.get(name, ()), wanted
            )
            utilization.update(
                {
                    (name, i): values["gpu_utilization_percent"]
                    for i, values in samples.gpus.items()
                    if "gpu_utilization_percent" in values
                }
            )
        in_words = self.telemetry.unhealthy()  # "Xid 79" where the checks saw the fault; else the stored reason
        for n in nodes:
            said = in_words.get(n.name, {})
            unhealthy = {
                s.index: said.get(s.index) or describe_gpu_fault(s.reason) or "unhealthy"
                for s in n.gpu_status
                if not s.healthy
            }
            series += compute_health_series(n.name, unhealthy, {g.index: g.uuid for g in n.gpus})
        series += compute_node_lost_series(n.name for n in nodes if n.state == "LOST")
        series += compute_job_utilization_series(placements, utilization)
        pending: dict[str, int] = {}
        for tenant_id, count in self.store.count_jobs_by_tenant([JobState.PENDING]).items():
            key = tenants.get(tenant_id or 0, "")
            pending[key] = pending.get(key, 0) + count
        series += compute_queue_series(pending)
        series += compute_budget_series(self.budget_used())
        return series

    def _read_back(self, now: float, nodes: Sequence[Node]) -> dict[str, StoredSamples]:
        """The latest samples other processes stored, for the nodes whose batches this process may not hold: every
        node when another replica was heard from lately (_others_store); else (one server, all its batches in this
        memory) only the nodes whose batch is missing here or older than MEMORY_FRESH_S (one the channels had no
        room for, one received before this process started)."""
        if self._others_store(now):
            return group_latest_points(self.store.latest_points(now - STALE_AFTER_S))
        if not self.shared:
            return {}
        held = self.telemetry.latest()
        missing = [n.name for n in nodes if (b := held.get(n.name)) is None or now - b.ts > MEMORY_FRESH_S]
        return group_latest_points(self.store.latest_points(now - STALE_AFTER_S, missing)) if missing else {}

    def _others_store(self, now: float) -> bool:
        """Whether another replica may have stored samples young enough to count: one was heard from within
        STALE_AFTER_S (and a margin for clocks). A lone server on PostgreSQL then skips reading back every node's
        latest samples each round (1,000 nodes: a fifth of its interpreter under load), all of them in its memory.
        This server before a restart had another replica id, so its samples are read back after one."""
        if not self.shared:
            return False
        since = datetime.fromtimestamp(now - STALE_AFTER_S - OTHERS_MARGIN_S, UTC)
        return any(not is_same_server(r.id, self.replica_id) for r in self.store.list_replicas(since))

    def evaluate(self, now: float) -> list[AlertChange]:
        """One round. The history keeps what fired and what resolved: a pending alert is not history (one whose
        job ends, or whose condition clears, before its for-duration is dropped and leaves no row behind)."""
        self._sync_shared()  # a rule or silence made through another replica counts from this round on
        result = self.engine.evaluate(self.compute_series(now), now)
        at = datetime.fromtimestamp(now, UTC)
        self.store.add_alert_history(
            [
                AlertHistoryRecord(
                    c.alert.fingerprint,
                    c.alert.rule,
                    c.alert.state.value,
                    c.alert.severity.value,
                    c.alert.label_map,
                    c.alert.value,
                    c.alert.summary,
                    at,
                )
                for c in result.changes
                if c.alert.state is not AlertState.PENDING
            ]
        )
        if self.shared:  # what the replicas that do not lead answer GET /alerts with
            self.store.save_alert_snapshot([alert_out(a) for a in self.engine.alerts()], at, self.replica_id)
        return result.changes

    def apply_retention(self, now: float) -> None:
        closed = compute_closed_before(now, self.retention.bucket_s)
        since = self._rolled_until
        if since is None:
            latest = self.store.latest_rollup_bucket()
            since = latest + self.retention.bucket_s if latest is not None else 0.0
        if closed > since:
            self.store.compute_and_store_rollups(since, closed, self.retention.bucket_s)
            self._rolled_until = closed
        cut = compute_retention_cutoffs(now, self.retention)
        self.store.prune_telemetry(cut.raw_before, cut.rollup_before)

    def _act(self, request: ActionRequest) -> None:
        now = datetime.now(UTC)
        if not self._action_in_reach(request):
            return
        if request.action is RuleAction.CORDON_NODE and request.node:
            if self.store.set_node_cordoned(request.node, True):
                self.store.add_node_event(request.node, None, "cordoned", f"by alert rule {request.rule}", now)
                self.store.add_audit(f"alert:{request.rule}", "node.cordon", request.node, "", now)
        elif request.action is RuleAction.STOP_JOB and request.job:
            job = self.store.request_cancel(int(request.job), now)
            if job is not None:
                self.store.add_event(job.id, "stopped_by_alert", f"rule {request.rule}", now)
                self.store.add_audit(f"alert:{request.rule}", "job.stop", request.job, "", now)

    def _action_in_reach(self, request: ActionRequest) -> bool:
        """A tenant's rule acts on its own tenant's jobs only: it never cordons a node, nor stops another
        tenant's job (checked again here, for rules stored before create_rule refused such actions)."""
        rule = next((r for r in self.engine.rules() if r.name == request.rule), None)
        if rule is None or not rule.tenant:
            return True
        tenant = self.store.find_tenant(rule.tenant)
        job = self.store.get_job(int(request.job)) if request.job and request.job.isdigit() else None
        if (
            request.action is RuleAction.STOP_JOB
            and tenant is not None
            and job is not None
            and job.spec.tenant_id == tenant.id
        ):
            return True
        log.warning(
            "alert rule %s of tenant %s may not %s (%s)",
            rule.name,
            rule.tenant,
            request.action.value,
            request.node if request.action is RuleAction.CORDON_NODE else f"job {request.job}",
        )
        return False

    # ---- API operations ----------------------------------------------------------------
    def notifier_status(self) -> list[DeliveryStatus]:
        """Each notifier's deliveries: where the rounds run (this process, or the loops' process of this server)."""
        if self.remote_notifiers is None:
            return self.dispatcher.status()
        try:  # written by this server's own loops' process, maybe of another version during an upgrade
            return [DeliveryStatus(**d) for d in self.remote_notifiers() or []]
        except (TypeError, ValueError):
            return []

    def alert_states(self) -> Counter[str]:
        """How many current alerts (pending, firing, recently resolved) are in each state: this replica's own when
        it evaluates them, else those the leader saved at its last round (as list_alerts)."""
        if self.shared and self.leading is not None and not self.leading():
            alerts, _, _ = self.store.load_alert_snapshot()
            return Counter(str(a.get("state")) for a in alerts)
        return Counter(a.state.value for a in self.engine.alerts(list(AlertState)))

    def list_alerts(self, caller: Principal, states: Sequence[AlertState] | None) -> list[dict[str, Any]]:
        """The current alerts: this replica's own when it evaluates them (it leads, or is the only server), else
        those the leader saved at its last round. A tenant member sees its tenant's and the cluster's only."""
        tenant = self._tenant_name(caller)
        if self.shared and self.leading is not None and not self.leading():
            wanted = {s.value for s in states} if states is not None else None
            alerts, _, _ = self.store.load_alert_snapshot()
            rows = [a for a in alerts if wanted is None or a.get("state") in wanted]
        else:
            rows = [alert_out(a) for a in self.engine.alerts(states)]
        return [a for a in rows if tenant is None or dict(a.get("labels") or {}).get("tenant") in (None, tenant)]

    def history(self, caller: Principal, limit: int) -> list[dict[str, Any]]:
        tenant = self._tenant_name(caller)
        return [
            {
                "id": h.fingerprint,
                "rule": h.rule,
                "state": h.state,
                "severity": h.severity,
                "labels": h.labels,
                "value": h.value,
                "message": h.summary,
                "at": h.at.isoformat(),
            }
            for h in self.store.list_alert_history(limit)
            if h.state != AlertState.PENDING.value  # rows an older version wrote when an alert became pending
            and (tenant is None or h.labels.get("tenant") in (None, tenant))
        ]

    def list_rules(self, caller: Principal) -> list[dict[str, Any]]:
        """The cluster's rules and, for a non-admin, its own tenant's (another tenant's rules are private)."""
        tenant = self._tenant_name(caller)
        ids = {r.name: r.id for r in self.store.list_alert_rules()}
        return [
            rule_to_dict(r) | {"id": ids.get(r.name), "builtin": r.name not in ids}
            for r in self.engine.rules()
            if tenant is None or r.tenant in (None, tenant)
        ]

    def create_rule(self, caller: Principal, data: dict[str, Any]) -> dict[str, Any]:
        data = normalize_rule_input(data)
        if not caller.is_admin:  # tenant admins write rules over their own tenant's series only
            if not caller.role.value == "tenant-admin":
                raise ForbiddenError(
                    f"your role ({caller.role.value}) may not manage alert rules; that takes: admin, tenant-admin"
                )
            data |= {"scope": "tenant", "tenant": self._tenant_name(caller)}
        rule: AlertRule = parse_rule(data)
        check_stored_rule(rule)
        if rule.tenant and RuleAction.CORDON_NODE in rule.actions:
            # a node is shared by every tenant: only the cluster's rules may take one out
            raise ValidationError("actions", "a tenant's rule may stop its own jobs (stop_job) but not cordon nodes")
        if any(r.name == rule.name for r in self.store.list_alert_rules()):
            raise ConflictError(f"alert rule {rule.name!r} exists")
        tenant_id = caller.tenant_id if rule.tenant else None
        rec = self.store.create_alert_rule(rule.name, rule_to_dict(rule), tenant_id, datetime.now(UTC))
        self.reload()
        record_audit(self.store, caller, "alert_rule.create", rule.name)
        return rule_to_dict(rule) | {"id": rec.id, "builtin": False}

    def delete_rule(self, caller: Principal, rule_id: int) -> None:
        rec = next((r for r in self.store.list_alert_rules() if r.id == rule_id), None)
        if rec is None or (not caller.is_admin and rec.tenant_id != caller.tenant_id):
            raise NotFoundError("alert rule", str(rule_id))
        if not caller.is_admin and caller.role.value != "tenant-admin":
            raise ForbiddenError(
                f"your role ({caller.role.value}) may not manage alert rules; that takes: admin, tenant-admin"
            )
        self.store.delete_alert_rule(rule_id)
        self.reload()
        record_audit(self.store, caller, "alert_rule.delete", rec.name)

    def list_silences(self, caller: Principal) -> list[dict[str, Any]]:
        """Active silences: all of them for an admin, a tenant's own for anyone else."""
        self._sync_shared()
        tenant = self._tenant_name(caller)
        return [
            silence_to_dict(s)
            for s in self.engine.silences(time.time())
            if caller.is_admin or (tenant is not None and s.tenant == tenant)
        ]

    def create_silence(self, caller: Principal, data: dict[str, Any]) -> dict[str, Any]:
        """An admin's silence mutes any alert its matchers select (or, with `tenant`, that tenant's only); a
        tenant-admin's is always its tenant's: it mutes that tenant's alerts and nothing else."""
        caller.require(Action.MANAGE_TENANT)
        who = caller.user.name if caller.user else caller.token.name
        data = normalize_silence_input(data)
        if not caller.is_admin:
            own = self._tenant_name(caller)
            if own is None:
                raise ForbiddenError("a silence needs a tenant to belong to")
            if data.get("tenant") not in (None, own):
                raise ValidationError("tenant", f"a tenant-admin silences its own tenant's alerts only ({own})")
            data["tenant"] = own
        elif data.get("tenant") is not None and self.store.find_tenant(str(data["tenant"])) is None:
            raise ValidationError("tenant", f"no tenant {data['tenant']!r}")
        silence: Silence = parse_silence(data, id=uuid.uuid4().hex[:12], now=time.time(), created_by=who)
        spec = silence_to_dict(silence)
        self.store.save_silence(silence.id, spec, datetime.now(UTC))
        self.engine.add_silence(silence)
        record_audit(self.store, caller, "silence.create", silence.id, spec["matchers"])
        return spec

    def delete_silence(self, caller: Principal, silence_id: str) -> None:
        """End a silence now. A tenant-admin reaches its own tenant's silences only: any other is 404."""
        caller.require(Action.MANAGE_TENANT)
        self._sync_shared()
        silence = next((s for s in self.engine.silences() if s.id == silence_id), None)
        if silence is None or (
            not caller.is_admin and (silence.tenant is None or silence.tenant != self._tenant_name(caller))
        ):
            raise NotFoundError("silence", silence_id)
        self.engine.expire_silence(silence_id, time.time())
        self.store.delete_silence(silence_id)
        record_audit(self.store, caller, "silence.delete", silence_id)

    def _tenant_name(self, caller: Principal) -> str | None:
        if caller.is_admin or caller.tenant_id is None:
            return None
        t = self.store.get_tenant(caller.tenant_id)
        return t.name if t else None
