"""An indexed, mutable cluster for the simulator and the benchmark: the same filters and policies as
`compute_placement`, but over classes of equivalent nodes instead of every node (pure, no I/O).

Why it is fast:
- Nodes with the same hardware (a computed node class, as in Nomad) and the same load are one class;
  a request is checked and scored once per class, and the verdict is memoised on the class until one of
  its nodes changes (then that node moves to another class, and the old verdicts stay true).
- Classes are indexed by hardware and by count of fully free GPUs, so a request for k whole GPUs looks
  only at classes with k free, and a request for a model looks only at hardware that has it.
Ties between equally good nodes go to the node first in an order of all nodes shuffled once with the
caller's seeded `random.Random` (the FGD artifact's scheduler: lexicographically first node name, names
prefixed with a seeded permutation), so equal choices keep landing on the same nodes; with
`seeded_order=False` they are drawn uniformly each time (kube-scheduler's selectHost). Same seed, same
decisions either way.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI, NodeInfo, NodeState, Placement
from corral.scheduler.cycle import Unschedulable, compute_gpu_choices, make_placement, score_choices
from corral.scheduler.filters import available_positions, check_fit
from corral.scheduler.framework import DEFAULT_CONTEXT, Explanation, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy
from corral.scheduler.topology import has_topology
from corral.scheduler.workload import compute_gpu_supply

_TIE = 1e-9


@dataclass(slots=True)
class _Hardware:
    """A computed node class: nodes that are interchangeable when equally loaded."""

    hw_id: int
    info: NodeInfo  # the first node's info stands for all
    symmetric: bool  # GPUs interchangeable: load tuples are kept sorted
    gpu_models: tuple[str, ...]


@dataclass(slots=True, eq=False)
class _Class:
    key: tuple[object, ...]
    hw: _Hardware
    state: NodeState
    bucket: tuple[int, int]  # (fully free GPUs, largest free share on a used GPU // 100)
    members: dict[int, None] = field(default_factory=dict)
    ranked: list[tuple[int, int]] = field(default_factory=list)  # heap of (rank, node); stale entries skipped
    # Keyed by the request's interned number (hashing a request dataclass per class is the hot spot).
    verdicts: dict[int, tuple[float, tuple[int, ...]] | None] = field(default_factory=dict)
    rejections: dict[int, str] = field(default_factory=dict)


def _hardware_key(info: NodeInfo) -> tuple[object, ...]:
    gpus = tuple(
        (g.model, g.memory_mib, g.healthy, g.numa_node, g.pcie_switch, g.nvlink_peers, g.ecc_enabled, g.mig_profile)
        for g in info.gpus
    )
    return (gpus, info.cpu_milli, info.memory_mib, info.labels, info.taints)


class Cluster:
    """Nodes, their load, and one policy; `place()` decides and applies one request at a time."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: PlacementPolicy | str = DEFAULT_POLICY,
        ctx: ScoreContext = DEFAULT_CONTEXT,
        rng: random.Random | None = None,
        seeded_order: bool = True,
    ) -> None:
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.rng = rng
        self._randomized = bool(getattr(self.policy, "randomized", False))
        self.infos = list(nodes)
        self._ranks: list[int] | None = None
        if rng is not None and seeded_order and not self._randomized:
            self._ranks = list(range(len(self.infos)))
            rng.shuffle(self._ranks)
        self.ctx = ctx if ctx.gpu_supply is not None else replace(ctx, gpu_supply=compute_gpu_supply(self.infos))
        names = [n.name for n in self.infos]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self._used = [[0] * len(n.gpus) for n in self.infos]
        self._cpu_used = [0] * len(self.infos)
        self._mem_used = [0] * len(self.infos)
        hardware: dict[tuple[object, ...], _Hardware] = {}
        self._hw_of: list[_Hardware] = []
        for info in self.infos:
            key = _hardware_key(info)
            if key not in hardware:
                models = tuple(sorted({g.model for g in info.gpus}))
                hardware[key] = _Hardware(len(hardware), info, not has_topology(info), models)
            self._hw_of.append(hardware[key])
        self.hardware = list(hardware.values())
        self._classes: dict[tuple[object, ...], _Class] = {}
        # index[hw_id][(fully free GPUs, largest free share on a used GPU // 100)] -> classes
        self._index: list[dict[tuple[int, int], dict[_Class, None]]] = [{} for _ in self.hardware]
        self._hw_for_models: dict[tuple[str, ...], list[_Hardware]] = {}
        self._request_ids: dict[ResourceRequest, int] = {}
        self._node_class: list[_Class] = []
        for i in range(len(self.infos)):
            self._node_class.append(self._enter(i))

    # -- classes --------------------------------------------------------------------------------
    def _state_key(self, i: int) -> tuple[object, ...]:
        hw = self._hw_of[i]
        used = tuple(sorted(self._used[i], reverse=True)) if hw.symmetric else tuple(self._used[i])
        return (hw.hw_id, used, self._cpu_used[i], self._mem_used[i])

    def _enter(self, i: int) -> _Class:
        key = self._state_key(i)
        cls = self._classes.get(key)
        if cls is None:
            hw = self._hw_of[i]
            used = key[1]
            assert isinstance(used, tuple)
            state = NodeState(hw.info, used, self._cpu_used[i], self._mem_used[i])
            healthy = [u for g, u in zip(hw.info.gpus, used) if g.healthy]
            share = max((FULL_GPU_MILLI - u for u in healthy if 0 < u < FULL_GPU_MILLI), default=0)
            bucket = (sum(1 for u in healthy if u == 0), share // 100)
            cls = _Class(key, hw, state, bucket)
            self._classes[key] = cls
            self._index[hw.hw_id].setdefault(bucket, {})[cls] = None
        cls.members[i] = None
        if self._ranks is not None:
            heapq.heappush(cls.ranked, (self._ranks[i], i))
        return cls

    def _first_ranked(self, cls: _Class) -> int:
        """The member that comes first in the seeded node order (lazy deletion of departed members)."""
        while cls.ranked[0][1] not in cls.members:
            heapq.heappop(cls.ranked)
        return cls.ranked[0][1]

    def _leave(self, i: int) -> None:
        cls = self._node_class[i]
        del cls.members[i]
        if not cls.members:
            del self._classes[cls.key]
            bucket = self._index[cls.hw.hw_id][cls.bucket]
            del bucket[cls]
            if not bucket:
                del self._index[cls.hw.hw_id][cls.bucket]

    def _hardware_for(self, request: ResourceRequest) -> list[_Hardware]:
        hws = self._hw_for_models.get(request.gpu_models)
        if hws is None:
            hws = [h for h in self.hardware if any(model_matches(m, request.gpu_models) for m in h.gpu_models)]
            self._hw_for_models[request.gpu_models] = hws
        return hws

    def _candidates(self, request: ResourceRequest) -> Iterator[_Class]:
        """Classes that could fit, narrowed by the index (exact checks follow)."""
        if request.gpus == 0:
            yield from self._classes.values()
            return
        whole = request.gpu_milli >= FULL_GPU_MILLI
        need_free = request.gpus if whole else 1
        need_share = FULL_GPU_MILLI if whole else request.gpu_milli // 100
        for hw in self._hardware_for(request):
            for (free, share), bucket in self._index[hw.hw_id].items():
                if free >= need_free or share >= need_share:
                    yield from bucket

    # -- deciding -------------------------------------------------------------------------------
    def _request_id(self, request: ResourceRequest) -> int:
        rid = self._request_ids.get(request)
        if rid is None:
            rid = self._request_ids[request] = len(self._request_ids)
        return rid

    def _verdict(self, cls: _Class, request: ResourceRequest, rid: int) -> tuple[float, tuple[int, ...]] | None:
        """Check and score `request` on the class (memoised: a class's state never changes)."""
        status = check_fit(cls.state, request)
        if not status.ok:
            v = None
            cls.rejections[rid] = status.reason
        elif self._randomized:
            v = (0.0, compute_gpu_choices(cls.state, request, False)[0])
        else:
            v = score_choices(cls.state, request, self.policy, self.ctx)
        cls.verdicts[rid] = v
        return v

    def compute(self, request: ResourceRequest) -> tuple[int, tuple[int, ...]] | Unschedulable:
        """Best (node number, GPU positions) for `request`, without applying it."""
        best_score = float("-inf")
        best: list[tuple[_Class, tuple[int, ...]]] = []
        rid = self._request_id(request)
        for cls in self._candidates(request):
            v = cls.verdicts[rid] if rid in cls.verdicts else self._verdict(cls, request, rid)
            if v is None:
                continue
            score = v[0]
            if score > best_score + _TIE:
                best_score, best = score, [(cls, v[1])]
            elif score >= best_score - _TIE:
                best.append((cls, v[1]))
        if not best:
            return Unschedulable(self.explain(request, rid))
        cls, positions = best[0]
        if getattr(self.policy, "first_wins", False):
            # `first-free`: literally the first node (in the order given) among the best.
            cls, positions = min(best, key=lambda cp: min(cp[0].members))
            node = min(cls.members)
        elif self._ranks is not None:
            # Ties go to the node first in a seeded order of all nodes (the FGD artifact's rule):
            # replayable, and equal choices keep landing on the same nodes instead of spreading.
            firsts = [(self._ranks[n], n, c, p) for c, p in best for n in (self._first_ranked(c),)]
            _, node, cls, positions = min(firsts, key=lambda t: t[0])
        elif self.rng is not None and (len(best) > 1 or len(cls.members) > 1):
            total = sum(len(c.members) for c, _ in best)
            pick = self.rng.randrange(total)
            for cls, positions in best:
                if pick < len(cls.members):
                    break
                pick -= len(cls.members)
            node = list(cls.members)[pick] if len(cls.members) > 1 else next(iter(cls.members))
        else:
            node = next(iter(cls.members))
        if self._randomized and self.rng is not None and request.gpus == 1 and request.gpu_milli < FULL_GPU_MILLI:
            # `random` also draws the GPU a share goes on, among those with room (as the artifact does).
            room = available_positions(cls.state, request)
            positions = (room[self.rng.randrange(len(room))],)
        return node, self._actual_positions(node, cls, positions)

    def _actual_positions(self, node: int, cls: _Class, positions: tuple[int, ...]) -> tuple[int, ...]:
        """Map positions in the class's (sorted) load tuple to the node's own GPUs of that load."""
        if not cls.hw.symmetric:
            return positions
        used = self._used[node]
        taken: set[int] = set()
        out = []
        for p in positions:
            level = cls.state.gpu_used_milli[p]
            q = next(j for j, u in enumerate(used) if u == level and j not in taken)
            taken.add(q)
            out.append(q)
        return tuple(out)

    def place(self, request: ResourceRequest) -> Placement | Unschedulable:
        """Decide and apply one request."""
        decision = self.compute(request)
        if isinstance(decision, Unschedulable):
            return decision
        node, positions = decision
        self._apply(node, positions, request.gpu_milli, request.cpu_milli, request.memory_mib)
        return make_placement(self.infos[node], request, positions)

    def _apply(self, node: int, positions: tuple[int, ...], gpu_milli: int, cpu: int, mem: int) -> None:
        self._leave(node)
        for p in positions:
            self._used[node][p] += gpu_milli
            if not 0 <= self._used[node][p] <= FULL_GPU_MILLI:
                raise ValueError(f"GPU {p} of {self.infos[node].name} would hold {self._used[node][p]} milli")
        self._cpu_used[node] += cpu
        self._mem_used[node] += mem
        self._node_class[node] = self._enter(node)

    def release(self, placement: Placement) -> None:
        """Undo a placement (a job ended)."""
        node = next(i for i, n in enumerate(self.infos) if n.name == placement.node)
        positions = tuple(next(p for p, g in enumerate(self.infos[node].gpus) if g.index == idx) for idx in placement.gpu_indices)
        self._apply(node, positions, -placement.gpu_milli, -placement.cpu_milli, -placement.memory_mib)

    def explain(self, request: ResourceRequest, rid: int | None = None) -> Explanation:
        """Why `request` fits nowhere: each class's reason, counted once per node in it."""
        rid = self._request_id(request) if rid is None else rid
        counts: dict[str, int] = {}
        for cls in self._classes.values():
            reason = cls.rejections.get(rid)
            if reason is None:
                status = check_fit(cls.state, request)
                if status.ok:
                    continue
                reason = cls.rejections[rid] = status.reason
            counts[reason] = counts.get(reason, 0) + len(cls.members)
        explanation = Explanation()
        for reason, n in counts.items():
            explanation.add(reason, n)
        return explanation

    # -- reading --------------------------------------------------------------------------------
    def node_states(self) -> list[NodeState]:
        """The current snapshot, one NodeState per node, in the order given."""
        return [
            NodeState(info, tuple(self._used[i]), self._cpu_used[i], self._mem_used[i])
            for i, info in enumerate(self.infos)
        ]

    @property
    def class_count(self) -> int:
        return len(self._classes)

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(FULL_GPU_MILLI for n in self.infos for g in n.gpus if g.healthy)

    @property
    def gpu_allocated_milli(self) -> int:
        return sum(sum(u) for u in self._used)
