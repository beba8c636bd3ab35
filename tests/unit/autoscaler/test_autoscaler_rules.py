"""The autoscaler's pure half: demand from a real scheduling plan, the built-in policy, and the reconciler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from corral.autoscaler.demand import TypeFit, compute_demand
from corral.autoscaler.model import AutoscaleState, Demand, Launch, Release
from corral.autoscaler.policy import choose_type, compute_notes, compute_releases, decide
from corral.autoscaler.reconciler import BUSY_UTIL_PCT, Observed, compute_backoff, compute_changes
from corral.core.pools import (
    DRAINING,
    FAILED,
    LAUNCHING,
    RELEASED,
    RUNNING,
    InstanceType,
    PoolNode,
    PoolSpec,
)
from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueState
from corral.scheduler.queueing.quota import QuotaBook, TenantQuota

MODEL = "A100-80GB"
MIB = 81920
G1 = InstanceType("g1", 1, MODEL, MIB, price_per_hour=1.0)
G4 = InstanceType("g4", 4, MODEL, MIB, price_per_hour=3.0)
G8 = InstanceType("g8", 8, MODEL, MIB, price_per_hour=10.0)
G4_SPOT = InstanceType("g4s", 4, MODEL, MIB, price_per_hour=1.5, spot=True)
NOW = 10_000.0


def _pool(*types: InstanceType, max_nodes: int = 4, min_nodes: int = 0, idle_s: float = 300.0) -> PoolSpec:
    return PoolSpec("burst", "local", types or (G1, G4, G8), min_nodes=min_nodes, max_nodes=max_nodes, idle_s=idle_s)


def _job(
    job_id: str, gpus: int, submit: float = 0.0, tenant: str = "t", nodes: int = 1, spot: bool = False
) -> QueuedJob:
    req = ResourceRequest(gpus=gpus, tolerations=("spot",) if spot else ())
    return QueuedJob(job_id, tenant, gpus=gpus, nodes=nodes, submit_s=submit, request=req)


def _existing(name: str, gpus: int, used: int = 0) -> NodeState:
    info = NodeInfo(name, tuple(GpuInfo(i, f"{name}-{i}", MODEL, MIB) for i in range(gpus)), 64_000, 262_144, (), ())
    return NodeState(info, (1000,) * used + (0,) * (gpus - used), 0, 0)


def _state(
    jobs: Sequence[QueuedJob],
    pools: Sequence[PoolSpec],
    nodes: Sequence[PoolNode] = (),
    existing: Sequence[NodeState] = (),
    backoff: Mapping[tuple[str, str], float] | None = None,
    no_burst: frozenset[str] = frozenset(),
    quotas: QuotaBook | None = None,
) -> AutoscaleState:
    snapshot = Snapshot(list(existing), QueueState(list(jobs), [], quotas=quotas or QuotaBook()))
    plan = compute_plan(snapshot, NOW)
    demand, free, wanted = compute_demand(snapshot, plan, pools)
    return AutoscaleState(NOW, tuple(pools), tuple(nodes), demand, free, backoff or {}, no_burst, wanted)


def _launches(actions: Sequence[object]) -> list[Launch]:
    return [a for a in actions if isinstance(a, Launch)]


def _pnode(name: str, state: str = RUNNING, **kw: object) -> PoolNode:
    node = PoolNode(name, "burst", "g4", state, launched_s=NOW - 1000.0, price_per_hour=3.0, provider_id="i-1")
    return replace(node, **kw)


# ---- demand --------------------------------------------------------------------------------------
def test_a_job_with_no_node_is_demand_fitting_every_large_enough_type() -> None:
    state = _state([_job("j", 4)], [_pool()])
    assert [d.job_id for d in state.demand] == ["j"]
    assert state.demand[0].fits == (("burst", "g4"), ("burst", "g8"))


def test_a_job_that_fits_a_free_existing_node_is_not_demand() -> None:
    state = _state([_job("j", 4)], [_pool()], existing=[_existing("n1", 8)])
    assert state.demand == ()


def test_only_the_job_the_free_node_cannot_also_take_is_demand() -> None:
    # one free 4-GPU node, two 4-GPU jobs: the plan admits one, the other is demand
    state = _state([_job("a", 4, 0.0), _job("b", 4, 1.0)], [_pool()], existing=[_existing("n1", 4)])
    assert [d.job_id for d in state.demand] == ["b"]


def test_a_quota_blocked_job_is_not_demand() -> None:
    # an 8-GPU node with 2 free GPUs: a 4-GPU job waits; with a 1-GPU maximum it waits for its quota
    busy = _existing("n1", 8, used=6)
    quotas = QuotaBook({"t": TenantQuota("t", {}, {"*": 1000})})
    state = _state([_job("j", 4)], [_pool()], existing=[busy], quotas=quotas)
    assert state.demand == ()
    assert _launches(decide(state)) == []
    # the same job without the quota is demand: it is the quota, not the job, that keeps it out
    assert [d.job_id for d in _state([_job("j", 4)], [_pool()], existing=[busy]).demand] == ["j"]


def test_a_job_larger_than_every_type_fits_none_and_its_note_names_the_largest() -> None:
    state = _state([_job("big", 16)], [_pool()])
    assert [(d.job_id, d.fits) for d in state.demand] == [("big", ())]
    actions = decide(state)
    assert _launches(actions) == []
    code, text = compute_notes(state, actions)["big"]
    assert code == "no-instance-type"
    assert G8.describe in text


def test_spot_types_fit_only_requests_that_tolerate_spot() -> None:
    fit = TypeFit([_pool(G4_SPOT)])
    assert fit.fits("burst", "g4s", ResourceRequest(gpus=4, tolerations=("spot",)))
    assert not fit.fits("burst", "g4s", ResourceRequest(gpus=4))
    assert not fit.fits("burst", "nope", ResourceRequest(gpus=1))


# ---- decide: up ------------------------------------------------------------------------------------
def test_a_4_gpu_job_launches_the_cheapest_type_that_fits() -> None:
    state = _state([_job("j", 4)], [_pool()])
    assert [(a.pool, a.instance_type, a.job_ids) for a in _launches(decide(state))] == [("burst", "g4", ("j",))]


def test_a_spot_type_goes_first_for_a_job_that_allows_spot() -> None:
    pool = _pool(G4, G4_SPOT, G8)
    state = _state([_job("j", 4, spot=True)], [pool])
    assert [a.instance_type for a in _launches(decide(state))] == ["g4s"]


def test_a_spot_type_is_never_chosen_for_a_job_that_does_not_allow_spot() -> None:
    pool = _pool(G4_SPOT, G8)  # the spot type is far cheaper, yet the job takes the on-demand one
    state = _state([_job("j", 4)], [pool])
    assert [a.instance_type for a in _launches(decide(state))] == ["g8"]
    only_spot = _state([_job("j", 4)], [_pool(G4_SPOT)])
    assert _launches(decide(only_spot)) == []


def test_max_nodes_is_respected_two_jobs_one_launch() -> None:
    state = _state([_job("a", 4, 0.0), _job("b", 4, 1.0)], [_pool(max_nodes=1)])
    assert [(a.instance_type, a.job_ids) for a in _launches(decide(state))] == [("g4", ("a",))]


def test_the_job_left_out_by_max_nodes_is_told_the_pool_is_at_its_maximum() -> None:
    state = _state([_job("a", 4, 0.0), _job("b", 4, 1.0)], [_pool(max_nodes=1)])
    code, text = compute_notes(state, decide(state))["b"]
    assert code == "capacity"
    assert "pool burst is at its maximum of 1 node(s)" in text


def test_at_max_nodes_the_note_says_the_pool_is_at_its_maximum() -> None:
    running = _pnode("burst-1", RUNNING, jobs=1)
    state = _state([_job("b", 4)], [_pool(max_nodes=1)], nodes=[running])
    actions = decide(state)
    assert _launches(actions) == []
    code, text = compute_notes(state, actions)["b"]
    assert code == "capacity"
    assert "pool burst is at its maximum of 1 node(s)" in text


def test_a_gang_launches_all_its_nodes_or_none() -> None:
    gang = _job("g", 4, nodes=2)
    actions = _launches(decide(_state([gang], [_pool(max_nodes=2)])))
    assert [(a.instance_type, a.job_ids) for a in actions] == [("g4", ("g",)), ("g4", ("g",))]
    assert _launches(decide(_state([gang], [_pool(max_nodes=1)]))) == []


def test_two_small_jobs_pack_onto_one_new_node() -> None:
    pool = _pool(G4, G8)
    actions = _launches(decide(_state([_job("a", 1, 0.0), _job("b", 1, 1.0)], [pool])))
    assert [(a.instance_type, a.job_ids) for a in actions] == [("g4", ("a", "b"))]


def test_a_job_covered_by_a_launching_node_starts_no_other() -> None:
    starting = _pnode("burst-1", LAUNCHING, joined_s=None)
    state = _state([_job("j", 4)], [_pool()], nodes=[starting])
    actions = decide(state)
    assert _launches(actions) == []
    code, text = compute_notes(state, actions)["j"]
    assert code == "scale-up" and "burst-1" in text


def test_a_launch_carries_a_scale_up_note() -> None:
    state = _state([_job("j", 4)], [_pool()])
    code, text = compute_notes(state, decide(state))["j"]
    assert code == "scale-up" and G4.describe in text


def test_a_type_in_backoff_is_not_launched() -> None:
    history = [
        _pnode("f1", FAILED, launched_s=NOW - 200.0, ended_s=NOW - 100.0),
        _pnode("f2", FAILED, launched_s=NOW - 100.0, ended_s=NOW - 30.0),
    ]
    backoff = compute_backoff(history, NOW)
    assert backoff == {("burst", "g4"): NOW - 30.0 + 60.0}
    state = _state([_job("j", 4)], [_pool(G4, G8)], backoff=backoff)
    assert [a.instance_type for a in _launches(decide(state))] == ["g8"]  # the next cheapest
    only_g4 = _state([_job("j", 4)], [_pool(G4)], backoff=backoff)
    actions = decide(only_g4)
    assert _launches(actions) == []
    code, text = compute_notes(only_g4, actions)["j"]
    assert code == "capacity" and "retrying in 30 s" in text


def test_backoff_doubles_expires_and_is_reset_by_a_joined_node() -> None:
    one = [_pnode("f1", FAILED, launched_s=NOW - 50.0, ended_s=NOW - 10.0)]
    assert compute_backoff(one, NOW) == {("burst", "g4"): NOW + 20.0}
    assert compute_backoff(one, NOW + 20.0) == {}
    joined = _pnode("ok", RUNNING, launched_s=NOW - 40.0, joined_s=NOW - 35.0)
    assert compute_backoff([*one, joined], NOW) == {}
    # a failure after the join starts a new streak of one
    later = _pnode("f2", FAILED, launched_s=NOW - 20.0, ended_s=NOW - 5.0)
    assert compute_backoff([*one, joined, later], NOW) == {("burst", "g4"): NOW + 25.0}


def test_no_burst_tenants_launch_nothing_and_are_told_budget() -> None:
    state = _state([_job("j", 4, tenant="poor")], [_pool()], no_burst=frozenset({"poor"}))
    actions = decide(state)
    assert _launches(actions) == []
    assert compute_notes(state, actions)["j"][0] == "budget"


def test_a_pool_below_its_minimum_launches_its_cheapest_on_demand_type() -> None:
    pool = _pool(G4_SPOT, G4, G8, min_nodes=2)
    launches = _launches(decide(_state([], [pool])))
    assert [(a.instance_type, a.job_ids) for a in launches] == [("g4", ()), ("g4", ())]
    one_live = _state([], [pool], nodes=[_pnode("burst-1", RUNNING, jobs=1)])
    assert len(_launches(decide(one_live))) == 1


def test_choose_type_skips_a_pool_without_room_for_every_part() -> None:
    pool = _pool(max_nodes=3)
    d = Demand("g", "t", ResourceRequest(gpus=4), parts=2, fits=(("burst", "g4"),))
    state = AutoscaleState(NOW, (pool,), (), (d,))
    assert choose_type(state, d, {"burst": 1}) == (pool, G4)
    assert choose_type(state, d, {"burst": 2}) is None


# ---- decide: down ------------------------------------------------------------------------------
def _idle_state(nodes: Sequence[PoolNode], min_nodes: int = 0) -> AutoscaleState:
    return AutoscaleState(NOW, (_pool(min_nodes=min_nodes, idle_s=300.0),), tuple(nodes), ())


def test_an_idle_running_node_is_released_after_idle_s_not_before() -> None:
    old = _pnode("old", idle_since_s=NOW - 301.0)
    young = _pnode("young", idle_since_s=NOW - 299.0)
    state = _idle_state([old, young])
    released = compute_releases(state, {"burst": 2})
    assert [(r.pool, r.node) for r in released] == [("burst", "old")]
    assert [r.node for r in decide(state) if isinstance(r, Release)] == ["old"]


def test_releases_never_go_below_min_nodes() -> None:
    nodes = [_pnode("a", idle_since_s=NOW - 1000.0), _pnode("b", idle_since_s=NOW - 900.0)]
    state = _idle_state(nodes, min_nodes=1)
    assert [r.node for r in compute_releases(state, {"burst": 2})] == ["a"]
    assert compute_releases(_idle_state(nodes, min_nodes=2), {"burst": 2}) == []


def test_a_node_with_jobs_or_not_running_is_never_released_for_idleness() -> None:
    nodes = [
        _pnode("busy", jobs=1, idle_since_s=NOW - 10_000.0),
        _pnode("quiet-gpus-busy", idle_since_s=None),
        _pnode("starting", LAUNCHING, idle_since_s=NOW - 10_000.0),
        _pnode("leaving", DRAINING, idle_since_s=NOW - 10_000.0),
    ]
    assert compute_releases(_idle_state(nodes), {"burst": 4}) == []


# ---- model -------------------------------------------------------------------------------------
def test_only_tenants_and_only_pools_narrow_the_state() -> None:
    other = replace(_pool(), name="other")
    state = _state([_job("a", 4, 0.0, tenant="x"), _job("b", 4, 1.0, tenant="y")], [_pool(), other])
    assert [d.job_id for d in state.only_tenants(["y"]).demand] == ["b"]
    narrowed = state.only_pools(["other"])
    assert [p.name for p in narrowed.pools] == ["other"]
    assert all(f[0] == "other" for d in narrowed.demand for f in d.fits)
    assert [a.pool for a in _launches(decide(narrowed))] == ["other", "other"]


# ---- reconciler --------------------------------------------------------------------------------
POOLS = {"burst": _pool()}


def _one(node: PoolNode, seen: Observed, now: float = NOW) -> tuple[PoolNode, bool] | None:
    changes = compute_changes([node], {node.name: seen}, POOLS, now)
    assert len(changes) <= 1
    return (changes[0].node, changes[0].terminate) if changes else None


def test_a_launching_node_that_registered_ready_runs() -> None:
    node = _pnode("n", LAUNCHING, launched_s=NOW - 60.0)
    got = _one(node, Observed(registered="READY"))
    assert got is not None
    running, terminate = got
    assert (running.state, running.joined_s, terminate) == (RUNNING, NOW, False)


def test_a_launching_node_past_its_join_timeout_fails_and_is_terminated() -> None:
    node = _pnode("n", LAUNCHING, launched_s=NOW - 601.0)
    got = _one(node, Observed())
    assert got is not None
    assert (got[0].state, got[0].ended_s, got[1]) == (FAILED, NOW, True)
    assert _one(replace(node, launched_s=NOW - 100.0), Observed(instance="pending")) is None


def test_a_running_node_that_is_lost_is_released_and_terminated() -> None:
    got = _one(_pnode("n"), Observed(registered="LOST", instance="running"))
    assert got is not None
    assert (got[0].state, got[0].ended_s, got[1]) == (RELEASED, NOW, True)


def test_a_draining_node_is_released_when_its_jobs_ended_and_stays_while_they_run() -> None:
    draining = _pnode("n", DRAINING, jobs=1, reason="idle")
    done = _one(draining, Observed(registered="READY", instance="running", jobs=0))
    assert done is not None and (done[0].state, done[1]) == (RELEASED, True)
    busy = _one(draining, Observed(registered="READY", instance="running", jobs=1))
    assert busy is None  # nothing changed: it keeps draining


def test_gpu_utilisation_above_the_threshold_keeps_a_node_busy() -> None:
    node = _pnode("n", idle_since_s=None)
    ready = Observed(registered="READY", instance="running", jobs=0, gpu_util=BUSY_UTIL_PCT + 45.0)
    assert _one(node, ready) is None  # busy: idle_since stays None, nothing changes
    quiet = replace(ready, gpu_util=1.0)
    got = _one(node, quiet)
    assert got is not None and got[0].idle_since_s == NOW and got[1] is False
    # already idle: the first idle second is kept, not moved to now
    assert _one(replace(node, idle_since_s=NOW - 50.0), quiet, NOW + 10.0) is None
    woke = _one(replace(node, idle_since_s=NOW - 50.0), ready)
    assert woke is not None and woke[0].idle_since_s is None


def test_an_idle_node_a_waiting_job_fits_is_not_released() -> None:
    """A node that just joined for a job has no job yet (the scheduler places it next pass): it is wanted, not idle."""
    spec = _pool(max_nodes=2)
    itype = spec.instance_type("g4")
    assert itype is not None
    joined = NodeState(itype.node_info("burst-g4-1", spec.node_labels()))
    node = PoolNode("burst-g4-1", "burst", "g4", "running", NOW - 100, joined_s=NOW - 50, idle_since_s=NOW - 50)
    quiet = replace(_pool(max_nodes=2), idle_s=0.0)
    state = _state([_job("a", 4, 0.0)], [quiet], nodes=[node], existing=[joined])
    assert "burst-g4-1" in state.wanted
    assert [a for a in decide(state) if isinstance(a, Release)] == []
    empty = _state([], [quiet], nodes=[node], existing=[joined])
    assert [a.node for a in decide(empty) if isinstance(a, Release)] == ["burst-g4-1"]
