"""Gang admission: a multi-GPU / multi-node job starts all its parts at once or not at all, and never
holds part of the pool while it waits, so two gangs cannot deadlock."""

from __future__ import annotations

from queue_builders import admit, admitted, job

from corral.core.resources import NodeState
from corral.scheduler.queueing import QueueingPolicy, QueueState, QuotaBook, compute_admission
from corral.scheduler.queueing.node_capacity import NodeLedger

SKIP = QueueingPolicy("skip", "fifo")


def test_gang_starts_whole_or_waits_holding_nothing() -> None:
    plan = admit([job("g", gpus=6), job("h", gpus=6, submit=1), job("s", gpus=2, submit=2)], gpus=8, policy=SKIP)
    assert admitted(plan) == ["g", "s"]
    assert plan.pending["h"].reason == "gang-incomplete"  # 2 of its 6 were free; it took none of them


def test_two_gangs_do_not_deadlock() -> None:
    # Each needs 6 of 8: one runs, the other waits with nothing held; when the first ends, the second runs.
    pending = [job("g1", gpus=6), job("g2", gpus=6, submit=1)]
    first = admit(pending, gpus=8, policy=SKIP)
    assert admitted(first) == ["g1"] and first.pending["g2"].reason == "gang-incomplete"
    second = admit([pending[1]], gpus=8, policy=SKIP)
    assert admitted(second) == ["g2"]


def _nodes(count: int, gpus: int) -> list[NodeState]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sched_builders import make_node

    return [make_node(f"n{i}").gpus(gpus, "V100-32GB").build() for i in range(count)]


def _admit_nodes(pending, nodes, run=()):  # type: ignore[no-untyped-def]
    ledger = NodeLedger(nodes, list(run))
    pool = {"V100-32GB": sum(len(n.info.gpus) for n in nodes) * 1000}
    plan = compute_admission(QueueState(pending, list(run), {}, QuotaBook(), {}, pool), ledger, SKIP, 0.0)
    return plan, ledger


def test_multi_node_gang_is_placed_on_distinct_nodes_by_the_placement_code() -> None:
    plan, ledger = _admit_nodes([job("mn", gpus=4, nodes=2)], _nodes(3, 4))
    assert admitted(plan) == ["mn"]
    assert len({p.node for p in ledger.placements["mn"]}) == 2
    assert all(len(p.gpu_indices) == 4 for p in ledger.placements["mn"])


def test_multi_node_gang_waits_when_only_part_fits() -> None:
    nodes = _nodes(2, 4)
    plan, ledger = _admit_nodes([job("one", gpus=2), job("mn", gpus=4, nodes=2, submit=1)], nodes)
    assert admitted(plan) == ["one"] and "mn" not in ledger.placements
    assert plan.pending["mn"].reason == "gang-incomplete"


def test_node_ledger_reports_a_model_nobody_has() -> None:
    plan, _ = _admit_nodes([job("x", model="H100")], _nodes(1, 4))
    assert plan.pending["x"].reason == "model-constraint"
