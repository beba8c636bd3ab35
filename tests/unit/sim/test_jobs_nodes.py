"""The job simulator places on nodes: big jobs become gangs, fragmentation delays jobs a GPU count would
start, and `--json --starts` lists where each job started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import corral.cli.simulate_jobs  # noqa: F401  (registers `simulate jobs`)
from corral.cli.simulate import simulate_app
from corral.scheduler.queueing import QueuedJob, QuotaBook, get_queueing_policy
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_trace import TraceJob, compute_gang, parse_cluster_spec


@pytest.mark.parametrize(
    "gpus, per_node, nodes, per_part",
    [
        (16, 8, 2, 8),
        (12, 8, 2, 6),
        (9, 8, 3, 3),
        (11, 8, 11, 1),
        (24, 8, 3, 8),
        (8, 8, 1, 8),
        (3, 8, 1, 3),
        (6, 4, 2, 3),
    ],
)
def test_a_job_bigger_than_a_node_becomes_an_even_gang(gpus: int, per_node: int, nodes: int, per_part: int) -> None:
    job = compute_gang(QueuedJob("j", "t", gpus), per_node)
    assert (job.nodes, job.gpus) == (nodes, per_part)
    assert job.need_milli == gpus * 1000


def test_shares_and_declared_gangs_are_left_alone() -> None:
    share = QueuedJob("s", "t", 1, gpu_milli=500)
    gang = QueuedJob("g", "t", 4, nodes=3)
    assert compute_gang(share, 8) is share
    assert compute_gang(gang, 2) is gang


def _run(jobs: list[tuple[str, int, float]], spec: str) -> dict[str, float]:
    trace = [TraceJob(QueuedJob(j, "t", g, submit_s=0.0), d) for j, g, d in jobs]
    result = simulate_jobs(trace, parse_cluster_spec(spec), SimConfig(get_queueing_policy("sjf"), quotas=QuotaBook()))
    return {r.id: r.first_start_s for r in result.records}


def test_free_gpus_split_over_nodes_do_not_start_a_job() -> None:
    # 2 nodes x 8: after a and b (6 GPUs each) 4 GPUs are free by count, 2 on each node: c (4) waits for a.
    # Counting GPUs per model (the old CountLedger) started c at once.
    starts = _run([("a", 6, 100.0), ("b", 6, 200.0), ("c", 4, 10.0)], "2x8xV100")
    assert starts["a"] == starts["b"] == 0.0
    assert starts["c"] == pytest.approx(100.0)


def test_a_sixteen_gpu_job_runs_as_a_gang_on_two_whole_nodes(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\nbig,0,50,16\nsmall,1,10,1\n")
    out = CliRunner().invoke(
        simulate_app, ["jobs", "--trace", str(trace), "--cluster", "3x8xA100", "--json", "--starts"]
    )
    assert out.exit_code == 0, out.output
    starts = {s["job"]: s for s in json.loads(out.stdout)["starts"]}
    big = starts["big"]["placements"]
    assert sorted(p["node"] for p in big) == ["n000", "n001"]
    assert all(p["gpu_indices"] == list(range(8)) for p in big)
    assert starts["small"]["placements"] == [{"node": "n002", "gpu_indices": [0]}]
    assert [s["job"] for s in json.loads(out.stdout)["starts"]] == ["big", "small"]


def test_starts_are_only_listed_when_asked(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\na,0,5,1\n")
    out = CliRunner().invoke(simulate_app, ["jobs", "--trace", str(trace), "--cluster", "1x8xA100", "--json"])
    assert out.exit_code == 0, out.output
    assert "starts" not in json.loads(out.stdout)
