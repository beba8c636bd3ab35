"""compute_plan as a table of named cases: admit with a placement, pending with a reason, preempt victims."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.cluster import Cluster
from corral.scheduler.plan import UNRANKED, Plan, Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState, RunningJob
from corral.scheduler.queueing.preemption import Preemption

FIFO = QueueingPolicy("skip", "fifo")  # rank order, best-effort: a blocked job never blocks those behind


def qjob(
    id: str, submit: float = 0.0, tenant: str = "t", nodes: int = 1, model: str = "", **request: object
) -> QueuedJob:
    req = ResourceRequest(**request)  # type: ignore[arg-type]
    return QueuedJob(
        id, tenant, gpus=req.gpus, gpu_milli=req.gpu_milli, model=model, nodes=nodes, submit_s=submit, request=req
    )


def plan_of(
    nodes: list[NodeState],
    pending: list[QueuedJob],
    running: list[RunningJob] | None = None,
    queueing: QueueingPolicy | str = FIFO,
    now: float = 0.0,
) -> Plan:
    return compute_plan(Snapshot(nodes, QueueState(pending, running or [])), now, "bestfit", queueing)


def where(plan: Plan) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    return {a.job_id: [(p.node, p.gpu_indices) for p in a.placements] for a in plan.admit}


@dataclass
class Case:
    name: str
    nodes: list[NodeState]
    pending: list[QueuedJob]
    admitted: dict[str, list[tuple[str, tuple[int, ...]]]]
    pending_reasons: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("admit with its placement", [make_node("a").gpus(4).build()], [qjob("j", gpus=2)], {"j": [("a", (0, 1))]}),
    Case(
        "minimum GPU memory is honoured (the 16 GB node is first)",
        [make_node("small").gpus(2, "T4-16GB", 16384).build(), make_node("big").gpus(2, "A100-80GB").build()],
        [qjob("j", gpus=1, min_gpu_memory_mib=40_000)],
        {"j": [("big", (0,))]},
    ),
    Case(
        "host CPU is honoured",
        [make_node("few").gpus(2).host(4_000, 65536).build(), make_node("many").gpus(2).host(128_000, 65536).build()],
        [qjob("j", gpus=1, cpu_milli=64_000)],
        {"j": [("many", (0,))]},
    ),
    Case(
        "a job that asks too much CPU does not stop a smaller one of its tenant",
        [make_node("a").gpus(2).host(8_000, 65536).build()],
        [qjob("cpu-heavy", 0, gpus=1, cpu_milli=64_000), qjob("light", 1, gpus=1, cpu_milli=2_000)],
        {"light": [("a", (0,))]},
        {"cpu-heavy": "capacity"},
    ),
    Case(
        "a node not schedulable is never chosen",
        [NodeState(make_node("cordoned").gpus(8).info(), schedulable=False), make_node("b").gpus(1).build()],
        [qjob("j", gpus=1), qjob("k", 1, gpus=1)],
        {"j": [("b", (0,))]},
        {"k": "capacity"},
    ),
    Case(
        "gang parts on distinct nodes",
        [make_node("a").gpus(4).build(), make_node("b").gpus(4).build()],
        [qjob("g", gpus=4, nodes=2)],
        {"g": [("a", (0, 1, 2, 3)), ("b", (0, 1, 2, 3))]},
    ),
    Case(
        "a gang that does not fit whole takes nothing",
        [make_node("a").gpus(4).build(), make_node("b").gpus(4).used(1000).build()],
        [qjob("g", gpus=4, nodes=2), qjob("s", 1, gpus=2)],
        {"s": [("b", (1, 2))]},
        {"g": "gang-incomplete"},
    ),
    Case(
        "jobs without GPUs go first, oldest first",
        [make_node("a").gpus(1).host(4_000, 65536).build()],
        [
            qjob("gpu", 0, gpus=1, cpu_milli=2_000),
            qjob("cpu-new", 2, cpu_milli=2_000),
            qjob("cpu-old", 1, cpu_milli=2_000),
        ],
        {"cpu-old": [("a", ())], "cpu-new": [("a", ())]},
        {"gpu": "capacity"},
    ),
    Case(
        "a model nobody has",
        [make_node("a").gpus(2).build()],
        [qjob("j", gpus=1, model="H100", gpu_models=("H100",))],
        {},
        {"j": "model-constraint"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compute_plan(case: Case) -> None:
    plan = plan_of(case.nodes, case.pending)
    assert where(plan) == case.admitted
    assert {j: s.reason for j, s in plan.pending.items()} == case.pending_reasons


def test_admit_order_is_cpu_only_first_then_rank() -> None:
    nodes = [make_node("a").gpus(2).build()]
    plan = plan_of(nodes, [qjob("g1", 0, gpus=1), qjob("c", 5, cpu_milli=1000), qjob("g2", 1, gpus=1)])
    assert [a.job_id for a in plan.admit] == ["c", "g1", "g2"]
    assert [a.model for a in plan.admit] == ["", "A100-80GB", "A100-80GB"]


def test_pending_detail_says_why_per_node() -> None:
    nodes = [make_node("a").gpus(1).used(1000).build(), make_node("b").gpus(1).used(1000).build()]
    plan = plan_of(nodes, [qjob("j", gpus=1), qjob("c", 1, cpu_milli=10**9)])
    status = plan.pending["j"]
    assert (status.reason, status.detail, status.position) == ("capacity", "2 nodes: not enough free GPUs", 0)
    cpu = plan.pending["c"]
    assert (cpu.reason, cpu.detail, cpu.position) == ("capacity", "2 nodes: not enough free CPU", UNRANKED)


def test_a_job_allowing_several_models_is_placed_on_the_admitted_one() -> None:
    nodes = [make_node("t4").gpus(2, "T4-16GB", 16384).build(), make_node("a100").gpus(2).build()]
    plan = plan_of(nodes, [qjob("j", gpus=2, gpu_models=("T4", "A100"))])
    (admit,) = plan.admit
    node = {n.info.name: n for n in nodes}[admit.placements[0].node]
    assert {node.info.gpus[i].model for i in admit.placements[0].gpu_indices} == {admit.model}


def test_preempts_the_victim_and_nominates_the_waiting_job() -> None:
    node = make_node("a").gpus(1).used(1000).build()
    old = QueuedJob("old", "t", gpus=1)
    plan = plan_of([node], [qjob("new", 9_000, gpus=1)], [RunningJob(old, 0.0, "A100-80GB")], "las", now=10_000.0)
    assert plan.admit == ()
    assert plan.preempt == (Preemption("old", "new", "rank"),)
    assert plan.nominate == ("new",)
    assert plan.pending["new"].reason == "preempting"


def test_a_live_cluster_is_placed_into() -> None:
    nodes = [make_node("a").gpus(2).build()]
    cluster = Cluster.from_states(nodes, "bestfit")
    first = compute_plan(Snapshot((), QueueState([qjob("j", gpus=2)])), 0.0, "bestfit", FIFO, cluster=cluster)
    assert where(first) == {"j": [("a", (0, 1))]} and cluster.free_milli("A100-80GB") == 0
    second = compute_plan(Snapshot((), QueueState([qjob("k", gpus=1)])), 1.0, "bestfit", FIFO, cluster=cluster)
    assert second.pending["k"].reason == "capacity"
    cluster.release(first.admit[0].placements[0])  # the job ended
    third = compute_plan(Snapshot((), QueueState([qjob("k", gpus=1)])), 2.0, "bestfit", FIFO, cluster=cluster)
    assert where(third) == {"k": [("a", (0,))]}
