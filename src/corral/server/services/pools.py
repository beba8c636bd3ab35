"""Pool use-cases: declare, change and delete cloud pools (admins), and what `corral pools` shows (everyone: no
provider settings, events or job ids for non-admins, since they name other tenants' work and the cloud account)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from corral.api.pools import InstanceTypeIn, InstanceTypeOut, PoolEventOut, PoolIn, PoolNodeOut, PoolOut, PoolPatch
from corral.cloud.base import ProviderError
from corral.cloud.registry import check_provider_settings
from corral.clusters.registry import check_cluster_settings
from corral.core.errors import NotFoundError, ValidationError
from corral.core.pools import (
    CLUSTER_KINDS,
    FAILED,
    POOL_LABEL,
    STATIC_POOL,
    InstanceType,
    PoolNode,
    PoolSpec,
    check_pool,
    check_pool_name,
    compute_model_memory,
    compute_spend,
    pool_to_dict,
)
from corral.core.states import JobState
from corral.core.tenancy import Action
from corral.server.auth import Principal
from corral.server.services.audit import record_audit
from corral.store.protocols import AuditStore, JobStore, NodeStore, PoolStore
from corral.store.records import Node, Pool


class PoolsStore(PoolStore, NodeStore, JobStore, AuditStore, Protocol):
    """What the pool use-cases read and write."""


class DemandView(Protocol):
    """The autoscaler's last view of the pending demand: pool -> (jobs, GPUs) a new node of it would serve."""

    def demand_by_pool(self) -> Mapping[str, tuple[int, int]]: ...


def _type(t: InstanceTypeIn) -> InstanceType:
    model, memory = t.gpu_model, t.gpu_memory_mib
    if t.gpus and not memory:  # the model's memory from its name (A100-80GB) or a known model's (A100 -> A100-80GB)
        model, memory = compute_model_memory(t.gpu_model or "unknown")
    return InstanceType(
        name=t.name,
        gpus=t.gpus,
        gpu_model=model if t.gpus else "",
        gpu_memory_mib=memory if t.gpus else 0,
        cpus=t.cpus,
        memory_gib=t.memory_gib,
        price_per_hour=t.price_per_hour,
        spot=t.spot,
    )


def _check(spec: PoolSpec, local_root: Path) -> PoolSpec:
    check_pool(spec)
    if spec.kind in CLUSTER_KINDS:  # an existing cluster: its backend's settings
        return replace(spec, provider=spec.kind, settings=check_cluster_settings(spec.kind, spec.settings))
    if spec.policy:
        try:
            found = importlib.util.find_spec(spec.policy)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ValidationError("policy", f"no module {spec.policy} on the server's Python path")
    try:
        check_provider_settings(spec, local_root)
    except ProviderError as e:
        raise ValidationError("settings", str(e)) from e
    return spec


def create_pool(store: PoolsStore, caller: Principal, body: PoolIn, local_root: Path) -> Pool:
    caller.require(Action.MANAGE_CLUSTER)
    check_pool_name(body.name)
    fields = body.model_dump(exclude={"instance_types", "taints"})
    spec = _check(
        PoolSpec(**fields, instance_types=tuple(_type(t) for t in body.instance_types), taints=tuple(body.taints)),
        local_root,
    )
    who = caller.user.name if caller.user else f"token:{caller.token.name}"
    pool = store.create_pool(spec, who, datetime.now(UTC))
    record_audit(store, caller, "pool.create", spec.name, f"{spec.provider}, {len(spec.instance_types)} type(s)")
    return pool


def update_pool(store: PoolsStore, caller: Principal, name: str, patch: PoolPatch, local_root: Path) -> Pool:
    caller.require(Action.MANAGE_CLUSTER)
    pool = store.get_pool(name)
    if pool is None:
        raise NotFoundError("pool", name)
    changes: dict[str, Any] = {k: v for k, v in patch.model_dump(exclude_unset=True).items() if v is not None}
    if "instance_types" in changes:
        changes["instance_types"] = tuple(_type(t) for t in patch.instance_types or ())
    if "taints" in changes:
        changes["taints"] = tuple(changes["taints"])
    spec = _check(replace(pool.spec, **changes), local_root)
    updated = store.update_pool(spec, datetime.now(UTC), expected_version=pool.version)
    if updated is None:
        raise NotFoundError("pool", name)
    record_audit(store, caller, "pool.update", name, ", ".join(sorted(changes)))
    return updated


def delete_pool(store: PoolsStore, caller: Principal, name: str) -> None:
    """The pool goes; the autoscaler drains and releases its nodes (their jobs end first)."""
    caller.require(Action.MANAGE_CLUSTER)
    if not store.delete_pool(name):
        raise NotFoundError("pool", name)
    store.add_pool_events(
        [(name, "", "deleted", "pool deleted: its nodes are drained and released")], datetime.now(UTC)
    )
    record_audit(store, caller, "pool.delete", name)


def interrupt_node(store: PoolsStore, caller: Principal, pool: str, node: str, seconds: float, provider: Any) -> None:
    """Play a spot interruption notice on a `local` pool's node (admins; the demo's and the tests' way to see what
    a cloud's notice does). `provider`: that pool's provider."""
    caller.require(Action.MANAGE_CLUSTER)
    p = store.get_pool(pool)
    if p is None:
        raise NotFoundError("pool", pool)
    if p.spec.provider != "local":
        raise ValidationError(
            "pool", f"only a local pool's nodes can be interrupted by hand ({pool} is {p.spec.provider})"
        )
    got = store.get_pool_node(node)
    if got is None or got[0].pool != pool or not got[0].live:
        raise NotFoundError("pool node", node)
    try:
        provider.interrupt(node, seconds)
    except ProviderError as e:
        raise ValidationError("node", str(e)) from e
    record_audit(store, caller, "pool.interrupt", f"{pool}/{node}", f"{seconds:g} s notice")


# ---- what `corral pools` shows ---------------------------------------------------------------------
def _month_start(now: datetime) -> float:
    return datetime(now.year, now.month, 1, tzinfo=UTC).timestamp()


def _at(s: float | None) -> datetime | None:
    return datetime.fromtimestamp(s, UTC) if s is not None else None


def _type_out(t: InstanceType) -> InstanceTypeOut:
    return InstanceTypeOut(**asdict(t))


def _node_out(
    n: PoolNode, inventory: Mapping[str, Node], jobs: Mapping[str, int], spec: PoolSpec | None
) -> PoolNodeOut:
    node = inventory.get(n.name)
    itype = spec.instance_type(n.instance_type) if spec is not None else None
    return PoolNodeOut(
        name=n.name,
        instance_type=n.instance_type,
        state=n.state,
        spot=n.spot,
        price_per_hour=n.price_per_hour,
        launched_at=_at(n.launched_s) or datetime.now(UTC),
        joined_at=_at(n.joined_s),
        idle_since=_at(n.idle_since_s),
        ended_at=_at(n.ended_s),
        reason=n.reason,
        jobs=jobs.get(n.name, 0),
        gpus=len(node.gpus) if node is not None else (itype.gpus if itype is not None else 0),
        node_state=node.state if node is not None else None,
    )


def _cluster_node_out(node: Node, jobs: Mapping[str, int]) -> PoolNodeOut:
    return PoolNodeOut(
        name=node.name,
        instance_type=node.hostname,  # the cluster's own name for it
        state="running" if node.state == "READY" else "released",
        spot=False,
        price_per_hour=0.0,
        launched_at=node.registered_at,
        joined_at=node.registered_at,
        jobs=jobs.get(node.name, 0),
        gpus=len(node.gpus),
        node_state=node.state,
    )


def node_pool(node: Node) -> str:
    return node.labels.get(POOL_LABEL, STATIC_POOL)


def list_pools(
    store: PoolsStore, caller: Principal, demand: DemandView | None, name: str | None = None, events: bool = False
) -> list[PoolOut]:
    """Every pool (the static one first), or only `name`. Admins also get settings and (with `events`) events."""
    now = datetime.now(UTC)
    admin = caller.is_admin
    pools: Sequence[Pool] = store.list_pools()
    if name is not None:
        pools = [p for p in pools if p.name == name]
        if not pools and name != STATIC_POOL:
            raise NotFoundError("pool", name)
    inventory = {n.name: n for n in store.list_nodes()}
    jobs_on: dict[str, int] = {}
    for job in store.list_jobs(states=[JobState.RUNNING]):
        for node, _ in job.placed_parts:
            jobs_on[node] = jobs_on.get(node, 0) + 1
    wanted = demand.demand_by_pool() if demand is not None else {}
    out: list[PoolOut] = []
    if name in (None, STATIC_POOL):
        static = [n for n in inventory.values() if node_pool(n) == STATIC_POOL]
        out.append(
            PoolOut(
                name=STATIC_POOL,
                kind="static",
                provider="",
                node_count=len(static),
                gpus=sum(len(n.gpus) for n in static),
                pending_jobs=wanted.get(STATIC_POOL, (0, 0))[0],
                pending_gpus=wanted.get(STATIC_POOL, (0, 0))[1],
            )
        )
    history = store.list_pool_nodes()
    month = _month_start(now)
    for pool in pools:
        spec = pool.spec
        mine = [n for n in history if n.pool == spec.name]
        live = [n for n in mine if n.live]
        nodes = [_node_out(n, inventory, jobs_on, spec) for n in live]
        if spec.kind in CLUSTER_KINDS:  # an existing cluster's nodes, as last read from it
            nodes = [_cluster_node_out(n, jobs_on) for n in inventory.values() if node_pool(n) == spec.name]
        out.append(
            PoolOut(
                **{k: v for k, v in pool_to_dict(spec).items() if k != "settings"},
                settings=dict(spec.settings) if admin else None,
                nodes=nodes,
                node_count=len(nodes),
                gpus=sum(n.gpus for n in nodes),
                pending_jobs=wanted.get(spec.name, (0, 0))[0],
                pending_gpus=wanted.get(spec.name, (0, 0))[1],
                spend_month=round(compute_spend(mine, now.timestamp(), since_s=month), 4),
                spend_total=round(compute_spend(mine, now.timestamp()), 4),
                failed_launches=sum(n.state == FAILED for n in mine),
                events=[
                    PoolEventOut(at=e.at, node=e.node, kind=e.kind, message=e.message)
                    for e in store.list_pool_events(spec.name, limit=100)
                ]
                if events and admin
                else None,
                created_at=pool.created_at,
                version=pool.version,
            )
        )
    return out


__all__ = ["PoolsStore", "create_pool", "delete_pool", "list_pools", "node_pool", "update_pool"]
