"""`corral simulate jobs`: replay a job trace through the server's scheduling cycle in simulated time."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from corral.cli.simulate import simulate_app
from corral.core.errors import CorralError, ValidationError
from corral.scheduler.plugins import DEFAULT_POLICY, policy_names
from corral.scheduler.queueing import POLICIES, QuotaBook, get_queueing_policy
from corral.sim.jobs import SimConfig, SimResult, simulate_jobs
from corral.sim.jobs_metrics import compute_report
from corral.sim.jobs_trace import FORMATS, SimCluster, load_trace, parse_cluster_spec
from corral.sim.pools import compute_pool_report, load_pools

_err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _plot(result: SimResult, out: Path, title: str) -> None:
    """GPUs held per tenant over time (stacked), one point a minute."""
    try:
        import matplotlib
    except ImportError:  # an extra since issue 12: the base install carries no plotting
        raise _fail("--plot needs matplotlib: pip install 'corral[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((iv.end_s for iv in result.held), default=0.0)
    step = 60.0
    n = int(end // step) + 1
    tenants = sorted({iv.tenant for iv in result.held})
    series = {t: [0.0] * n for t in tenants}
    for iv in result.held:
        for k in range(int(iv.start_s // step), min(int(iv.end_s // step) + 1, n)):
            lo, hi = max(iv.start_s, k * step), min(iv.end_s, (k + 1) * step)
            if hi > lo:
                series[iv.tenant][k] += (hi - lo) / step * iv.milli / 1000
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.stackplot([k * step / 3600 for k in range(n)], *[series[t] for t in tenants], labels=tenants)
    ax.axhline(result.capacity_milli / 1000, color="k", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("GPUs held")
    ax.set_title(title)
    if len(tenants) <= 16:
        ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


@simulate_app.command("jobs")
def jobs(
    trace: Annotated[Path, typer.Option("--trace", help="job trace CSV")],
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="NODESxGPUSxMODEL (e.g. 32x8xV100-32GB, groups joined by +) or a nodes CSV (optional with --pools)",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"trace format: {'|'.join(FORMATS)}")] = "corral",
    queueing: Annotated[str | None, typer.Option("--queueing", help=f"{'|'.join(POLICIES)} (default: predict)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="write GPUs held per tenant over time to this PNG")
    ] = None,
    cycle_s: Annotated[float, typer.Option(help="seconds between admission cycles")] = 1.0,
    grace_s: Annotated[float, typer.Option(help="a preempted job keeps its GPUs this long")] = 5.0,
    restart_s: Annotated[float, typer.Option(help="overhead of each restart after preemption")] = 5.0,
    placement: Annotated[
        str, typer.Option("--placement", help=f"placement policy (default: {DEFAULT_POLICY}, the server's)")
    ] = DEFAULT_POLICY,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="seeded tie-breaking (default: the first node in the list, as the server does)"),
    ] = None,
    quotas: Annotated[
        str,
        typer.Option(
            "--quotas",
            help="equal: each tenant guaranteed an equal part when the "
            "queueing does fair share; none: no quotas (a server without quotas)",
        ),
    ] = "equal",
    starts: Annotated[bool, typer.Option("--starts", help="with --json: list every start and its placements")] = False,
    pools_file: Annotated[
        Path | None,
        typer.Option(
            "--pools", help="cloud pools (JSON, docs/elastic.md): run the autoscaler, report cost next to JCT"
        ),
    ] = None,
) -> None:
    """Discrete-event replay of a job trace through Corral's queueing (the server's code), in simulated time."""
    try:
        policy = get_queueing_policy(queueing)
        if fmt not in FORMATS:
            raise ValidationError("--format", f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
        if cluster is None and pools_file is None:
            raise ValidationError("--cluster", "required (it may be left out with --pools: no static nodes)")
        pool = parse_cluster_spec(cluster) if cluster is not None else SimCluster(0, {})
        pools = load_pools(pools_file) if pools_file is not None else None
        if placement not in policy_names():
            raise ValidationError(
                "--placement", f"unknown policy {placement!r}; expected one of {', '.join(policy_names())}"
            )
        if quotas not in ("equal", "none"):
            raise ValidationError("--quotas", f"expected equal or none, got {quotas!r}")
        if cycle_s <= 0 or grace_s < 0 or restart_s < 0:
            raise ValidationError("--cycle-s", "cycle must be > 0; grace and restart >= 0")
        trace_jobs, report = load_trace(trace, fmt)
    except CorralError as e:
        raise _fail(e.message) from e
    if report.skipped:
        typer.echo(report.summary(), err=True)
    cfg = SimConfig(
        policy,
        cycle_s=cycle_s,
        grace_s=grace_s,
        restart_overhead_s=restart_s,
        placement=placement,
        seed=seed,
        quotas=QuotaBook() if quotas == "none" else None,
        pools=pools,
    )
    with Progress(console=_err, disable=not sys.stderr.isatty(), transient=True) as progress:
        task = progress.add_task(f"{policy.name} on {pool.gpus} GPUs", total=len(trace_jobs))
        result = simulate_jobs(trace_jobs, pool, cfg, progress=lambda n: progress.advance(task, n))
    figures = compute_report(result)
    if pools is not None:
        first = min((t.job.submit_s for t in trace_jobs), default=0.0)
        figures["pools"] = compute_pool_report(result.pool_nodes, first, result.end_s, result.unfinished)
    where = pool.describe() if cluster is not None else "no static nodes"
    if pools is not None:
        where += " + pools " + ", ".join(p.name for p in pools.pools)
    if starts:
        figures["starts"] = [
            {
                "job": s.job_id,
                "start_s": s.start_s,
                "placements": [{"node": p.node, "gpu_indices": list(p.gpu_indices)} for p in s.placements],
            }
            for s in result.starts
        ]
    if plot is not None:
        _plot(result, plot, f"{trace.name}, {policy.name}, {where}")
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    out = Console()
    out.print(f"{trace.name} on {where}, queueing {policy.name}", markup=False, highlight=False)
    for key in (
        "jobs",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "avg_wait_s",
        "p99_wait_s",
        "makespan_s",
        "gpu_util_pct",
    ):
        out.print(f"  {key:<14}{figures[key]}", markup=False, highlight=False)
    if pools is not None:
        pf: dict[str, object] = figures["pools"]  # type: ignore[assignment]
        for key in ("cost", "node_hours", "gpu_hours", "avg_gpus", "peak_gpus", "launches", "unscheduled"):
            out.print(f"  {key:<14}{pf[key]}", markup=False, highlight=False)
        if result.unfinished:
            listed = ", ".join(result.unfinished[:10]) + (" ..." if len(result.unfinished) > 10 else "")
            out.print(f"  never ran (no pool could start a node for them): {listed}", markup=False, highlight=False)
    out.print(f"  {'tenant':<16}{'share %':>9}{'entitled %':>11}{'avg wait s':>11}", markup=False, highlight=False)
    tenants: dict[str, dict[str, float]] = figures["tenants"]  # type: ignore[assignment]
    for t, v in tenants.items():
        out.print(
            f"  {t:<16}{v['share_pct']:>9.2f}{v['entitled_pct']:>11.2f}{v['avg_wait_s']:>11.1f}",
            markup=False,
            highlight=False,
        )
