"""The job simulator: every job completes, GPUs are never over-committed, runs are deterministic, and
the CLI prints the documented JSON keys and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import corral.cli.simulate_jobs  # noqa: F401  (registers `simulate jobs`)
from corral.cli.simulate import simulate_app
from corral.scheduler.queueing import POLICIES, get_queueing_policy
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_metrics import compute_report
from corral.sim.jobs_trace import load_trace, parse_cluster_spec
from realparts import missing_real_part

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
TIRESIAS = TRACES / "tiresias" / "60_job.csv"
PHILLY = TRACES / "philly-chronus" / "trace_job_Philly_MIX1.csv"


@pytest.fixture
def traces_present() -> None:
    """Under CI=true missing traces fail the run (a shipped simulator is never quietly untested)."""
    for path in (TIRESIAS, PHILLY):
        if not path.exists():
            missing_real_part(f"the trace {path}", "put the public traces in ../shared/traces (see its README.md)")


needs_traces = pytest.mark.usefixtures("traces_present")
KEYS = {
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "p99_wait_s",
    "makespan_s",
    "gpu_util_pct",
    "tenants",
}


@needs_traces
@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_job_completes_without_over_commit(policy: str) -> None:
    trace, _ = load_trace(TIRESIAS, "tiresias")
    cluster = parse_cluster_spec("4x4xV100-32GB")
    result = simulate_jobs(trace, cluster, SimConfig(get_queueing_policy(policy)))
    assert sorted(r.id for r in result.records) == sorted(t.job.id for t in trace)
    for r in result.records:
        assert r.end_s - r.first_start_s >= r.duration_s - 1e-6 and r.first_start_s >= r.submit_s
    points = sorted({iv.start_s for iv in result.held})
    for t in points:
        assert sum(iv.milli for iv in result.held if iv.start_s <= t < iv.end_s) <= cluster.pool_milli["V100-32GB"]


@needs_traces
def test_same_input_same_result() -> None:
    trace, _ = load_trace(TIRESIAS, "tiresias")
    cluster = parse_cluster_spec("2x4xV100-32GB")
    a = compute_report(simulate_jobs(trace, cluster, SimConfig(get_queueing_policy("corral"))))
    b = compute_report(simulate_jobs(trace, cluster, SimConfig(get_queueing_policy("corral"))))
    assert a == b


@needs_traces
def test_corral_beats_fifo_on_a_philly_subset() -> None:
    trace, _ = load_trace(PHILLY, "chronus")
    subset = [t for t in trace if t.job.submit_s < 600]
    cluster = parse_cluster_spec("12x8xV100-32GB")
    fifo = simulate_jobs(subset, cluster, SimConfig(get_queueing_policy("fifo")))
    corral = simulate_jobs(subset, cluster, SimConfig(get_queueing_policy("corral")))
    assert compute_report(corral)["avg_jct_s"] < compute_report(fifo)["avg_jct_s"]  # type: ignore[operator]


@needs_traces
def test_cli_json_has_the_documented_keys() -> None:
    out = CliRunner().invoke(
        simulate_app,
        [
            "jobs",
            "--trace",
            str(TIRESIAS),
            "--format",
            "tiresias",
            "--cluster",
            "4x4xV100-32GB",
            "--queueing",
            "sjf",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    figures = json.loads(out.stdout)
    assert set(figures) == KEYS and figures["jobs"] == 60
    assert set(figures["tenants"]["default"]) == {"share_pct", "entitled_pct", "avg_wait_s"}


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--format", "yaml"], "unknown format 'yaml'"),
        (["--queueing", "lottery"], "unknown queueing 'lottery'"),
        (["--cluster", "8xV100"], "bad cluster spec"),
    ],
)
def test_cli_bad_input_is_one_clear_error(tmp_path: Path, args: list[str], needle: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\na,0,10,1\n")
    base = {"--trace": str(trace), "--format": "corral", "--cluster": "1x8xV100-32GB"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    out = CliRunner().invoke(simulate_app, ["jobs", *[x for kv in base.items() for x in kv]])
    assert out.exit_code == 1 and needle in out.output


def test_cli_reports_the_bad_row(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\na,0,10,1\nb,0,ten,1\n")
    out = CliRunner().invoke(simulate_app, ["jobs", "--trace", str(trace), "--cluster", "1x8xV100-32GB"])
    assert out.exit_code == 1 and f"{trace}:3: duration_s" in out.output


def test_cli_reports_skipped_rows(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus\na,0,10,1\nb,0,10,0\n")
    out = CliRunner().invoke(simulate_app, ["jobs", "--trace", str(trace), "--cluster", "1x8xV100-32GB", "--json"])
    assert out.exit_code == 0 and "skipped 1 of 2 rows: 1 x no GPUs" in out.output


@needs_traces
def test_cli_writes_a_plot(tmp_path: Path) -> None:
    png = tmp_path / "held.png"
    out = CliRunner().invoke(
        simulate_app,
        ["jobs", "--trace", str(TIRESIAS), "--format", "tiresias", "--cluster", "4x4xV100-32GB", "--plot", str(png)],
    )
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
