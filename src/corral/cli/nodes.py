"""Inventory commands: nodes, gpus."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.cli.config import make_client
from corral.cli.output import print_json, print_table, short_time

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def nodes(as_json: JSON = False) -> None:
    """List nodes with their GPUs free/total."""
    with make_client() as c:
        items = c.nodes()
    if as_json:
        print_json(items)
        return
    rows = [(n.name, n.state, n.backend, f"{n.gpus_free}/{n.gpus_total}", ", ".join(n.gpu_models),
             short_time(n.last_heartbeat_at)) for n in items]
    print_table(None, ["NODE", "STATE", "BACKEND", "GPUS FREE", "MODELS", "HEARTBEAT"], rows)


def gpus(as_json: JSON = False) -> None:
    """List every GPU, free or used, and by which job."""
    with make_client() as c:
        items = c.gpus()
    if as_json:
        print_json(items)
        return
    rows = [(g.node, g.index, g.model, f"{g.memory_mib} MiB", g.numa_node,
             ",".join(map(str, g.nvlink_peers)), "unhealthy" if not g.healthy else ("used" if g.job_id else "free"),
             g.job_id) for g in items]
    print_table(None, ["NODE", "GPU", "MODEL", "MEMORY", "NUMA", "NVLINK", "STATUS", "JOB"], rows)
