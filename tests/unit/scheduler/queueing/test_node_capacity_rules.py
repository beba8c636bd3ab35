"""NodeLedger (node_capacity.py): a gang of any model runs on one model (its quota is counted on one)."""

from __future__ import annotations

import sys
from pathlib import Path

from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState, QuotaBook, compute_admission
from corral.scheduler.queueing.node_capacity import NodeLedger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sched_builders import make_node  # noqa: E402

A100 = "A100-80GB"
H100 = "H100-80GB"
SKIP = QueueingPolicy("skip", "fifo")


def gang_on(models: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    nodes = [make_node(f"n{i}").gpus(4, m).build() for i, m in enumerate(models)]
    ledger = NodeLedger(nodes, [])
    pool = {m: 4000 * models.count(m) for m in dict.fromkeys(models)}
    state = QueueState([QueuedJob("g", "t", gpus=4, nodes=2)], [], {}, QuotaBook(), {}, pool)
    plan = compute_admission(state, ledger, SKIP, 0.0)
    return [a.model for a in plan.admit], {j: sorted(p.node for p in ps) for j, ps in ledger.placements.items()}


def test_a_gang_of_any_model_never_spans_two_models() -> None:
    # One free node of each model: the gang fits by nodes, but not on one model, so it waits.
    models, placed = gang_on([A100, H100])
    assert models == [] and placed == {}


def test_a_gang_of_any_model_takes_the_model_it_fits_on_whole() -> None:
    models, placed = gang_on([A100, H100, H100])
    assert models == [H100] and placed == {"g": ["n1", "n2"]}
