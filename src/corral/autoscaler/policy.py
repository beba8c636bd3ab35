"""The built-in autoscaling policy (pure): `decide(state) -> actions`, and the one sentence each waiting job gets.

Up: pending jobs, in queue order, first fill the nodes already starting (and those this pass starts); a job that
fits none of them starts the cheapest instance type it fits (spot types first: only jobs that allow spot fit
them, by the spot taint), within the pool's maximum, skipping types in back-off after failed launches and
tenants whose budget says no-burst. A gang starts all its nodes at once, or none.
Down: a running node with no job whose GPUs were quiet for the pool's idle time, and that no waiting job fits, is
released, never below the pool's minimum; a pool below its minimum starts its cheapest on-demand type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corral.autoscaler.model import (
    LAUNCHING,
    RUNNING,
    Action,
    AutoscaleState,
    Demand,
    Launch,
    PoolNode,
    Release,
)
from corral.core.pools import InstanceType, PoolSpec
from corral.core.resources import NodeState
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster


@dataclass
class _Starting:
    """The nodes starting (launched before, or by this pass) as one engine: demand fills them first."""

    states: list[NodeState]
    owner: dict[str, tuple[str, str]]  # virtual node name -> (pool, type)
    launches: dict[str, int]  # virtual node name -> index in the actions (this pass's launches)
    engine: Cluster

    @classmethod
    def of(cls, state: AutoscaleState) -> _Starting:
        states: list[NodeState] = []
        owner: dict[str, tuple[str, str]] = {}
        for node in state.nodes:
            spec = state.pool(node.pool)
            itype = spec.instance_type(node.instance_type) if spec is not None else None
            if node.state != LAUNCHING or spec is None or itype is None:
                continue
            states.append(NodeState(itype.node_info(node.name, spec.node_labels(), spec.taints)))
            owner[node.name] = (node.pool, itype.name)
        return cls(states, owner, {}, Cluster.from_states(states))

    def add(self, spec: PoolSpec, itype: InstanceType, name: str, action_index: int) -> None:
        self.states = [*self.engine.node_states(), NodeState(itype.node_info(name, spec.node_labels(), spec.taints))]
        self.owner[name] = (spec.name, itype.name)
        self.launches[name] = action_index
        self.engine = Cluster.from_states(self.states)

    def place(self, d: Demand) -> list[str] | None:
        got = self.engine.place(d.request) if d.parts == 1 else self.engine.place_gang(d.request, d.parts)
        if isinstance(got, Unschedulable):
            return None
        return [p.node for p in (got if isinstance(got, list) else [got])]


def _live_count(state: AutoscaleState, pool: str) -> int:
    """Nodes that count against the pool's maximum: live ones, but those their provider is taking back."""
    return len([n for n in state.live_nodes(pool) if n.notice_at_s is None])


def decide(state: AutoscaleState) -> list[Action]:
    """The built-in policy (see the module's docstring)."""
    actions: list[Action] = []
    starting = _Starting.of(state)
    count = {p.name: _live_count(state, p.name) for p in state.pools}
    serial = 0
    for d in state.demand:
        if d.tenant in state.no_burst:
            continue
        placed = starting.place(d)
        if placed is not None:
            for node in (n for n in placed if n in starting.launches):
                i = starting.launches[node]
                launch = actions[i]
                assert isinstance(launch, Launch)
                if d.job_id not in launch.job_ids:
                    actions[i] = Launch(launch.pool, launch.instance_type, launch.reason, (*launch.job_ids, d.job_id))
            continue
        choice = choose_type(state, d, count)
        if choice is None:
            continue
        spec, itype = choice
        for _ in range(d.parts):
            serial += 1
            name = f"{spec.name}-new-{serial}"
            reason = f"job {d.job_id} ({_asks(d)}) fits no node; {itype.describe} is the cheapest type that fits it"
            actions.append(Launch(spec.name, itype.name, reason, (d.job_id,)))
            starting.add(spec, itype, name, len(actions) - 1)
            count[spec.name] += 1
        starting.place(d)
    for spec in state.pools:
        while count[spec.name] < spec.min_nodes and not spec.paused:
            itype = min(spec.instance_types, key=lambda t: (t.spot, t.price_per_hour, t.name))
            actions.append(Launch(spec.name, itype.name, f"pool {spec.name} keeps at least {spec.min_nodes} node(s)"))
            count[spec.name] += 1
    actions += compute_releases(state, count)
    return actions


def choose_type(state: AutoscaleState, d: Demand, count: Mapping[str, int]) -> tuple[PoolSpec, InstanceType] | None:
    """The cheapest type the job fits (spot first), in a pool with room for all its parts, not in back-off."""
    options: list[tuple[bool, float, str, PoolSpec, InstanceType]] = []
    for pool_name, type_name in d.fits:
        spec = state.pool(pool_name)
        itype = spec.instance_type(type_name) if spec is not None else None
        if spec is None or itype is None or spec.paused:
            continue
        if count.get(pool_name, 0) + d.parts > spec.max_nodes:
            continue
        if state.backoff.get((pool_name, type_name), 0.0) > state.now_s:
            continue
        options.append((not itype.spot, itype.price_per_hour, f"{pool_name}/{type_name}", spec, itype))
    if not options:
        return None
    best = min(options, key=lambda o: o[:3])
    return best[3], best[4]


def compute_releases(state: AutoscaleState, count: Mapping[str, int]) -> list[Release]:
    """Running nodes with no job, idle (no job, GPUs quiet) for their pool's idle time, down to its minimum; all
    nodes of a pool that is gone, and the idle ones beyond a lowered maximum."""
    out: list[Release] = []
    left = dict(count)
    for node in sorted(state.nodes, key=lambda n: (n.idle_since_s or 0.0, n.name)):
        if node.state != RUNNING:
            continue
        spec = state.pool(node.pool)
        if spec is None:
            out.append(Release(node.pool, node.name, f"pool {node.pool} was deleted"))
            continue
        if node.jobs or node.idle_since_s is None or node.name in state.wanted:
            continue
        idle = state.now_s - node.idle_since_s
        over_max = left.get(spec.name, 0) > spec.max_nodes
        if (idle >= spec.idle_s or over_max) and left.get(spec.name, 0) > spec.min_nodes:
            why = (
                f"pool {spec.name} is above its maximum of {spec.max_nodes}"
                if over_max and idle < spec.idle_s
                else f"idle for {idle:.0f} s (the pool releases a node idle for {spec.idle_s:g} s)"
            )
            out.append(Release(spec.name, node.name, why))
            left[spec.name] = left.get(spec.name, 0) - 1
    return out


def _asks(d: Demand) -> str:
    r = d.request
    what = f"{r.gpus} GPU(s)" if r.gpus else "no GPU"
    if r.gpu_models:
        what += f" of {'|'.join(r.gpu_models)}"
    return what + (f" on each of {d.parts} nodes" if d.parts > 1 else "")


# ---- why each job waits, as users read it ------------------------------------------------------
def compute_notes(state: AutoscaleState, actions: Sequence[Action]) -> dict[str, tuple[str, str]]:
    """job id -> (code, one sentence) for each job of the demand: what the pools are doing about it."""
    notes: dict[str, tuple[str, str]] = {}
    launched_for: dict[str, list[Launch]] = {}
    for a in actions:
        if isinstance(a, Launch):
            for j in a.job_ids:
                launched_for.setdefault(j, []).append(a)
    starting: dict[str, list[PoolNode]] = {}
    new: dict[str, int] = {}  # nodes this pass starts, per pool: they count against its maximum too
    for a in actions:
        if isinstance(a, Launch):
            new[a.pool] = new.get(a.pool, 0) + 1
    for n in state.nodes:
        if n.state == LAUNCHING:
            starting.setdefault(n.pool, []).append(n)
    for d in state.demand:
        notes[d.job_id] = _note(state, d, launched_for.get(d.job_id, []), starting, new)
    return notes


def _note(
    state: AutoscaleState,
    d: Demand,
    launches: list[Launch],
    starting: Mapping[str, list[PoolNode]],
    new: Mapping[str, int],
) -> tuple[str, str]:
    if launches:
        a = launches[0]
        spec = state.pool(a.pool)
        itype = spec.instance_type(a.instance_type) if spec is not None else None
        what = itype.describe if itype is not None else a.instance_type
        return "scale-up", f"waiting for a new node: pool {a.pool} is starting {len(launches)} x {what} for it"
    if not d.fits:
        largest = [f"{p.name}: {t.describe}" for p in state.pools if (t := p.largest) is not None]
        where = (
            f" (largest instance type per pool: {'; '.join(largest)})" if largest else " (no cloud pool is declared)"
        )
        return "no-instance-type", f"no node and no instance type of any cloud pool fits it ({_asks(d)}){where}"
    if d.tenant in state.no_burst:
        return (
            "budget",
            f"its tenant {d.tenant}'s budget allows no new cloud nodes (no-burst); it waits for a free node",
        )
    pools = sorted({p for p, _ in d.fits})
    for pool in pools:
        if starting.get(pool):
            nodes = ", ".join(n.name for n in starting[pool][:3])
            return "scale-up", f"waiting for pool {pool}'s node(s) now starting ({nodes}) or a free node"
    why: list[str] = []
    for pool in pools:
        spec = state.pool(pool)
        if spec is None:
            continue
        if spec.paused:
            why.append(f"pool {pool} is paused")
        elif _live_count(state, pool) + new.get(pool, 0) + d.parts > spec.max_nodes:
            why.append(f"pool {pool} is at its maximum of {spec.max_nodes} node(s)")
        else:
            off = [t for p, t in d.fits if p == pool and state.backoff.get((p, t), 0.0) > state.now_s]
            if off:
                wait = max(state.backoff[(pool, t)] for t in off) - state.now_s
                why.append(f"launches of {', '.join(off)} in pool {pool} failed; retrying in {wait:.0f} s")
            else:
                why.append(f"pool {pool}'s policy started no node for it")
    return "capacity", "no free node fits it and " + "; ".join(why or ["no pool can start one"])


__all__ = ["choose_type", "compute_notes", "compute_releases", "decide"]
