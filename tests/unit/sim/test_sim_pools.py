"""The job simulator with cloud pools (issue 19's what-if): the autoscaler's own decide() in simulated time,
cost next to JCT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import corral.cli.simulate_jobs  # noqa: F401  (registers `simulate jobs`)
from corral.cli.simulate import simulate_app
from corral.core.errors import ValidationError
from corral.scheduler.queueing import get_queueing_policy
from corral.scheduler.queueing.jobs import QueuedJob
from corral.sim.jobs import SimConfig, SimResult, simulate_jobs
from corral.sim.jobs_metrics import compute_report
from corral.sim.jobs_trace import SimCluster, TraceJob
from corral.sim.pools import compute_pool_report, load_pools, parse_pools

G4 = {"name": "g4", "gpus": 4, "gpu_model": "A100-80GB", "price_per_hour": 4.0}
G8 = {"name": "g8", "gpus": 8, "gpu_model": "A100-80GB", "price_per_hour": 10.0}


def pools_doc(max_nodes: int = 2, types: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    pool = {"name": "burst", "instance_types": types or [G4], "max_nodes": max_nodes, "idle_s": 300, **extra}
    return {"boot_s": 60, "pools": [pool]}


def job(i: int, gpus: int, submit_s: float, duration_s: float) -> TraceJob:
    return TraceJob(
        QueuedJob(id=f"j{i}", tenant="a", gpus=gpus, submit_s=submit_s, known_duration_s=duration_s), duration_s
    )


def run(trace: list[TraceJob], doc: dict[str, Any], queueing: str = "corral") -> SimResult:
    return simulate_jobs(trace, SimCluster(0, {}), SimConfig(get_queueing_policy(queueing), pools=parse_pools(doc)))


def test_jobs_run_on_launched_nodes_which_are_released_when_idle() -> None:
    trace = [job(0, 4, 0, 600), job(1, 4, 10, 600)]
    result = run(trace, pools_doc())
    assert sorted(r.id for r in result.records) == ["j0", "j1"] and result.unfinished == []
    nodes = sorted(result.pool_nodes, key=lambda n: n.launched_s)
    assert [(n.launched_s, n.joined_s) for n in nodes] == [(0.0, 60.0), (10.0, 70.0)]  # boot_s later
    # each job waited for its node's boot: JCT = boot + run
    assert sorted(r.jct_s for r in result.records) == pytest.approx([660.0, 660.0], abs=1.5)
    for n in nodes:  # released after the pool's idle time, not at the end of the run
        assert n.ended_s == pytest.approx(n.joined_s + 600 + 300, abs=1.5) and n.reason.startswith("idle for")
    report = compute_pool_report(result.pool_nodes, 0.0, result.end_s, result.unfinished)
    assert report["cost"] == pytest.approx(2 * 4.0 * 960 / 3600, rel=0.01)  # launch to release, 4.0/h
    assert report["launches"] == 2 and report["peak_gpus"] == 8 and report["unscheduled"] == 0


def test_a_job_no_pool_can_ever_hold_never_runs_and_is_reported() -> None:
    # 32 GPUs is a gang of 8 x 4-GPU nodes; the pool starts at most 2
    result = run([job(0, 4, 0, 100), job(1, 32, 0, 100)], pools_doc())
    assert [r.id for r in result.records] == ["j0"]
    assert result.unfinished == ["j1"]
    assert compute_pool_report(result.pool_nodes, 0.0, result.end_s, result.unfinished)["unscheduled"] == 1
    assert all(n.ended_s is not None and n.ended_s < result.end_s + 1 for n in result.pool_nodes)


def test_a_larger_pool_lowers_jct_and_costs_more_on_a_burst() -> None:
    trace = [job(i, 4, i * 5.0, 1800) for i in range(6)]  # six 4-GPU jobs at once, half an hour each
    small, large = run(trace, pools_doc(max_nodes=1)), run(trace, pools_doc(max_nodes=6))
    jct = {k: compute_report(r)["avg_jct_s"] for k, r in (("small", small), ("large", large))}
    assert len(small.records) == len(large.records) == 6
    assert jct["large"] < jct["small"] / 2  # in parallel rather than one after another
    cost = {k: compute_pool_report(r.pool_nodes, 0.0, r.end_s, [])["cost"] for k, r in (("s", small), ("l", large))}
    assert cost["l"] > cost["s"]  # six nodes booting and idling out, against one


def test_the_servers_policy_starts_the_cheapest_type_that_fits() -> None:
    types = [G8, G4]  # order does not matter: cheapest that fits
    result = run([job(0, 2, 0, 100), job(1, 8, 1000, 100)], pools_doc(max_nodes=2, types=types), queueing="fifo")
    by_first = sorted(result.pool_nodes, key=lambda n: n.launched_s)
    assert [n.instance_type for n in by_first] == ["g4", "g8"]  # the 8-GPU job fits only g8


def test_a_static_cluster_is_used_before_any_node_is_started() -> None:
    result = simulate_jobs(
        [job(0, 4, 0, 100)],
        SimCluster(1, {"A100-80GB": 4000}),
        SimConfig(get_queueing_policy("corral"), pools=parse_pools(pools_doc())),
    )
    assert len(result.records) == 1 and result.pool_nodes == ()


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (pools_doc(max_nodes=-1), "pools[0].max_nodes"),
        (pools_doc(types=[{**G4, "price_per_hour": -1}]), "pools[0].instance_types.price_per_hour"),
        (pools_doc(types=[{**G4, "colour": "red"}]), "pools[0].instance_types[0].colour"),
        (pools_doc(policy="mysite.p"), "pools[0].policy"),
        ({"boot_s": -5, "pools": pools_doc()["pools"]}, "boot_s"),
        ({"pools": []}, "pools"),
    ],
)
def test_a_bad_pools_file_names_the_file_and_field(tmp_path: Path, doc: dict[str, Any], field: str) -> None:
    path = tmp_path / "pools.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValidationError) as e:
        load_pools(path)
    assert e.value.field == f"{path}: {field}"


def test_cli_prints_cost_next_to_jct(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\na,0,600,4\nb,10,100,64\n")
    pools = tmp_path / "pools.json"
    pools.write_text(json.dumps(pools_doc()))
    out = CliRunner().invoke(simulate_app, ["jobs", "--trace", str(trace), "--pools", str(pools), "--json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.stdout)
    assert figures["jobs"] == 1 and figures["avg_jct_s"] > 600
    assert figures["pools"]["cost"] > 0 and figures["pools"]["unscheduled_jobs"] == ["b"]
    text = CliRunner().invoke(simulate_app, ["jobs", "--trace", str(trace), "--pools", str(pools)])
    assert "cost" in text.stdout and "never ran" in text.stdout and "b" in text.stdout
