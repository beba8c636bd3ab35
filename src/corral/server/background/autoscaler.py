"""The autoscaler loop (the leader's): observe -> reconcile (pure) -> decide (pure: the pool's policy over the
scheduler's own cycle) -> act (providers, outside any store transaction).

Each pass reads the scheduler's last cycle (its snapshot and plan: the same code decides what fits), the pools and
the nodes they started, each pool's instances as its provider lists them, the inventory and the GPUs' recent
utilisation. What it decides and sees is recorded as pool events, with the reason; why a job waits on a pool is
published to the scheduler (the job's pending reason).
"""

from __future__ import annotations

import importlib
import logging
import re
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from corral.autoscaler.demand import compute_demand
from corral.autoscaler.model import Action, AutoscaleState, Launch, Release
from corral.autoscaler.policy import compute_notes, decide
from corral.autoscaler.reconciler import Observed, compute_backoff, compute_changes
from corral.cloud.base import LaunchRequest, Provider, ProviderError, compute_tags
from corral.cloud.registry import create_provider
from corral.core.pools import (
    CLOUD,
    DRAINING,
    FAILED,
    LAUNCHING,
    SPOT_TAINT,
    STATIC_POOL,
    PoolNode,
    PoolSpec,
)
from corral.core.states import JobState
from corral.core.telemetry import TelemetryBatch
from corral.server.background.loop import Loop
from corral.server.background.scheduling import Scheduler
from corral.server.services.alerting import STALE_AFTER_S
from corral.store.protocols import (
    JobStore,
    NodeIdentityStore,
    NodeStore,
    OperationsStore,
    PoolStore,
    TelemetryStore,
)

log = logging.getLogger("corral.autoscaler")
GPU_UTILIZATION = "gpu_utilization_percent"  # the stored series idle detection reads (core/telemetry.py)
INTERVAL_S = 2.0
TYPE_SAFE = re.compile(r"[^a-z0-9-]+")


class AutoscalerStore(PoolStore, NodeStore, JobStore, OperationsStore, NodeIdentityStore, TelemetryStore, Protocol):
    """What the loop reads and writes (and, with replicas, the GPU samples other replicas stored)."""


@dataclass(frozen=True)
class JoinAccess:
    """How a new node joins: the agents' TLS URL and a maker of one-time join tokens (ttl_s, description) ->
    (token text, token id)."""

    url: str
    make_token: Callable[[float, str], tuple[str, int]]


def _dt(s: float | None) -> datetime | None:
    return datetime.fromtimestamp(s, UTC) if s is not None else None


def compute_node_name(pool: str, type_name: str) -> str:
    """`gpu-cloud-g4-3f9a1c`: the pool, the type (made name-safe) and a random suffix."""
    kind = TYPE_SAFE.sub("-", type_name.lower()).strip("-")[:20] or "node"
    return f"{pool}-{kind}-{secrets.token_hex(3)}"


def load_policy(module: str) -> Callable[[AutoscaleState], list[Action]]:
    """A policy module's `decide` (imported on first use; a broken one raises, and the pass logs it)."""
    mod = importlib.import_module(module)
    fn = getattr(mod, "decide", None)
    if not callable(fn):
        raise ProviderError(f"policy module {module} has no decide(state) function")
    return fn  # type: ignore[no-any-return]


class Autoscaler(Loop):
    def __init__(
        self,
        store: AutoscalerStore,
        scheduler: Scheduler,
        join: JoinAccess,
        local_root: Path,
        *,
        latest: Callable[[], Mapping[str, TelemetryBatch]] = dict,
        forget_node: Callable[[str], None] = lambda _n: None,
        leading: Callable[[], bool] | None = None,
        no_burst: Callable[[], frozenset[str]] = frozenset,
        wake_node: Callable[[str], None] = lambda _n: None,
        interval_s: float = INTERVAL_S,
        cluster: str = "corral",
        shared: bool = False,
    ) -> None:
        super().__init__("autoscaler", interval_s, log=log)
        self.store = store
        self.scheduler = scheduler
        self.join = join
        self.local_root = local_root
        self.latest = latest
        # the people's process of a server of several: each pool's demand as the loops' process last told it
        self.remote_demand: Callable[[], Mapping[str, Sequence[int]] | None] | None = None
        # replicas share the database: a node whose agent reports to another replica is judged idle by the samples
        # that replica stored, not by "no job" alone
        self.shared = shared
        self.forget_node = forget_node
        self.wake_node = wake_node  # an agent's long poll answers now (it has news: a notice, cancels)
        self.no_burst = no_burst  # tenants whose budget says no new cloud nodes (server/services/budgets.py)
        self.leading: Callable[[], bool] = leading or (lambda: True)
        self.cluster = cluster
        self._providers: dict[str, tuple[int, Provider]] = {}
        self._io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="corral-provider")
        self._busy: set[str] = set()  # nodes whose launch or terminate is under way
        self._lock = threading.Lock()
        self._demand: dict[str, tuple[int, int]] = {}
        self.last_actions: list[Action] = []

    # ---- what the API reads ----
    def demand_by_pool(self) -> Mapping[str, tuple[int, int]]:
        """Each pool's waiting (jobs, GPUs), as of the last pass: where the passes run (this process, or the loops'
        process of this server, `remote_demand`)."""
        if self.remote_demand is None:
            return dict(self._demand)
        try:  # written by this server's own loops' process, maybe of another version during an upgrade
            return {str(k): (int(v[0]), int(v[1])) for k, v in (self.remote_demand() or {}).items()}
        except (TypeError, ValueError, IndexError, AttributeError):
            return {}

    # ---- the pass ----
    def run_pass(self) -> float | None:
        if not self.leading():
            return None
        self.run_once(datetime.now(UTC))
        return None

    def provider(self, spec: PoolSpec, version: int) -> Provider:
        held = self._providers.get(spec.name)
        if held is None or held[0] != version:
            held = (version, create_provider(spec, self.local_root))
            self._providers[spec.name] = held
        return held[1]

    def run_once(self, now: datetime) -> list[Action]:
        now_s = now.timestamp()
        pools = {p.name: p for p in self.store.list_pools() if p.spec.kind == CLOUD}  # cluster pools: clusters.py
        specs = {name: p.spec for name, p in pools.items()}
        history = self.store.list_pool_nodes()
        live = [n for n in history if n.live]
        self.scheduler.node_taints = self._taints(live, specs)
        if not pools and not live:
            self._publish({}, {})
            return []
        # observe
        inventory = {n.name: n for n in self.store.list_nodes()}
        jobs_on: dict[str, int] = {}
        for job in self.store.list_jobs(states=[JobState.RUNNING]):
            for node, _ in job.placed_parts:
                jobs_on[node] = jobs_on.get(node, 0) + 1
        for node, count in self.scheduler.staging_nodes.items():  # a job's input is staged there: not idle
            jobs_on[node] = jobs_on.get(node, 0) + count
        instances: dict[str, Any] = {}
        for name in {n.pool for n in live} & set(pools):
            try:
                for inst in self.provider(specs[name], pools[name].version).list_instances():
                    instances[inst.node_name] = inst
            except ProviderError as e:
                log.warning("pool %s: cannot list its instances: %s", name, e)
        util = self._gpu_util([n.name for n in live], now_s)
        observed = {
            n.name: Observed(
                registered=inventory[n.name].state if n.name in inventory else None,
                instance=instances[n.name].state if n.name in instances else None,
                interruption_s=instances[n.name].interruption_s if n.name in instances else None,
                jobs=jobs_on.get(n.name, 0),
                gpu_util=util.get(n.name),
            )
            for n in live
            if n.name not in self._busy
        }
        changes = compute_changes([n for n in live if n.name in observed], observed, specs, now_s)
        events: list[tuple[str, str, str, str]] = []
        current = {n.name: n for n in live}
        for ch in changes:
            n = ch.node
            self.store.update_pool_node(
                n.name,
                {
                    "state": n.state,
                    "joined_at": _dt(n.joined_s),
                    "idle_since": _dt(n.idle_since_s),
                    "ended_at": _dt(n.ended_s),
                    "notice_at": _dt(n.notice_at_s),
                    "reason": n.reason,
                },
            )
            if ch.interrupted:
                self._interrupted(n, now)
            current[n.name] = n
            if ch.event is not None:
                events.append((n.pool, n.name, ch.event[0], ch.event[1]))
            if ch.terminate:
                self._terminate(n, specs.get(n.pool), pools[n.pool].version if n.pool in pools else 0)
        live = [n for n in current.values() if n.live]
        changed = {ch.node.name: ch.node for ch in changes}
        history = [changed.get(n.name, n) for n in history]  # a launch that failed just now backs off at once
        # decide
        cycle = self.scheduler.last_cycle
        pool_specs = tuple(specs.values())
        if cycle is not None:
            demand, free, wanted = compute_demand(cycle[0], cycle[1], pool_specs)
        else:
            demand, free, wanted = (), (), frozenset()
        nodes = tuple(replace(n, jobs=jobs_on.get(n.name, 0)) for n in live)
        state = AutoscaleState(
            now_s=now_s,
            pools=pool_specs,
            nodes=nodes,
            demand=demand,
            free=free,
            backoff=compute_backoff(history, now_s),
            no_burst=self.no_burst(),
            wanted=wanted,
        )
        actions = self._decide(state)
        notes = compute_notes(state, actions)
        self._publish(
            {int(k): v for k, v in notes.items() if k.isdigit()},
            self._count_demand(state),
        )
        # act
        for action in actions:
            if isinstance(action, Launch) and action.pool in specs:
                events.append(self._launch(action, specs[action.pool], pools[action.pool].version, now))
            elif isinstance(action, Release):
                events.append(self._release(action))
        self.store.add_pool_events(events, now)
        self.last_actions = actions
        return actions

    def _decide(self, state: AutoscaleState) -> list[Action]:
        """The built-in policy over the pools without their own; each pool with a policy module decides alone over
        the demand left (its module's `decide`)."""
        custom = [p for p in state.pools if p.policy]
        plain = [p.name for p in state.pools if not p.policy]
        actions: list[Action] = []
        covered: set[str] = set()
        for spec in custom:
            scoped = state.only_pools([spec.name])
            try:
                got = load_policy(spec.policy)(scoped)
            except Exception as e:  # an admin's code: its failure is the pool's event, not the loop's end
                log.exception("pool %s: policy %s failed", spec.name, spec.policy)
                self.store.add_pool_events(
                    [(spec.name, "", "policy-error", f"{spec.policy}.decide failed: {e}")], datetime.now(UTC)
                )
                continue
            for a in got:
                if isinstance(a, Launch | Release) and a.pool == spec.name:
                    actions.append(a)
                    if isinstance(a, Launch):
                        covered.update(a.job_ids)
        if plain:
            rest = state.only_pools(plain)
            rest = replace(rest, demand=tuple(d for d in rest.demand if d.job_id not in covered))
            actions += decide(rest)
        # nodes of pools that are gone: released by the built-in rule whatever the policies said
        gone = {n.pool for n in state.nodes} - {p.name for p in state.pools}
        if gone:
            actions += [
                Release(n.pool, n.name, f"pool {n.pool} was deleted")
                for n in state.nodes
                if n.pool in gone and n.state != DRAINING and n.state != LAUNCHING
            ]
        return actions

    def _count_demand(self, state: AutoscaleState) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for d in state.demand:
            for pool in {p for p, _ in d.fits} or {STATIC_POOL}:
                jobs, gpus = out.get(pool, (0, 0))
                out[pool] = (jobs + 1, gpus + d.gpus)
        return out

    def _publish(self, notes: dict[int, tuple[str, str]], demand: dict[str, tuple[int, int]]) -> None:
        self._demand = demand
        self.scheduler.set_pool_notes(notes)

    @staticmethod
    def _taints(live: Sequence[PoolNode], specs: Mapping[str, PoolSpec]) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for n in live:
            spec = specs.get(n.pool)
            taints = set(spec.taints if spec is not None else ())
            if n.spot:
                taints.add(SPOT_TAINT)
            if taints:
                out[n.name] = tuple(sorted(taints))
        return out

    def _gpu_util(self, nodes: Sequence[str], now_s: float) -> dict[str, float]:
        """Each node's busiest GPU in its newest telemetry: the batches this replica received, and (replicas) the
        newest samples another replica stored for the nodes it has no recent batch of."""
        out: dict[str, float] = {}
        for node, batch in self.latest().items():
            values = [g.utilization_percent for g in batch.gpus if g.utilization_percent is not None]
            if values:
                out[node] = max(values)
        missing = [n for n in nodes if n not in out]
        if self.shared and missing:
            for p in self.store.latest_points(now_s - STALE_AFTER_S, missing):
                if p.metric == GPU_UTILIZATION:  # a GPU series (host series are host_*)
                    out[p.node] = max(out.get(p.node, 0.0), p.value)
        return out

    # ---- acting ----
    def _launch(self, a: Launch, spec: PoolSpec, version: int, now: datetime) -> tuple[str, str, str, str]:
        itype = spec.instance_type(a.instance_type)
        assert itype is not None
        name = compute_node_name(spec.name, itype.name)
        token, token_id = self.join.make_token(spec.join_timeout_s, f"pool {spec.name} node {name}")
        node = PoolNode(
            name=name,
            pool=spec.name,
            instance_type=itype.name,
            state=LAUNCHING,
            launched_s=now.timestamp(),
            spot=itype.spot,
            price_per_hour=itype.price_per_hour,
            gpus=itype.gpus,
        )
        self.store.add_pool_node(node, token_id, a.job_ids)
        request = LaunchRequest(
            pool=spec.name,
            node_name=name,
            instance_type=itype,
            join_url=self.join.url,
            join_token=token,
            tags=compute_tags(spec.name, name, self.cluster),
        )
        self._busy.add(name)
        self._io.submit(self._do_launch, spec, version, request)
        return (spec.name, name, "launch", f"starting {itype.describe}: {a.reason}")

    def _do_launch(self, spec: PoolSpec, version: int, request: LaunchRequest) -> None:
        try:
            provider_id = self.provider(spec, version).launch(request)
            self.store.update_pool_node(request.node_name, {"provider_id": provider_id})
        except Exception as e:
            why = f"the provider refused the launch: {e}"
            log.warning("pool %s: launch of %s failed: %s", spec.name, request.node_name, e)
            self.store.update_pool_node(
                request.node_name, {"state": FAILED, "ended_at": datetime.now(UTC), "reason": why[:2000]}
            )
            self.store.add_pool_events([(spec.name, request.node_name, "launch-failed", why)], datetime.now(UTC))
        finally:
            self._busy.discard(request.node_name)

    def _release(self, a: Release) -> tuple[str, str, str, str]:
        self.store.set_node_cordoned(a.node, True)
        self.store.update_pool_node(a.node, {"state": DRAINING, "reason": a.reason})
        return (a.pool, a.node, "release", f"draining, then releasing: {a.reason}")

    def _interrupted(self, node: PoolNode, now: datetime) -> None:
        """A spot interruption notice: no new work there; its jobs are stopped (their agent writes the notice's
        seconds to each job's CORRAL_NOTICE_FILE, then signals it, with the notice as its grace) and requeued
        keeping their place, as a preemption does; a node replaces it if demand remains."""
        self.store.set_node_cordoned(node.name, True)
        left = max((node.notice_at_s or now.timestamp()) - now.timestamp(), 0.0)
        for job in self.store.list_node_jobs(node.name):
            if job.state is JobState.RUNNING:
                self.store.request_preempt(job.id, f"spot interruption of node {node.name} ({left:.0f} s notice)", now)
        self.wake_node(node.name)

    def _terminate(self, node: PoolNode, spec: PoolSpec | None, version: int) -> None:
        """Give the machine back and cut its node off (certificates revoked, out of the inventory)."""
        self.store.revoke_node_certs(node.name, datetime.now(UTC))
        self.forget_node(node.name)
        self.store.set_node_cordoned(node.name, True)
        if spec is None:
            log.warning("node %s: its pool %s is gone; terminate its instance by hand if it runs", node.name, node.pool)
            self.store.delete_node(node.name)
            return
        self._busy.add(node.name)
        self._io.submit(self._do_terminate, node, spec, version)

    def _do_terminate(self, node: PoolNode, spec: PoolSpec, version: int) -> None:
        try:
            provider = self.provider(spec, version)
            provider.terminate(node.provider_id or f"{spec.provider}:{node.name}")
        except Exception as e:
            log.warning("pool %s: terminating %s failed: %s", spec.name, node.name, e)
            why = f"terminating its instance failed ({e}); terminate it by hand"
            self.store.add_pool_events([(spec.name, node.name, "terminate-failed", why[:2000])], datetime.now(UTC))
        finally:
            self.store.delete_node(node.name)
            self._busy.discard(node.name)

    def on_stop(self) -> None:
        """Wait for the launches and terminations under way; the `local` provider's nodes stop with the server
        (they are processes of this machine: the demo's and the tests' nodes), recorded as released."""
        self._io.shutdown(wait=True, cancel_futures=False)
        if not self.leading():
            return
        now = datetime.now(UTC)
        pools = {p.name: p for p in self.store.list_pools()}
        events = []
        for n in self.store.list_pool_nodes(live_only=True):
            pool = pools.get(n.pool)
            if pool is None or pool.spec.provider != "local":
                continue
            try:
                self.provider(pool.spec, pool.version).terminate(n.provider_id or f"local:{n.name}")
            except ProviderError as e:
                log.warning("node %s: %s", n.name, e)
            self.store.update_pool_node(n.name, {"state": "released", "ended_at": now, "reason": "the server stopped"})
            self.store.revoke_node_certs(n.name, now)
            self.store.delete_node(n.name)
            events.append((n.pool, n.name, "released", "the server stopped (local nodes stop with it)"))
        self.store.add_pool_events(events, now)


__all__ = ["Autoscaler", "JoinAccess", "compute_node_name", "load_policy"]
