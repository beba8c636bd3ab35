"""Load the Alibaba GPU trace v2023 ("openb") CSVs into scheduler types; errors name file, line, field."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from corral.core.errors import CorralError, ValidationError
from corral.core.gpuspec import DEFAULT_MEMORY_GB
from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI, GpuInfo, NodeInfo

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(CorralError):
    """A trace row that cannot be used: `path:line: field: problem`."""

    code = "invalid_trace"

    def __init__(self, path: Path, line: int, field_name: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: {field_name}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field_name, problem


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    request: ResourceRequest
    line: int = 0  # line in the pod file, for errors found after loading


@dataclass(slots=True)
class LoadReport:
    """How many rows were read and how many were skipped, per reason (`skip_bad_rows=True` only)."""

    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


def _int(row: dict[str, str], name: str, path: Path, line: int, minimum: int = 0) -> int:
    raw = (row.get(name) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(path, line, name, f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise TraceError(path, line, name, f"must be >= {minimum}, got {value}")
    return value


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(path, 1, missing[0], f"missing column (header has {reader.fieldnames})")
            return [(reader.line_num, row) for row in reader]
    except OSError as e:
        raise TraceError(path, 0, "file", e.strerror or str(e)) from e


def load_nodes(path: Path) -> list[NodeInfo]:
    """Nodes of `openb_node_list_*.csv`; raises TraceError on the first bad row."""
    nodes = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError(path, line, "sn", "empty node name")
        if name in seen:
            raise TraceError(path, line, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        cpu = _int(row, "cpu_milli", path, line, 1)
        mem = _int(row, "memory_mib", path, line, 1)
        count = _int(row, "gpu", path, line, 0)
        model = (row.get("model") or "").strip()
        if count and not model:
            raise TraceError(path, line, "model", "a node with GPUs needs a model")
        mem_gpu = DEFAULT_MEMORY_GB.get(model.upper(), 16) * 1024
        gpus = tuple(GpuInfo(i, f"{name}-gpu{i}", model, mem_gpu) for i in range(count))
        nodes.append(NodeInfo(name, gpus, cpu, mem))
    if not nodes:
        raise TraceError(path, 1, "sn", "no nodes in file")
    return nodes


def _pod(row: dict[str, str], path: Path, line: int) -> TracePod:
    name = (row.get("name") or "").strip() or f"line-{line}"
    cpu = _int(row, "cpu_milli", path, line)
    mem = _int(row, "memory_mib", path, line)
    gpus = _int(row, "num_gpu", path, line)
    milli = _int(row, "gpu_milli", path, line)
    if gpus and not 0 < milli <= FULL_GPU_MILLI:
        raise TraceError(path, line, "gpu_milli", f"must be in 1..1000 for a GPU pod, got {milli}")
    if gpus > 1 and milli != FULL_GPU_MILLI:
        raise TraceError(path, line, "gpu_milli", f"a {gpus}-GPU pod must take whole GPUs, got {milli}")
    if gpus == 0 and cpu == 0 and mem == 0:
        raise TraceError(path, line, "cpu_milli", "pod requests nothing (zero CPU, memory and GPU)")
    spec = (row.get("gpu_spec") or "").strip()
    models = tuple(m for m in spec.split("|") if m) if spec else ()
    try:
        request = ResourceRequest(
            gpus=gpus, gpu_milli=milli if gpus else FULL_GPU_MILLI, gpu_models=models, cpu_milli=cpu, memory_mib=mem
        )
    except ValidationError as e:
        raise TraceError(path, line, e.field, e.problem) from e
    return TracePod(name, request, line)


def load_pods(path: Path, skip_bad_rows: bool = False) -> tuple[list[TracePod], LoadReport]:
    """Pods of `openb_pod_list_*.csv`. A bad row raises TraceError, or with `skip_bad_rows` is counted
    in the report under its reason (never dropped silently)."""
    pods = []
    report = LoadReport()
    for line, row in _rows(path, POD_COLUMNS):
        report.rows += 1
        try:
            pods.append(_pod(row, path, line))
        except TraceError as e:
            if not skip_bad_rows:
                raise
            report.skipped[f"{e.field}: {e.problem.split(',')[0]}"] += 1
    if not pods:
        raise TraceError(path, 1, "name", "no usable pods in file")
    return pods, report


def check_gpu_models(
    pods: list[TracePod], nodes: list[NodeInfo], path: Path, report: LoadReport, skip_bad_rows: bool = False
) -> list[TracePod]:
    """Pods whose `gpu_spec` names only models some node has. A pod naming an unknown model raises
    TraceError (`path:line: gpu_spec: ...`), or with `skip_bad_rows` is counted in `report` and left out."""
    known = sorted({g.model for n in nodes for g in n.gpus})
    out = []
    for pod in pods:
        unknown = [m for m in pod.request.gpu_models if not any(model_matches(k, (m,)) for k in known)]
        if not unknown:
            out.append(pod)
            continue
        error = TraceError(
            path, pod.line, "gpu_spec", f"unknown GPU model {unknown[0]!r}; the nodes have {', '.join(known)}"
        )
        if not skip_bad_rows:
            raise error
        report.skipped[f"gpu_spec: unknown GPU model {unknown[0]!r}"] += 1
    if not out:
        raise TraceError(path, 1, "gpu_spec", "no pod left after dropping unknown GPU models")
    return out
