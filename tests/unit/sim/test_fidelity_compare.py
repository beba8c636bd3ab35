"""The simulator-fidelity comparison (tests/sim_fidelity.py) reports what differs and only that."""

from __future__ import annotations

import csv

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from sim_fidelity import (
    GRID_S,
    Start,
    compute_cycles,
    compute_differences,
    compute_on_grid,
    compute_sim_arrivals,
    compute_sim_durations,
    load_sim_starts,
    make_start,
    render_trace,
)

SERVER = [
    make_start("a", 0.0, [("n1", [0])]),
    make_start("b", 0.0, [("n1", [1])]),
    make_start("c", 1.5, [("n2", [1, 0])]),
    make_start("g", 2.0, [("n2", [2, 3]), ("n1", [2, 3])]),
]


def test_the_same_starts_agree_and_a_gangs_rank_order_is_not_compared() -> None:
    sim = [
        make_start("b", 0.0, [("n1", [1])]),
        make_start("a", 0.0, [("n1", [0])]),
        make_start("c", 1.5, [("n2", [0, 1])]),
        make_start("g", 2.0, [("n1", [3, 2]), ("n2", [2, 3])]),
    ]
    assert compute_differences(SERVER, sim, {}) == []
    assert compute_cycles(SERVER) == [frozenset({"a", "b"}), frozenset({"c"}), frozenset({"g"})]


def test_jobs_of_one_cycle_are_unordered_on_either_side() -> None:
    # the simulator started a before b, the server both in one cycle; the simulator started c and g together
    sim = [
        make_start("a", 0.0, [("n1", [0])]),
        make_start("b", 0.4, [("n1", [1])]),
        make_start("c", 1.7, [("n2", [0, 1])]),
        make_start("g", 1.7, [("n1", [2, 3]), ("n2", [2, 3])]),
    ]
    assert compute_differences(SERVER, sim, {}) == []


def test_an_inverted_pair_a_moved_job_and_a_missing_job_are_each_reported() -> None:
    sim = [
        make_start("a", 0.0, [("n1", [0])]),
        make_start("b", 0.0, [("n1", [5])]),
        make_start("g", 1.0, [("n2", [2, 3]), ("n1", [2, 3])]),
        make_start("x", 3.0, [("n3", [0])]),
    ]
    assert compute_differences(SERVER, sim, {}) == [
        "c: started on the server, never in the simulator",
        "x: started in the simulator, never on the server",
        "placement: b on the server n1:[1], in the simulator n1:[5]",
    ]
    sim[3] = make_start("c", 2.5, [("n2", [0, 1])])
    assert compute_differences(SERVER, sim, {}) == [
        "order: server started c (t=1.50) before g (t=2.00), the simulator g (t=1.00) before c (t=2.50)",
        "placement: b on the server n1:[1], in the simulator n1:[5]",
    ]
    # an expected difference names the job and why; it is then left out, and only it
    assert compute_differences(SERVER, sim, {"b": "why b may move"}) == [
        "order: server started c (t=1.50) before g (t=2.00), the simulator g (t=1.00) before c (t=2.50)"
    ]


def _place_in_turn(policy: str) -> list[Start]:
    """Jobs placed one a second on three 8-GPU nodes, as a simulator with placement `policy` would."""
    devices = {k: tuple(GpuInfo(i, f"n{k}-{i}", "H100-80GB", 81559) for i in range(8)) for k in (1, 2, 3)}
    nodes = [NodeState(NodeInfo(f"n{k}", devices[k], 2000, 24105)) for k in (1, 2, 3)]
    starts = []
    for t, (gpus, milli) in enumerate([(1, 1000), (1, 500), (2, 1000), (4, 1000), (1, 250), (2, 1000)]):
        p = compute_placement(ResourceRequest(gpus=gpus, gpu_milli=milli), nodes, policy)
        assert not isinstance(p, Unschedulable)
        apply_placement(nodes, p)
        starts.append(make_start(f"j{t}", float(t), [(p.node, p.gpu_indices)]))
    return starts


def test_a_simulator_on_another_placement_policy_is_caught() -> None:
    """The fidelity test's comparison fails when the simulator places with another policy than the server."""
    server = _place_in_turn("corral")
    assert compute_differences(server, _place_in_turn("corral"), {}) == []
    differences = compute_differences(server, _place_in_turn("spread"), {})
    assert differences and all(d.startswith("placement: ") for d in differences), differences


def test_the_simulators_json_and_the_observed_trace_round_trip() -> None:
    report = {"starts": [{"job": "j1", "start_s": 2.5, "placements": [{"node": "n2", "gpu_indices": [3, 1]}]}]}
    assert load_sim_starts(report) == [Start("j1", 2.5, (("n2", (1, 3)),))]
    rows = [{"job_id": "j1", "submit_s": "0.0", "duration_s": "3.0", "gpus": "2", "tenant": "nlp"}]
    text = render_trace(rows, {"j1": 0.012}, {"j1": 3.25})
    assert list(csv.DictReader(text.splitlines())) == [
        {"job_id": "j1", "submit_s": "0.0120000000", "duration_s": "3.2500000000", "gpus": "2", "tenant": "nlp"}
    ]


def test_run_times_count_from_the_event_that_started_the_job() -> None:
    """The server's pass lags its trigger by milliseconds; the simulator starts at the trigger itself, so each run
    is counted from that event and the simulator's end events land exactly on the server's."""
    submit = {"a": 0.0, "b": 1.0}
    start = {"a": 0.012, "b": 5.02}  # b waited for a's GPUs: its pass followed a's end at 5.0
    end = {"a": 5.0, "b": 7.0}
    assert compute_sim_durations(submit, start, end) == {"a": 5.0, "b": 2.0}


def test_a_job_a_pass_began_without_arrives_after_that_pass() -> None:
    """created_at is stamped before the submission commits: a pass that began 7 ms later and started another job
    but not this one may not have seen it, so the simulator is told it arrived just after that pass."""
    submit = {"a": 1.0, "b": 8.651, "c": 9.0}
    start = {"a": 8.658, "b": 8.721, "c": 9.5}  # a's pass at 8.658 started a, not b; c waited 0.5 s (seen)
    assert compute_sim_arrivals(submit, start) == {"a": 1.0, "b": 8.658 + GRID_S, "c": 9.0}


def test_ends_reported_together_stay_together_on_the_grid() -> None:
    """Two jobs whose ends the agent reported at one instant must end at one instant in the simulator: on the grid
    start + run time is exact, so they are not split over two cycles by the last bit of a float."""
    submit = compute_on_grid({"a": 0.1, "b": 0.3})
    start = compute_on_grid({"a": 0.1071, "b": 0.3093})
    end = compute_on_grid({"a": 14.5821, "b": 14.5821})
    d = compute_sim_durations(submit, start, end)
    assert submit["a"] + d["a"] == submit["b"] + d["b"] == end["a"]
