"""The one placement engine (pure, no I/O): an indexed, mutable cluster that the server's cycle
(`compute_plan`), `compute_placement`, gang placement, the simulators and the benchmarks all run on.

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
decisions either way. Without `rng`, ties go to the node first in the order given.
A request with a container image (`request.image`) prefers, among the tied best, the nodes that have the image
cached (`NodeInfo.images`): the same tie rule then picks among those. The image never changes a score or a fit,
so such requests share verdicts with the same request without an image.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator, Sequence
from dataclasses import replace

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI, NodeInfo, NodeState, Placement
from corral.scheduler.choices import Unschedulable, compute_gpu_choices, make_placement, score_choices
from corral.scheduler.filters import available_positions, check_fit, check_hardware
from corral.scheduler.framework import (
    DEFAULT_CONTEXT,
    REASON_HELD,
    REASON_UNSCHEDULABLE_NODE,
    Explanation,
    PlacementPolicy,
    ScoreContext,
    Status,
)
from corral.scheduler.node_class import NodeClass, NodeHardware, compute_hardware_key
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy
from corral.scheduler.topology import has_topology
from corral.scheduler.workload import compute_gpu_supply

_TIE = 1e-9
REASON_GANG_SHORT = "fewer nodes fit than the multi-node request needs"


class Cluster:
    """Nodes, their load, and one policy; `place()` decides and applies one request at a time."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: PlacementPolicy | str = DEFAULT_POLICY,
        ctx: ScoreContext = DEFAULT_CONTEXT,
        rng: random.Random | None = None,
        seeded_order: bool = True,
        *,
        states: Sequence[NodeState] | None = None,
    ) -> None:
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.rng = rng
        self._randomized = bool(getattr(self.policy, "randomized", False))
        self._first_wins = bool(getattr(self.policy, "first_wins", False))
        self.infos = list(nodes)
        # Tie order: a seeded shuffle of all nodes, the given order without rng, None = uniform draws.
        self._ranks: list[int] | None = list(range(len(self.infos)))
        self._shuffled = rng is not None and seeded_order and not self._randomized
        if self._shuffled:
            assert rng is not None and self._ranks is not None
            rng.shuffle(self._ranks)
        elif rng is not None:
            self._ranks = None
        self.ctx = ctx if ctx.gpu_supply is not None else replace(ctx, gpu_supply=compute_gpu_supply(self.infos))
        self._index_of = {n.name: i for i, n in enumerate(self.infos)}
        if len(self._index_of) != len(self.infos):
            raise ValueError("node names must be unique")
        self._used = [list(s.gpu_used_milli) for s in states] if states else [[0] * len(n.gpus) for n in self.infos]
        self._cpu_used = [s.cpu_used_milli for s in states] if states else [0] * len(self.infos)
        self._mem_used = [s.memory_used_mib for s in states] if states else [0] * len(self.infos)
        self._schedulable = [s.schedulable for s in states] if states else [True] * len(self.infos)
        self._image_nodes: dict[str, list[int]] = {}  # image -> nodes that have it cached, in the order given
        for i, info in enumerate(self.infos):
            for image in info.images:
                self._image_nodes.setdefault(image, []).append(i)
        self._excluded: set[int] = set()  # nodes a gang being placed already holds (never chosen twice)
        self._held: set[int] = set()  # nodes kept for one waiting job this cycle (hold / release_holds)
        self._whole_free: dict[tuple[str, int], tuple[int, list[tuple[str, int]]]] = {}
        self._free: dict[str, int] = {}  # model -> free milli on healthy GPUs of schedulable nodes
        hardware: dict[tuple[object, ...], NodeHardware] = {}
        self._hw_of: list[NodeHardware] = []
        per_node = bool(getattr(self.policy, "per_node", False))
        for i, info in enumerate(self.infos):
            key = (*compute_hardware_key(info), info.name) if per_node else compute_hardware_key(info)
            if key not in hardware:
                models = tuple(sorted({g.model for g in info.gpus}))
                hardware[key] = NodeHardware(len(hardware), info, not has_topology(info), models)
            self._hw_of.append(hardware[key])
            for g, used in zip(info.gpus, self._used[i]):
                if self._schedulable[i]:
                    self._free[g.model] = self._free.get(g.model, 0) + (FULL_GPU_MILLI - used if g.healthy else 0)
        self.hardware = list(hardware.values())
        self._classes: dict[tuple[object, ...], NodeClass] = {}
        # index[hw_id][(fully free GPUs, largest free share on a used GPU // 100)] -> classes
        self._index: list[dict[tuple[int, int], dict[NodeClass, None]]] = [{} for _ in self.hardware]
        self._hw_for_models: dict[tuple[str, ...], list[NodeHardware]] = {}
        self._request_ids: dict[ResourceRequest, int] = {}
        self._version = 0
        self._explained: dict[int, tuple[int, Explanation]] = {}  # request number -> (version, why)
        # Fits only shrink while nodes only fill: `_grown` counts the changes that may open room (a release, a
        # node no longer excluded or held), and a request that fit nowhere stays unplaceable until it moves.
        self._grown = 0
        self._failed: dict[int, int] = {}  # request number -> `_grown` when it last fit nowhere
        self._node_class: list[NodeClass] = []
        for i in range(len(self.infos)):
            self._node_class.append(self._enter(i))

    @classmethod
    def from_states(
        cls,
        states: Sequence[NodeState],
        policy: PlacementPolicy | str = DEFAULT_POLICY,
        ctx: ScoreContext = DEFAULT_CONTEXT,
        rng: random.Random | None = None,
        seeded_order: bool = True,
    ) -> Cluster:
        """A cluster with the snapshot's loads; nodes not schedulable are kept (for explanations), never chosen."""
        return cls([s.info for s in states], policy, ctx, rng, seeded_order, states=states)

    # -- classes --------------------------------------------------------------------------------
    def _state_key(self, i: int) -> tuple[object, ...]:
        hw = self._hw_of[i]
        used = tuple(sorted(self._used[i], reverse=True)) if hw.symmetric else tuple(self._used[i])
        held = i in self._held
        schedulable = self._schedulable[i] and i not in self._excluded and not held
        return (hw.hw_id, used, self._cpu_used[i], self._mem_used[i], schedulable, held and self._schedulable[i])

    def _enter(self, i: int) -> NodeClass:
        key = self._state_key(i)
        cls = self._classes.get(key)
        if cls is None:
            hw = self._hw_of[i]
            used, schedulable = key[1], key[4]
            assert isinstance(used, tuple) and isinstance(schedulable, bool)
            state = NodeState(hw.info, used, self._cpu_used[i], self._mem_used[i], schedulable)
            healthy = [u for g, u in zip(hw.info.gpus, used) if g.healthy]
            share = max((FULL_GPU_MILLI - u for u in healthy if 0 < u < FULL_GPU_MILLI), default=0)
            bucket = (sum(1 for u in healthy if u == 0), share // 100)
            cls = NodeClass(key, hw, state, bucket, schedulable)
            self._classes[key] = cls
            if schedulable:
                self._index[hw.hw_id].setdefault(bucket, {})[cls] = None
        cls.members[i] = None
        if self._ranks is not None:
            heapq.heappush(cls.ranked, (self._ranks[i], i))
        return cls

    def _first_ranked(self, cls: NodeClass) -> int:
        """The member that comes first in the seeded node order (lazy deletion of departed members)."""
        while cls.ranked[0][1] not in cls.members:
            heapq.heappop(cls.ranked)
        return cls.ranked[0][1]

    def _leave(self, i: int) -> None:
        self._version += 1  # a node changes: memoised explanations are stale
        cls = self._node_class[i]
        del cls.members[i]
        if not cls.members:
            del self._classes[cls.key]
            if not cls.indexed:
                return
            bucket = self._index[cls.hw.hw_id][cls.bucket]
            del bucket[cls]
            if not bucket:
                del self._index[cls.hw.hw_id][cls.bucket]

    def _hardware_for(self, request: ResourceRequest) -> list[NodeHardware]:
        hws = self._hw_for_models.get(request.gpu_models)
        if hws is None:
            hws = [h for h in self.hardware if any(model_matches(m, request.gpu_models) for m in h.gpu_models)]
            self._hw_for_models[request.gpu_models] = hws
        return hws

    def _candidates(self, request: ResourceRequest) -> Iterator[NodeClass]:
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
            # The image only breaks ties: a request shares its verdicts with the same request without one.
            rid = self._request_id(replace(request, image="")) if request.image else len(self._request_ids)
            self._request_ids[request] = rid
        return rid

    def _hardware_fit(self, hw: NodeHardware, request: ResourceRequest, rid: int) -> tuple[Status, tuple[int, ...]]:
        """`check_hardware` of the hardware, memoised per request (every class of it shares the answer)."""
        got = hw.fits.get(rid)
        if got is None:
            got = hw.fits[rid] = check_hardware(hw.info, request)
        return got

    def _verdict(self, cls: NodeClass, request: ResourceRequest, rid: int) -> tuple[float, tuple[int, ...]] | None:
        """Check and score `request` on the class (memoised: a class's state never changes)."""
        hardware = self._hardware_fit(cls.hw, request, rid)
        status = check_fit(cls.state, request, hardware)
        if not status.ok:
            v = None
            cls.rejections[rid] = status.reason
        elif self._randomized:
            v = (0.0, compute_gpu_choices(cls.state, request, False, hardware[1])[0])
        else:
            v = score_choices(cls.state, request, self.policy, self.ctx, hardware[1])
        cls.verdicts[rid] = v
        return v

    def compute(self, request: ResourceRequest) -> tuple[int, tuple[int, ...]] | Unschedulable:
        """Best (node number, GPU positions) for `request`, without applying it."""
        best_score = float("-inf")
        best: list[tuple[NodeClass, tuple[int, ...]]] = []
        rid = self._request_id(request)
        if self._failed.get(rid) == self._grown:
            return Unschedulable(self.explain(request, rid))
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
            self._failed[rid] = self._grown
            return Unschedulable(self.explain(request, rid))
        cached = self._with_image(request.image, best) if request.image else None
        if cached:
            node, cls, positions = self._pick_cached(cached)
        else:
            node, cls, positions = self._pick(best)
        if self._randomized and self.rng is not None and request.gpus == 1 and request.gpu_milli < FULL_GPU_MILLI:
            # `random` also draws the GPU a share goes on, among those with room (as the artifact does).
            room = available_positions(cls.state, request)
            positions = (room[self.rng.randrange(len(room))],)
        return node, self._actual_positions(node, cls, positions)

    def _pick(self, best: list[tuple[NodeClass, tuple[int, ...]]]) -> tuple[int, NodeClass, tuple[int, ...]]:
        """The node the tie rules choose among the best classes."""
        cls, positions = best[0]
        if self._first_wins and self._shuffled:
            # `first-free`: literally the first node (in the order given) among the best.
            cls, positions = min(best, key=lambda cp: min(cp[0].members))
            node = min(cls.members)
        elif self._ranks is not None:
            # Ties go to the node first in a seeded order of all nodes (the FGD artifact's rule), or in the
            # order given without rng: replayable, and equal choices keep landing on the same nodes.
            firsts = [(self._ranks[n], n, c, p) for c, p in best for n in (self._first_ranked(c),)]
            _, node, cls, positions = min(firsts, key=lambda t: t[0])
        elif self.rng is not None and (len(best) > 1 or len(cls.members) > 1):
            total = sum(len(c.members) for c, _ in best)
            pick = self.rng.randrange(total)
            for cls, positions in best:  # noqa: B007 (the pair the loop stops at is the one used below)
                if pick < len(cls.members):
                    break
                pick -= len(cls.members)
            node = list(cls.members)[pick] if len(cls.members) > 1 else next(iter(cls.members))
        else:
            node = next(iter(cls.members))
        return node, cls, positions

    def _with_image(
        self, image: str, best: list[tuple[NodeClass, tuple[int, ...]]]
    ) -> list[tuple[int, NodeClass, tuple[int, ...]]]:
        """(node, its class, positions) for the nodes of the best classes that have `image` cached, in the order
        given: classes group nodes by hardware and load, not images, so the members are looked at one by one
        (only those that have the image: O(nodes with it), not O(nodes))."""
        nodes = self._image_nodes.get(image)
        if not nodes:
            return []
        positions_of = {cls: positions for cls, positions in best}  # NodeClass hashes by identity
        return [(n, c, positions_of[c]) for n in nodes if (c := self._node_class[n]) in positions_of]

    def _pick_cached(
        self, cached: list[tuple[int, NodeClass, tuple[int, ...]]]
    ) -> tuple[int, NodeClass, tuple[int, ...]]:
        """The tie rules of `_pick`, over the best nodes that have the image."""
        if self._first_wins and self._shuffled:
            return min(cached, key=lambda t: t[0])
        if self._ranks is not None:
            ranks = self._ranks
            return min(cached, key=lambda t: ranks[t[0]])
        if self.rng is not None and len(cached) > 1:
            return cached[self.rng.randrange(len(cached))]
        return cached[0]

    def _actual_positions(self, node: int, cls: NodeClass, positions: tuple[int, ...]) -> tuple[int, ...]:
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

    def find(self, request: ResourceRequest) -> Placement | Unschedulable:
        """Where `request` would go now, without applying it (`apply` it to commit the same choice)."""
        decision = self.compute(request)
        if isinstance(decision, Unschedulable):
            return decision
        return make_placement(self.infos[decision[0]], request, decision[1])

    def place(self, request: ResourceRequest) -> Placement | Unschedulable:
        """Decide and apply one request."""
        got = self.find(request)
        if not isinstance(got, Unschedulable):
            self.apply(got)
        return got

    def place_gang(self, request: ResourceRequest, count: int) -> list[Placement] | Unschedulable:
        """Place `count` copies of `request` on distinct nodes, greedily by the policy; all or none (a
        failure undoes the parts placed). The explanation counts every other node's reason and how many
        parts were short (REASON_GANG_SHORT)."""
        if count < 1:
            raise ValidationError("nodes", f"must be >= 1, got {count}")
        placements: list[Placement] = []
        try:
            for _ in range(count):
                got = self.place(request)
                if isinstance(got, Unschedulable):
                    return self._gang_short(got, count, placements)
                placements.append(got)
                self._set_excluded(self._index_of[got.node], True)
        finally:
            for p in placements:
                self._set_excluded(self._index_of[p.node], False)
        return placements

    def _gang_short(self, failed: Unschedulable, count: int, placements: list[Placement]) -> Unschedulable:
        explanation = Explanation()
        for reason, n in failed.explanation.reasons.items():
            # The gang's own nodes were excluded as "not schedulable": they are not a reason.
            n -= len(placements) if reason == REASON_UNSCHEDULABLE_NODE else 0
            if n > 0:
                explanation.add(reason, n)
        explanation.add(REASON_GANG_SHORT, count - len(placements))
        for p in placements:
            self.release(p)
        return Unschedulable(explanation)

    def find_gang(self, request: ResourceRequest, count: int) -> list[Placement] | Unschedulable:
        """`place_gang` without applying it."""
        got = self.place_gang(request, count)
        if not isinstance(got, Unschedulable):
            for p in got:
                self.release(p)
        return got

    def _set_flag(self, flags: set[int], node: int, on: bool) -> None:
        """Add `node` to or take it from `flags` (_excluded, _held), moving it to the node class that says so."""
        if (node in flags) == on:
            return
        self._grown += not on
        self._leave(node)
        if on:
            flags.add(node)
        else:
            flags.discard(node)
        self._node_class[node] = self._enter(node)

    def _set_excluded(self, node: int, excluded: bool) -> None:
        self._set_flag(self._excluded, node, excluded)

    def hold(self, name: str) -> None:
        """Keep node `name` for one waiting job: nothing else is placed on it until `release_holds` (a node
        drained for a job blocked by fragmentation, or where its victims are exiting)."""
        self._set_flag(self._held, self._index_of[name], True)

    def models_on(self, name: str) -> set[str]:
        return {g.model for g in self.infos[self._index_of[name]].gpus}

    def unhold(self, name: str) -> None:
        self._set_flag(self._held, self._index_of[name], False)

    def release_holds(self) -> None:
        for i in sorted(self._held):
            self._set_flag(self._held, i, False)

    def whole_free(self, model: str, gpus: int) -> list[tuple[str, int]]:
        """(node, fully free healthy GPUs of `model`) for every node open to placement that has at least
        `gpus` healthy GPUs of that model, most free first (ties: the order given). Per node class, not per
        node, and memoised until a node changes (a cycle asks once per blocked job)."""
        key = (model, gpus)
        cached = self._whole_free.get(key)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        out: list[tuple[int, int, str]] = []
        for cls in self._classes.values():
            if not cls.indexed or model not in cls.hw.gpu_models:
                continue
            gpus_of = [g for g in cls.hw.info.gpus if g.healthy and g.model == model]
            if len(gpus_of) < gpus:
                continue
            if cls.hw.symmetric and len(gpus_of) != len(cls.hw.info.gpus):
                # Sorted loads of a node with several models (or sick GPUs): count on each node's own GPUs.
                out.extend((-self._whole_free_at(i, model), i, self.infos[i].name) for i in cls.members)
                continue
            used = cls.state.gpu_used_milli
            free = sum(1 for g, u in zip(cls.hw.info.gpus, used) if u == 0 and g.healthy and g.model == model)
            out.extend((-free, i, self.infos[i].name) for i in cls.members)
        out.sort()
        rows = [(name, -free) for free, _, name in out]
        self._whole_free[key] = (self._version, rows)
        return rows

    def whole_free_on(self, name: str, model: str) -> int:
        """Fully free healthy GPUs of `model` on node `name`."""
        return self._whole_free_at(self._index_of[name], model)

    def _whole_free_at(self, i: int, model: str) -> int:
        return sum(1 for g, u in zip(self.infos[i].gpus, self._used[i]) if u == 0 and g.healthy and g.model == model)

    def apply(self, placement: Placement) -> None:
        """Commit a placement (one this cluster found, or one the store holds)."""
        node, positions = self._locate(placement)
        self._apply(node, positions, placement.gpu_milli, placement.cpu_milli, placement.memory_mib)

    def release(self, placement: Placement) -> None:
        """Undo a placement (a job ended, or the applier rejected it)."""
        node, positions = self._locate(placement)
        self._apply(node, positions, -placement.gpu_milli, -placement.cpu_milli, -placement.memory_mib)

    def _locate(self, placement: Placement) -> tuple[int, tuple[int, ...]]:
        node = self._index_of[placement.node]
        gpus = self.infos[node].gpus
        return node, tuple(next(p for p, g in enumerate(gpus) if g.index == idx) for idx in placement.gpu_indices)

    def _apply(self, node: int, positions: tuple[int, ...], gpu_milli: int, cpu: int, mem: int) -> None:
        self._grown += gpu_milli < 0 or cpu < 0 or mem < 0
        self._leave(node)
        gpus = self.infos[node].gpus
        for p in positions:
            self._used[node][p] += gpu_milli
            if not 0 <= self._used[node][p] <= FULL_GPU_MILLI:
                raise ValueError(f"GPU {p} of {self.infos[node].name} would hold {self._used[node][p]} milli")
            if gpus[p].healthy and self._schedulable[node]:
                self._free[gpus[p].model] -= gpu_milli
        self._cpu_used[node] += cpu
        self._mem_used[node] += mem
        self._node_class[node] = self._enter(node)

    def explain(self, request: ResourceRequest, rid: int | None = None) -> Explanation:
        """Why `request` fits nowhere: each class's reason, counted once per node in it (memoised until
        a node changes: a cycle asks again for every job of the same shape that waits)."""
        rid = self._request_id(request) if rid is None else rid
        cached = self._explained.get(rid)
        if cached is not None and cached[0] == self._version:
            return Explanation(cached[1].reasons.copy())
        explanation = self._explain(request, rid)
        self._explained[rid] = (self._version, explanation)
        return Explanation(explanation.reasons.copy())

    def _explain(self, request: ResourceRequest, rid: int) -> Explanation:
        counts: dict[str, int] = {}
        for cls in self._classes.values():
            reason = REASON_HELD if cls.key[5] else cls.rejections.get(rid)
            if reason is None:
                status = check_fit(cls.state, request, self._hardware_fit(cls.hw, request, rid))
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
            NodeState(info, tuple(self._used[i]), self._cpu_used[i], self._mem_used[i], self._schedulable[i])
            for i, info in enumerate(self.infos)
        ]

    def free_milli(self, model: str) -> int:
        """Free milli-GPUs of `model` (exact name) on healthy GPUs of schedulable nodes, O(1)."""
        return self._free.get(model, 0)

    def pool_milli(self) -> dict[str, int]:
        """Milli-GPUs per model on healthy GPUs of schedulable nodes (what quotas and fair share divide)."""
        pool: dict[str, int] = {}
        for i, info in enumerate(self.infos):
            for g in info.gpus:
                if self._schedulable[i] and g.healthy:
                    pool[g.model] = pool.get(g.model, 0) + FULL_GPU_MILLI
        return pool

    def gpu_models(self) -> list[str]:
        """GPU models of the schedulable nodes, sorted."""
        return sorted({g.model for i, n in enumerate(self.infos) if self._schedulable[i] for g in n.gpus})

    def model_of(self, placement: Placement) -> str:
        """The GPU model a placement landed on ("" without GPUs)."""
        node, positions = self._locate(placement)
        return self.infos[node].gpus[positions[0]].model if positions else ""

    @property
    def class_count(self) -> int:
        return len(self._classes)

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(FULL_GPU_MILLI for n in self.infos for g in n.gpus if g.healthy)

    @property
    def gpu_allocated_milli(self) -> int:
        return sum(sum(u) for u in self._used)
