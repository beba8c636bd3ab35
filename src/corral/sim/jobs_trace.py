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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.core.errors import ValidationError
from corral.core.gpuspec import DEFAULT_MEMORY_GB
from corral.core.resources import FULL_GPU_MILLI
from corral.scheduler.queueing.jobs import QueuedJob
from corral.sim.openb import TraceError, load_nodes

FORMATS = ("chronus", "tiresias", "corral")
COLUMNS = {
    "chronus": ("job_id", "user", "num_gpu", "submit_time", "duration"),
    "tiresias": ("job_id", "num_gpu", "submit_time", "duration"),
    "corral": ("job_id", "submit_s", "duration_s", "gpus"),
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job of the trace and how long it really runs (the simulator's secret; `sjf` is told it)."""

    job: QueuedJob
    duration_s: float


@dataclass(slots=True)
class LoadReport:
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        parts = "; ".join(f"{n} x {reason}" for reason, n in sorted(self.skipped.items()))
        return f"skipped {sum(self.skipped.values())} of {self.rows} rows: {parts}"


class _Skip(Exception):
    pass


def _num(row: dict[str, str], name: str, path: Path, line: int, kind: type[int] | type[float] = float,
         minimum: float = 0.0, default: float | None = None) -> float:
    raw = (row.get(name) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = float(kind(raw))
    except ValueError:
        raise TraceError(path, line, name, f"expected {'an integer' if kind is int else 'a number'}, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise TraceError(path, line, name, f"must be >= {minimum:g}, got {raw}")
    return value


def _chronus(row: dict[str, str], path: Path, line: int) -> TraceJob:
    tenant = (row.get("user") or "").strip()
    if not tenant:
        raise TraceError(path, line, "user", "empty tenant")
    return _common(row, path, line, tenant, "num_gpu", "submit_time", "duration")


def _tiresias(row: dict[str, str], path: Path, line: int) -> TraceJob:
    return _common(row, path, line, "default", "num_gpu", "submit_time", "duration")


def _common(row: dict[str, str], path: Path, line: int, tenant: str, gpus_col: str, submit_col: str,
            duration_col: str, **extra: Any) -> TraceJob:  # extra: more QueuedJob fields, checked by it
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
        row, path, line, (row.get("tenant") or "").strip() or "default", "gpus", "submit_s", "duration_s",
        gpu_milli=milli, model=(row.get("model") or "").strip(),
        priority=int(_num(row, "priority", path, line, int, minimum=-(10**9), default=0)),
        time_limit_s=limit, queue=(row.get("queue") or "").strip(),
        nodes=int(_num(row, "nodes", path, line, int, minimum=1, default=1)),
    )


PARSERS: dict[str, Callable[[dict[str, str], Path, int], TraceJob]] = {
    "chronus": _chronus, "tiresias": _tiresias, "corral": _corral,
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
            missing = [c for c in COLUMNS[fmt] if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(path, 1, missing[0], f"missing column for format {fmt!r} (header has {reader.fieldnames})")
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
    """GPU pool for the job simulator: milli-GPUs per model, and the node count."""

    nodes: int
    pool_milli: dict[str, int]

    @property
    def gpus(self) -> int:
        return sum(self.pool_milli.values()) // FULL_GPU_MILLI

    def describe(self) -> str:
        return f"{self.nodes} nodes, " + ", ".join(f"{m // 1000} x {k}" for k, m in self.pool_milli.items())


_GROUP = re.compile(r"^(?P<nodes>\d+)x(?P<gpus>\d+)x(?P<model>[A-Za-z0-9][A-Za-z0-9._-]*)$")


def parse_cluster_spec(spec: str) -> SimCluster:
    """`32x8xV100-32GB` (nodes x GPUs per node x model), groups joined by `+`, or a nodes CSV
    (`sn,cpu_milli,memory_mib,gpu,model`, the openb node list format)."""
    if spec.endswith(".csv") or Path(spec).is_file():
        nodes = load_nodes(Path(spec))
        pool: dict[str, int] = {}
        for n in nodes:
            for g in n.gpus:
                pool[g.model] = pool.get(g.model, 0) + FULL_GPU_MILLI
        if not pool:
            raise ValidationError("cluster", f"{spec}: no GPUs in the node list")
        return SimCluster(len(nodes), pool)
    pool = {}
    count = 0
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
        count += nodes_n
    return SimCluster(count, pool)
