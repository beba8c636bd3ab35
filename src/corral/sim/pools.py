"""Cloud pools in the job simulator (issue 19's what-if): the server's autoscaler, in simulated time.

After every cycle the autoscaler's own pure code runs over that cycle's snapshot and plan: `compute_demand` (which
waiting jobs fit no node, and which instance types would hold them) and the built-in `decide` (cheapest type that
fits, within the pool's maximum; release a node idle for the pool's idle time, never below its minimum). A Launch
is a node that joins `boot_s` later; a Release removes an idle node. Idle here is "no job": GPU utilisation is not
simulated. A node costs its type's price per hour from launch to release (`compute_spend`, as the server bills).

The pools file (JSON): `{"boot_s": 120, "pools": [POOL, ...]}` (or a bare list of pools), each POOL in the API's
PoolIn shape: name, instance_types [{name, gpus, gpu_model, price_per_hour, spot, ...}], min_nodes, max_nodes,
idle_s (provider, region, join_timeout_s, labels, taints accepted; the provider is not simulated).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from corral.autoscaler.demand import compute_demand
from corral.autoscaler.model import AutoscaleState, Launch, Release
from corral.autoscaler.policy import decide
from corral.core.errors import ValidationError
from corral.core.pools import (
    LAUNCHING,
    RELEASED,
    RUNNING,
    InstanceType,
    PoolNode,
    PoolSpec,
    check_pool,
    compute_spend,
    parse_instance_type,
)
from corral.core.resources import NodeInfo
from corral.scheduler.plan import Plan, Snapshot

DEFAULT_BOOT_S = 120.0
MAX_BOOT_S = 86_400.0
_POOL_KEYS = frozenset(f.name for f in fields(PoolSpec)) - {"policy", "settings", "paused", "kind"}
_TYPE_KEYS = frozenset(f.name for f in fields(InstanceType))


@dataclass(frozen=True, slots=True)
class PoolsConfig:
    """The cloud pools of a what-if run, and how long a launched node takes to join (seconds)."""

    pools: tuple[PoolSpec, ...]
    boot_s: float = DEFAULT_BOOT_S

    @property
    def max_gpus_per_node(self) -> int:
        return max((t.gpus for p in self.pools for t in p.instance_types), default=0)

    def max_pool_milli(self) -> dict[str, int]:
        """GPUs per model (milli) if every pool ran its maximum of its largest type of that model."""
        out: dict[str, int] = {}
        for p in self.pools:
            per_model: dict[str, int] = {}
            for t in p.instance_types:
                if t.gpus:
                    per_model[t.gpu_model] = max(per_model.get(t.gpu_model, 0), t.gpus)
            for model, gpus in per_model.items():
                out[model] = out.get(model, 0) + gpus * p.max_nodes * 1000
        return out


def _type(d: Any, where: str) -> InstanceType:
    if not isinstance(d, dict):
        raise ValidationError(where, "expected an object {name, gpus, gpu_model, price_per_hour, spot}")
    unknown = sorted(set(d) - _TYPE_KEYS)
    if unknown:
        raise ValidationError(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_TYPE_KEYS))})")
    try:
        t = InstanceType(**d)
        gpus, model = int(t.gpus), str(t.gpu_model)
        if gpus and not t.gpu_memory_mib:  # the model's memory from its name or a known model's, as the API does
            parsed = parse_instance_type(f"{t.name}={gpus}x{model or 'unknown'}", where)
            t = replace(t, gpu_model=parsed.gpu_model, gpu_memory_mib=parsed.gpu_memory_mib)
        t = replace(t, gpus=gpus, price_per_hour=float(t.price_per_hour), spot=bool(t.spot))
    except TypeError as e:
        raise ValidationError(where, str(e)) from None
    except ValueError as e:
        raise ValidationError(where, str(e)) from None
    return t


def _pool(d: Any, where: str) -> PoolSpec:
    if not isinstance(d, dict):
        raise ValidationError(where, "expected an object {name, instance_types, min_nodes, max_nodes, idle_s}")
    if "policy" in d or "settings" in d:
        key = "policy" if "policy" in d else "settings"
        raise ValidationError(f"{where}.{key}", "not simulated (the simulator runs the built-in policy)")
    unknown = sorted(set(d) - _POOL_KEYS)
    if unknown:
        raise ValidationError(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_POOL_KEYS))})")
    raw_types = d.get("instance_types")
    if not isinstance(raw_types, list):
        raise ValidationError(f"{where}.instance_types", "expected a list of instance types")
    types = tuple(_type(t, f"{where}.instance_types[{i}]") for i, t in enumerate(raw_types))
    rest = {k: v for k, v in d.items() if k not in ("instance_types", "taints", "provider")}
    try:
        spec = PoolSpec(
            provider="local", instance_types=types, taints=tuple(d.get("taints", ())), **rest
        )  # the provider is not simulated
        spec = replace(spec, min_nodes=int(spec.min_nodes), max_nodes=int(spec.max_nodes), idle_s=float(spec.idle_s))
    except (TypeError, ValueError) as e:
        raise ValidationError(where, str(e)) from None
    try:
        return check_pool(spec)
    except ValidationError as e:
        raise ValidationError(f"{where}.{e.field}", e.problem) from None


def parse_pools(data: Any, source: str = "pools") -> PoolsConfig:
    """The pools file's content (parsed JSON); errors name `source` and the field (`burst.json: pools[0].max_nodes`)."""
    boot_s: Any = DEFAULT_BOOT_S
    raw = data
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"boot_s", "pools"})
        if unknown:
            raise ValidationError(f"{source}: {unknown[0]}", "unknown field (known: boot_s, pools)")
        boot_s = data.get("boot_s", DEFAULT_BOOT_S)
        raw = data.get("pools")
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{source}: pools", "expected a non-empty list of pools")
    if isinstance(boot_s, bool) or not isinstance(boot_s, int | float) or not (0 <= boot_s <= MAX_BOOT_S):
        raise ValidationError(f"{source}: boot_s", f"must be a number of seconds in 0..{MAX_BOOT_S:g}")
    try:
        pools = tuple(_pool(p, f"pools[{i}]") for i, p in enumerate(raw))
    except ValidationError as e:
        raise ValidationError(f"{source}: {e.field}", e.problem) from None
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ValidationError(f"{source}: pools.name", "each pool is named once")
    return PoolsConfig(pools, float(boot_s))


def load_pools(path: Path) -> PoolsConfig:
    """Read and check a pools file (JSON)."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValidationError("--pools", f"{path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValidationError("--pools", f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    return parse_pools(data, str(path))


@dataclass(slots=True)
class PoolSim:
    """The pools' nodes over a run: `nodes` holds every node started (released ones too, for their cost)."""

    cfg: PoolsConfig
    nodes: dict[str, PoolNode] = field(default_factory=dict)
    serial: int = 0

    def live(self) -> list[PoolNode]:
        return [n for n in self.nodes.values() if n.live]

    def launching(self) -> bool:
        return any(n.state == LAUNCHING for n in self.nodes.values())

    def step(
        self, now: float, cycle: tuple[Snapshot, Plan] | None, jobs_on: Mapping[str, int]
    ) -> tuple[list[PoolNode], list[PoolNode], list[PoolNode]]:
        """One autoscaler pass after a cycle (`cycle`: its snapshot before the plan, and the plan; None: no job
        waited). Returns (launched, released, just idle): the caller joins the launched `boot_s` later, removes
        the released, and looks again at the idle ones when their idle time is up."""
        idle: list[PoolNode] = []
        for n in self.live():
            if n.state != RUNNING:
                continue
            jobs = jobs_on.get(n.name, 0)
            since = n.idle_since_s if jobs == 0 else None
            if jobs == 0 and since is None:
                since = now
            updated = replace(n, jobs=jobs, idle_since_s=since)
            if updated.idle_since_s is not None and n.idle_since_s is None:
                idle.append(updated)
            self.nodes[n.name] = updated
        pools = self.cfg.pools
        if cycle is not None:
            demand, free, wanted = compute_demand(cycle[0], cycle[1], pools)
        else:
            demand, free, wanted = (), (), frozenset[str]()
        state = AutoscaleState(now, pools, tuple(self.live()), demand, free, wanted=wanted)
        launched: list[PoolNode] = []
        released: list[PoolNode] = []
        for action in decide(state):  # the server's own policy
            if isinstance(action, Launch):
                spec = next(p for p in pools if p.name == action.pool)
                itype = spec.instance_type(action.instance_type)
                assert itype is not None, action
                self.serial += 1
                node = PoolNode(
                    f"{spec.name}-{self.serial}",
                    spec.name,
                    itype.name,
                    LAUNCHING,
                    now,
                    spot=itype.spot,
                    price_per_hour=itype.price_per_hour,
                    gpus=itype.gpus,
                )
                self.nodes[node.name] = node
                launched.append(node)
            elif isinstance(action, Release):
                node = self.nodes[action.node]
                assert node.jobs == 0, f"the policy released {node.name}, which runs a job"
                self.nodes[node.name] = replace(node, state=RELEASED, ended_s=now, reason=action.reason)
                released.append(node)
        return launched, released, idle

    def join(self, name: str, now: float) -> NodeInfo:
        """The launched node `name` joins now (idle); what the scheduler sees of it."""
        node = self.nodes[name]
        self.nodes[name] = replace(node, state=RUNNING, joined_s=now, idle_since_s=now)
        spec = next(p for p in self.cfg.pools if p.name == node.pool)
        itype = spec.instance_type(node.instance_type)
        assert itype is not None
        return itype.node_info(name, spec.node_labels(), spec.taints)

    def end(self, now: float) -> None:
        """The run is over: nodes still live are released now (their cost counts until then)."""
        for n in self.live():
            self.nodes[n.name] = replace(n, state=RELEASED, ended_s=now, reason="end of the simulation")


def compute_pool_report(
    nodes: tuple[PoolNode, ...], start_s: float, end_s: float, unscheduled: list[str]
) -> dict[str, object]:
    """The pools' figures of a run (keys are part of the CLI's JSON): cost (price x hours from launch to release),
    node- and GPU-hours, the GPUs held on average over [start_s, end_s] and at most, launches, and the jobs that
    never ran."""
    span = max(end_s - start_s, 1e-9)
    gpu_s = sum(n.gpus * ((n.ended_s if n.ended_s is not None else end_s) - n.launched_s) for n in nodes)
    node_s = sum((n.ended_s if n.ended_s is not None else end_s) - n.launched_s for n in nodes)
    changes: dict[float, int] = {}
    for n in nodes:
        changes[n.launched_s] = changes.get(n.launched_s, 0) + n.gpus
        end = n.ended_s if n.ended_s is not None else end_s
        changes[end] = changes.get(end, 0) - n.gpus
    held = peak = 0
    for t in sorted(changes):
        held += changes[t]
        peak = max(peak, held)
    by_pool: dict[str, dict[str, float]] = {}
    for n in nodes:
        p = by_pool.setdefault(n.pool, {"nodes": 0, "cost": 0.0})
        p["nodes"] += 1
        p["cost"] += compute_spend([n], end_s)
    return {
        "cost": round(compute_spend(nodes, end_s), 4),
        "node_hours": round(node_s / 3600, 4),
        "gpu_hours": round(gpu_s / 3600, 4),
        "avg_gpus": round(gpu_s / span, 3) if math.isfinite(span) else 0.0,
        "peak_gpus": peak,
        "launches": len(nodes),
        "by_pool": {k: {"nodes": int(v["nodes"]), "cost": round(v["cost"], 4)} for k, v in sorted(by_pool.items())},
        "unscheduled": len(unscheduled),
        "unscheduled_jobs": unscheduled[:50],
    }


__all__ = ["DEFAULT_BOOT_S", "PoolSim", "PoolsConfig", "compute_pool_report", "load_pools", "parse_pools"]
