"""Inventory and operations: `corral nodes [cordon|uncordon|drain|events]`, `corral gpus [enable|disable|events]`,
`corral sim fault`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from corral.cli import light
from corral.cli.config import make_client
from corral.cli.output import console, print_json, short_time

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

nodes_app = typer.Typer(help="Nodes: list them (no subcommand), cordon, drain.", invoke_without_command=True)
gpus_app = typer.Typer(help="GPUs: list them (no subcommand), enable, disable.", invoke_without_command=True)
sim_app = typer.Typer(help="Simulated GPUs: inject faults.", no_args_is_help=True)


@nodes_app.callback()
def nodes(
    ctx: typer.Context,
    as_json: JSON = False,
    wide: Annotated[
        bool, typer.Option("--wide", "-w", help="Every column, full times with their zone (default: fits 80 columns).")
    ] = False,
) -> None:
    """List nodes with their GPUs free/total (as sinfo: short columns that fit 80; --wide for all)."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client() as c:
        items = c.nodes()
    if as_json:
        return print_json(items)
    if not items:
        print("no nodes (start an agent: corral agent --join ..., see README)")
        return
    columns, rows = compute_node_table(items, time.time(), wide)
    light.print_table(columns, rows if wide else light.fit_last_column(columns, rows, 80, last_min=10))


def _pool_text(n: Any) -> str:
    """`static`, `gpu-cloud`, or for a node of an existing cluster its pool and source: `hpc/slurm`."""
    pool, source = getattr(n, "pool", "static"), getattr(n, "source", "agent")
    return pool if source == "agent" else f"{pool}/{source}"


def compute_node_table(items: Sequence[Any], now: float, wide: bool) -> tuple[list[str], list[list[str]]]:
    """The nodes table: compact (NODE, STATE, POOL, GPUS free/total, DOWN, SEEN ago, MODELS) or every column. STATE
    reads DEGRADED for a ready node with a GPU out of service, CORDONED for one taking no new work."""
    if wide:
        columns = [
            "NODE", "STATE", "POOL", "SOURCE", "BACKEND", "GPUS FREE", "UNHEALTHY", "MODELS", "JOBS RUN AS", "HEARTBEAT"
        ]  # fmt: skip
        rows = [
            [
                n.name,
                n.state + (" (cordoned)" if n.cordoned else ""),
                getattr(n, "pool", "static"),
                getattr(n, "source", "agent"),
                n.backend,
                f"{n.gpus_free}/{n.gpus_total}",
                str(n.gpus_unhealthy or ""),
                ", ".join(n.gpu_models),
                n.isolation or "?",
                light.zoned(short_time(n.last_heartbeat_at)),
            ]
            for n in items
        ]
        return columns, rows
    columns = ["NODE", "STATE", "POOL", "GPUS", "DOWN", "SEEN", "MODELS"]
    rows = []
    for n in items:
        state = n.state
        if n.cordoned and state == "READY":
            state = "CORDONED"
        elif n.gpus_unhealthy and state == "READY":
            state = "DEGRADED"
        seen = light.epoch(n.last_heartbeat_at)
        rows.append(
            [
                light.clip(n.name, 20),
                state,
                light.clip(_pool_text(n), 16),
                f"{n.gpus_free}/{n.gpus_total}",
                str(n.gpus_unhealthy or ""),
                "" if seen is None else light.format_duration(now - seen) + " ago",
                ",".join(n.gpu_models),
            ]
        )
    return columns, rows


def _node_action(action: str, node: str) -> None:
    with make_client() as c:
        n = c.node_action(node, action)
    print(f"node {n.name}: {n.state}{' cordoned' if n.cordoned else ''}")


@nodes_app.command("cordon")
def cordon(node: str) -> None:
    """No new work on NODE; running jobs stay (admins)."""
    _node_action("cordon", node)


@nodes_app.command("uncordon")
def uncordon(node: str) -> None:
    """Let NODE take work again (admins)."""
    _node_action("uncordon", node)


@nodes_app.command("drain")
def drain(node: str) -> None:
    """Cordon NODE and send its running jobs back to the queue (admins)."""
    _node_action("drain", node)


@nodes_app.command("events")
def node_events(node: str, as_json: JSON = False) -> None:
    """Health and admin events of NODE, newest first."""
    with make_client() as c:
        items = c.node_events(node)
    if as_json:
        return print_json(items)
    for e in items:
        gpu = f"GPU {e['gpu']}" if e.get("gpu") is not None else "node"
        console.print(f"{e['at'][:19]}  {gpu:<7} {e['kind']:<14} {e['message']}", highlight=False, markup=False)


@gpus_app.callback()
def gpus(
    ctx: typer.Context,
    as_json: JSON = False,
    wide: Annotated[bool, typer.Option("--wide", "-w", help="Every column (default: fits 80 columns).")] = False,
) -> None:
    """List every GPU, free or used, and by which job."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client() as c:
        items = c.gpus()
    if as_json:
        return print_json(items)
    columns, rows = compute_gpu_table(items, wide)
    light.print_table(columns, rows if wide else light.fit_last_column(columns, rows, 80, last_min=12))


def compute_gpu_table(items: Sequence[Any], wide: bool) -> tuple[list[str], list[list[str]]]:
    """One row per GPU; compact: memory in GiB, NVLink as a peer count, the status last (clipped to fit)."""

    def status(g: Any) -> str:
        if g.health != "HEALTHY":
            return str(g.health).lower() + (f" ({g.health_reason})" if g.health_reason else "")
        return "used" if g.job_id or g.used_milli else "free"  # another tenant's job shows no id

    if wide:
        columns = ["NODE", "GPU", "MODEL", "MEMORY", "NUMA", "NVLINK", "STATUS", "JOB"]
        rows = [
            [
                g.node,
                str(g.index),
                g.model,
                f"{g.memory_mib} MiB",
                "" if g.numa_node is None else str(g.numa_node),
                ",".join(map(str, g.nvlink_peers)),
                status(g),
                "" if g.job_id is None else str(g.job_id),
            ]
            for g in items
        ]
        return columns, rows
    columns = ["NODE", "GPU", "MODEL", "MEM", "NVLINK", "JOB", "STATUS"]
    rows = [
        [
            light.clip(g.node, 16),
            str(g.index),
            light.clip(g.model, 22),
            f"{g.memory_mib / 1024:.0f}G",
            f"{len(g.nvlink_peers)} peers" if g.nvlink_peers else "",
            "" if g.job_id is None else str(g.job_id),
            status(g),
        ]
        for g in items
    ]
    return columns, rows


@gpus_app.command("enable")
def enable(node: str, index: int) -> None:
    """Return a GPU to the pool (clears an UNHEALTHY verdict too) (admins)."""
    with make_client() as c:
        c.gpu_action(node, index, "enable")
    print(f"GPU {index} on {node} enabled")


@gpus_app.command("disable")
def disable(node: str, index: int) -> None:
    """Take a GPU out of the pool until enabled (admins)."""
    with make_client() as c:
        c.gpu_action(node, index, "disable")
    print(f"GPU {index} on {node} disabled")


@sim_app.command("fault")
def fault(
    node: str,
    gpu_index: int,
    xid: Annotated[int | None, typer.Option(help="Raise this Xid (e.g. 79: fallen off the bus).")] = None,
    ecc: Annotated[bool, typer.Option("--ecc", help="A double-bit ECC error.")] = False,
    off_bus: Annotated[bool, typer.Option("--off-bus", help="The GPU falls off the bus.")] = False,
    temp: Annotated[float | None, typer.Option("--temp", help="Temperature in C.")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the GPU's faults.")] = False,
) -> None:
    """Inject a fault into a simulated GPU (refused for nodes with real GPUs) (admins)."""
    body: dict[str, Any] = {}
    if xid is not None:
        body["xid"] = xid
    if ecc:
        body["ecc"] = True
    if off_bus:
        body["off_bus"] = True
    if temp is not None:
        body["temperature_c"] = temp
    if clear:
        body["clear"] = True
    if not body:
        raise typer.BadParameter("name a fault: --xid N, --ecc, --off-bus, --temp C, or --clear", param_hint="fault")
    with make_client() as c:
        c.inject_fault(node, gpu_index, body)
    print(f"GPU {gpu_index} on {node}: {describe_fault(body)}")


def describe_fault(body: dict[str, Any]) -> str:
    """The injected fault in words (`Xid 79 raised`), as the CLI confirms it."""
    if body.get("clear"):
        return "faults cleared"
    said = []
    if "xid" in body:
        said.append(f"Xid {body['xid']} raised")
    if body.get("ecc"):
        said.append("a double-bit ECC error raised")
    if body.get("off_bus"):
        said.append("fallen off the bus")
    if "temperature_c" in body:
        said.append(f"temperature set to {body['temperature_c']:g} °C")
    return ", ".join(said)
