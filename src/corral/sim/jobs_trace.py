"""Load job traces (chronus, tiresias, corral formats) and cluster specs for the job simulator.

A malformed row raises TraceError naming file, line and field; a well-formed row the simulator cannot
use (no GPUs, zero duration) is skipped and counted per reason in the LoadReport, never dropped silently.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corral.core.errors import ValidationError
from corral.core.gpuspec import DEFAULT_MEMORY_GB
from corral.core.resources import FULL_GPU_MILLI, GpuInfo, NodeInfo
from corral.scheduler.queueing.jobs import QueuedJob
from corral.scheduler.queueing.prediction import JobFeatures
from corral.sim.openb import TraceError, load_nodes

FORMATS = ("chronus", "tiresias", "corral")
COLUMNS = {
    "chronus": ("job_id", "user", "num_gpu", "submit_time", "duration"),
    "tiresias": ("job_id", "num_gpu", "submit_time", "duration"),
    "corral": ("job_id", "submit_s", "duration_s", "gpus"),
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job of the trace and how long it really runs (the simulator's secret; `sjf` is told it).
    `features`: what a run-time predictor may know of it at submission (None: tenant and GPUs only)."""

    job: QueuedJob
    duration_s: float
    features: JobFeatures | None = None


@dataclass(slots=True)
class LoadReport:
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        parts = "; ".join(f"{n} x {reason}" for reason, n in sorted(self.skipped.items()))
        return f"skipped {sum(self.skipped.values())} of {self.rows} rows: {parts}"


class _Skip(Exception):
    pass


def _num(
    row: dict[str, str],
    name: str,
    path: Path,
    line: int,
    kind: type[int] | type[float] = float,
    minimum: float = 0.0,
    default: float | None = None,
) -> float:
    raw = (row.get(name) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = float(kind(raw))
    except ValueError:
        raise TraceError(
            path, line, name, f"expected {'an integer' if kind is int else 'a number'}, got {raw!r}"
        ) from None
    if not math.isfinite(value) or value < minimum:
        raise TraceError(path, line, name, f"must be >= {minimum:g}, got {raw}")
    return value


def _chronus(row: dict[str, str], path: Path, line: int) -> TraceJob:
    tenant = (row.get("user") or "").strip()
    if not tenant:
        raise TraceError(path, line, "user", "empty tenant")
    tj = _common(row, path, line, tenant, "num_gpu", "submit_time", "duration")
    # Philly's virtual cluster is the tenant and the only user known; the model trained stands in for the job's name.
    name = (row.get("model_name") or "").strip()
    return replace(tj, features=JobFeatures(user=tenant, tenant=tenant, name=name, gpus=tj.job.gpus))


def _tiresias(row: dict[str, str], path: Path, line: int) -> TraceJob:
    return _common(row, path, line, "default", "num_gpu", "submit_time", "duration")


def _common(
    row: dict[str, str],
    path: Path,
    line: int,
    tenant: str,
    gpus_col: str,
    submit_col: str,
    duration_col: str,
    **extra: Any,
) -> TraceJob:  # extra: more QueuedJob fields, checked by it
    gpus = int(_num(row, gpus_col, path, line, int))
    submit = _num(row, submit_col, path, line)
    duration = _num(row, duration_col, path, line)
    if gpus == 0:
        raise _Skip("no GPUs (CPU-only job)")
    if duration == 0:
        raise _Skip("zero duration")
    job_id = (row.get("job_id") or "").strip() or f"line-{line}"
    try:
        job = QueuedJob(id=job_id, tenant=tenant, gpus=gpus, submit_s=submit, known_duration_s=duration, **extra)
    except ValidationError as e:
        raise TraceError(path, line, e.field, e.problem) from e
    return TraceJob(job, duration)


def _corral(row: dict[str, str], path: Path, line: int) -> TraceJob:
    fraction = _num(row, "gpu_fraction", path, line, default=1.0)
    if not 0 < fraction <= 1:
        raise TraceError(path, line, "gpu_fraction", f"must be in (0, 1], got {fraction:g}")
    limit = _num(row, "time_limit_s", path, line, default=-1.0) if (row.get("time_limit_s") or "").strip() else None
    if limit is not None and limit <= 0:
        raise TraceError(path, line, "time_limit_s", f"must be > 0, got {limit:g}")
    milli = max(1, round(fraction * FULL_GPU_MILLI))
    if milli < FULL_GPU_MILLI and (row.get("gpus") or "").strip() not in ("1", "0"):
        raise TraceError(path, line, "gpu_fraction", "a GPU fraction below 1 needs gpus=1")
    return _common(
        row,
        path,
        line,
        (row.get("tenant") or "").strip() or "default",
        "gpus",
        "submit_s",
        "duration_s",
        gpu_milli=milli,
        model=(row.get("model") or "").strip(),
        priority=int(_num(row, "priority", path, line, int, minimum=-(10**9), default=0)),
        time_limit_s=limit,
        queue=(row.get("queue") or "").strip(),
        nodes=int(_num(row, "nodes", path, line, int, minimum=1, default=1)),
    )


PARSERS: dict[str, Callable[[dict[str, str], Path, int], TraceJob]] = {
    "chronus": _chronus,
    "tiresias": _tiresias,
    "corral": _corral,
}


def load_trace(path: Path, fmt: str) -> tuple[list[TraceJob], LoadReport]:
    """Jobs of a trace file sorted by submit time (then file order)."""
    if fmt not in PARSERS:
        raise ValidationError("format", f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    report = LoadReport()
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in COLUMNS[fmt] if c not in header]
            if missing:
                fits = [f for f in FORMATS if f != fmt and all(c in header for c in COLUMNS[f])]
                hint = f"; its columns are those of format {fits[0]!r}: add --format {fits[0]}" if fits else ""
                raise TraceError(
                    path, 1, missing[0], f"missing column for format {fmt!r} (header has {reader.fieldnames}){hint}"
                )
            for row in reader:
                report.rows += 1
                try:
                    tj = PARSERS[fmt](row, path, reader.line_num)
                except _Skip as s:
                    report.skipped[str(s)] += 1
                    continue
                if tj.job.id in seen:
                    raise TraceError(path, reader.line_num, "job_id", f"duplicate job id {tj.job.id!r}")
                seen.add(tj.job.id)
                jobs.append(tj)
    except OSError as e:
        raise TraceError(path, 0, "file", e.strerror or str(e)) from e
    except (csv.Error, UnicodeDecodeError) as e:
        raise TraceError(path, 0, "file", f"not a readable CSV: {e}") from e
    if not jobs:
        raise TraceError(path, 1, "job_id", "no usable jobs in file")
    jobs.sort(key=lambda t: t.job.submit_s)
    return jobs, report


@dataclass(frozen=True, slots=True)
class SimCluster:
    """The job simulator's machines: `node_list` (names `n000`.. or the CSV's `sn`), the node count and
    milli-GPUs per model. A SimCluster built by hand without `node_list` gets `nodes` nodes with each model's
    GPUs split as evenly as possible among them (`infos()`)."""

    nodes: int
    pool_milli: dict[str, int]
    node_list: tuple[NodeInfo, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(self.pool_milli.values()) // FULL_GPU_MILLI

    def describe(self) -> str:
        return f"{self.nodes} nodes, " + ", ".join(f"{m // 1000} x {k}" for k, m in self.pool_milli.items())

    def infos(self) -> tuple[NodeInfo, ...]:
        if self.node_list:
            return self.node_list
        n = max(self.nodes, 1)
        per_node: list[list[str]] = [[] for _ in range(n)]
        for model, milli in self.pool_milli.items():
            count = milli // FULL_GPU_MILLI
            for i in range(n):
                per_node[i] += [model] * (count // n + (i < count % n))
        return tuple(compute_node(f"n{i:03d}", models) for i, models in enumerate(per_node))

    def max_gpus_per_node(self) -> int:
        return max((n.gpu_count for n in self.infos()), default=0)


# Host resources of a simulated node: the trace jobs ask for none, so these never bind.
SIM_NODE_CPU_MILLI = 1_000_000
SIM_NODE_MEMORY_MIB = 16 * 1024 * 1024


def compute_node(name: str, models: list[str]) -> NodeInfo:
    """A simulated node with one GPU per entry of `models`."""
    gpus = tuple(GpuInfo(i, f"{name}-gpu{i}", m, _memory_gb(m) * 1024) for i, m in enumerate(models))
    return NodeInfo(name, gpus, SIM_NODE_CPU_MILLI, SIM_NODE_MEMORY_MIB)


def _memory_gb(model: str) -> int:
    m = re.search(r"-(\d+)GB$", model)
    return int(m[1]) if m else DEFAULT_MEMORY_GB.get(model.upper(), 16)


def compute_gang(job: QueuedJob, per_node: int) -> QueuedJob:
    """A job asking more GPUs than a node has becomes a gang: the fewest nodes n >= ceil(gpus / per_node)
    such that n divides gpus (gpus / n per node, all nodes alike, as a gang part must be). E.g. 16 on
    8-GPU nodes -> 2 x 8, 12 -> 2 x 6, 9 -> 3 x 3, 11 (prime) -> 11 x 1. Jobs that fit one node, gangs
    already, and GPU shares are unchanged."""
    if per_node <= 0 or job.nodes > 1 or job.gpus <= per_node:
        return job
    n = -(-job.gpus // per_node)
    while job.gpus % n:
        n += 1
    return replace(job, gpus=job.gpus // n, nodes=n)


_GROUP = re.compile(r"^(?P<nodes>\d+)x(?P<gpus>\d+)x(?P<model>[A-Za-z0-9][A-Za-z0-9._-]*)$")


def parse_cluster_spec(spec: str) -> SimCluster:
    """`32x8xV100-32GB` (nodes x GPUs per node x model; nodes named n000, n001.. in order), groups joined by
    `+`, or a nodes CSV (`sn,cpu_milli,memory_mib,gpu,model`, the openb node list format)."""
    if spec.endswith(".csv") or Path(spec).is_file():
        nodes = load_nodes(Path(spec))
        pool: dict[str, int] = {}
        for n in nodes:
            for g in n.gpus:
                pool[g.model] = pool.get(g.model, 0) + FULL_GPU_MILLI
        if not pool:
            raise ValidationError("cluster", f"{spec}: no GPUs in the node list")
        return SimCluster(len(nodes), pool, tuple(nodes))
    pool = {}
    infos: list[NodeInfo] = []
    for group in spec.split("+"):
        m = _GROUP.match(group.strip())
        if not m:
            raise ValidationError("cluster", f"bad cluster spec {group!r}; expected like 32x8xV100-32GB or a nodes CSV")
        nodes_n, per_node, model = int(m["nodes"]), int(m["gpus"]), m["model"]
        if nodes_n < 1 or per_node < 1:
            raise ValidationError("cluster", f"{group!r}: nodes and GPUs per node must be >= 1")
        if "-" not in model and model.upper() in DEFAULT_MEMORY_GB:
            model = f"{model}-{DEFAULT_MEMORY_GB[model.upper()]}GB"
        pool[model] = pool.get(model, 0) + nodes_n * per_node * FULL_GPU_MILLI
        infos += [compute_node(f"n{len(infos) + i:03d}", [model] * per_node) for i in range(nodes_n)]
    return SimCluster(len(infos), pool, tuple(infos))
