"""`corral simulate`: replay traces through the real scheduler (the same policies the server runs)."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from corral.core.errors import CorralError, ValidationError
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy
from corral.sim.openb import check_gpu_models, load_nodes, load_pods
from corral.sim.placement import CHECKPOINTS, PolicyResult, SeedResult, compute_report, parse_seeds, run_seed

simulate_app = typer.Typer(help="Replay cluster traces through Corral's scheduler and measure placement quality.")
_err = Console(stderr=True)


@simulate_app.callback()
def _group() -> None:
    """Replay cluster traces through Corral's scheduler (same policy code as the server)."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _plot(results: list[PolicyResult], out: Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:  # an extra since issue 12: the base install carries no plotting
        raise _fail("--plot needs matplotlib: pip install 'corral[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        xs = [int(k) for k in r.alloc_pct]
        ax.plot(
            xs, list(r.alloc_pct.values()), marker="o", label=f"{r.policy} ({r.unallocated_pct_at_100:.2f}% unalloc.)"
        )
    ax.plot([min(CHECKPOINTS), 100, max(CHECKPOINTS)], [min(CHECKPOINTS), 100, 100], "k:", lw=0.8, label="ideal")
    ax.set_xlabel("arrived GPU request (% of capacity)")
    ax.set_ylabel("GPU allocation (% of capacity)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


@simulate_app.command("openb")
def openb(
    nodes: Annotated[Path, typer.Option("--nodes", help="openb_node_list_*.csv")],
    pods: Annotated[Path, typer.Option("--pods", help="openb_pod_list_*.csv")],
    policy: Annotated[
        str,
        typer.Option(
            help="policy, or several comma-separated (fgd,bestfit,corral); a weighted mix is written fgd:1+packing:0.5"
        ),
    ] = DEFAULT_POLICY,
    seeds: Annotated[str, typer.Option(help="seeds: 42-51 or 42,43")] = "42-51",
    inflate: Annotated[float, typer.Option(help="resample pods until the GPU request is this x capacity")] = 1.3,
    as_json: Annotated[
        bool, typer.Option("--json", help="print JSON: one object, or a list for several policies")
    ] = False,
    plot: Annotated[Path | None, typer.Option(help="write allocation-vs-load curves to this PNG")] = None,
    workers: Annotated[int, typer.Option(help="processes running seeds in parallel")] = 1,
    skip_bad_rows: Annotated[
        bool, typer.Option(help="skip malformed pod rows (counted in the output) instead of failing")
    ] = False,
) -> None:
    """The FGD artifact's protocol (Weng et al., ATC'23): shuffle, resample to INFLATE x capacity per seed,
    place one pod at a time with no departures, record GPU allocation as arrived load crosses k%."""
    try:
        seed_list = parse_seeds(seeds)
        policies = [p.strip() for p in policy.split(",") if p.strip()]
        if not policies:
            raise ValidationError("policy", "no policy given")
        for p in policies:
            get_policy(p)
        if inflate < 1.0:
            raise ValidationError("inflate", f"must be >= 1.0 (it must reach 100% load), got {inflate}")
        node_list = load_nodes(nodes)
        pod_list, load_report = load_pods(pods, skip_bad_rows=skip_bad_rows)
        pod_list = check_gpu_models(pod_list, node_list, pods, load_report, skip_bad_rows)
    except CorralError as e:
        raise _fail(e.message) from e
    if load_report.skipped:
        typer.echo(
            f"skipped {sum(load_report.skipped.values())} of {load_report.rows} pod rows: "
            + "; ".join(f"{n} x {r}" for r, n in load_report.skipped.items()),
            err=True,
        )
    jobs = [(p, s) for p in policies for s in seed_list]
    done: dict[tuple[str, int], SeedResult] = {}
    show = sys.stderr.isatty()
    with Progress(console=_err, disable=not show, transient=True) as progress:
        task = progress.add_task(f"simulating {len(jobs)} runs", total=len(jobs))
        if workers > 1:
            with ProcessPoolExecutor(workers) as pool:
                futures = {(p, s): pool.submit(run_seed, node_list, pod_list, p, s, inflate) for p, s in jobs}
                for key, fut in futures.items():
                    done[key] = fut.result()
                    progress.advance(task)
        else:
            for p, s in jobs:
                done[(p, s)] = run_seed(node_list, pod_list, p, s, inflate)
                progress.advance(task)
    results = [PolicyResult(p, tuple(done[(p, s)] for s in seed_list)) for p in policies]
    reports = [compute_report(r, dict(load_report.skipped), load_report.rows) for r in results]
    if plot is not None:
        _plot(results, plot, f"{pods.name}, seeds {seeds}")
    if as_json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
        return
    out = Console()
    for result, r in zip(results, reports, strict=True):
        curve = "  ".join(f"{k}%:{v:.2f}" for k, v in result.alloc_pct.items())
        out.print(
            f"{r['policy']:>10}  unallocated at 100%: {r['unallocated_pct_at_100']:.2f}%   alloc {curve}",
            markup=False,
            highlight=False,
        )
