"""Series for rule evaluation (pure): from agents' batches, GPU health, lost nodes and running jobs to
the SeriesPoint values evaluate_rules() reads. Labels: node, gpu, uuid, and job/tenant where known."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from corral.alerts.evaluator import SeriesPoint
from corral.alerts.rules import Labels, make_labels
from corral.core.telemetry import (
    GPU_SERIES,
    HOST_SERIES,
    GpuEventKind,
    TelemetryBatch,
    compute_gpu_series,
    compute_host_series,
)


@dataclass(frozen=True, slots=True)
class JobPlacement:
    """A running job and the GPUs it holds (node name, GPU indices)."""

    job: str
    tenant: str
    node: str
    gpu_indices: tuple[int, ...]


def _owners(node: str, jobs: Sequence[JobPlacement]) -> dict[int, JobPlacement]:
    """GPU index -> the running job that holds it, on `node`."""
    return {i: j for j in jobs if j.node == node for i in j.gpu_indices}


def _gpu_labels(node: str, index: int, uuid: str, owner: Mapping[int, JobPlacement]) -> Labels:
    """One GPU's series labels, from a batch or from stored samples alike: a GPU held by a running job also carries
    that job's `job` and `tenant` (tenant-scoped rules and a tenant's view of alerts go by them)."""
    held = owner.get(index)
    return _labels_of(node, index, uuid, held.job, held.tenant) if held else _labels_of(node, index, uuid, None, None)


@lru_cache(maxsize=16_384)
def _labels_of(node: str, index: int, uuid: str, job: str | None, tenant: str | None) -> Labels:
    """make_labels of a GPU's labels, kept: a round labels every GPU of the fleet again (8,000 GPUs, every 5 s),
    and a GPU's labels change only when the job holding it does. Bounded (about 14 MB full): a fleet's GPUs and the
    jobs holding them now fit; ended jobs' labels are the first to go."""
    labels: dict[str, object] = {"node": node, "gpu": index, "uuid": uuid}
    if job is not None:
        labels |= {"job": job, "tenant": tenant}
    return make_labels(labels)


def compute_batch_series(
    batch: TelemetryBatch, jobs: Sequence[JobPlacement] = (), metrics: Collection[str] | None = None
) -> list[SeriesPoint]:
    """GPU_SERIES and HOST_SERIES from one batch, and gpu_xid / gpu_ecc_dbe from its events. `metrics`: only these
    (the ones some rule reads; None: all).

    A GPU held by a running job also carries that job's `job` and `tenant` labels, so tenant-scoped
    rules see it."""
    owner = _owners(batch.node, jobs)
    points: list[SeriesPoint] = []
    # in GPU_SERIES's order; a round reads a few of the ~16 (the default rules: 2), and only those are made
    gpu_metrics = [m for m in GPU_SERIES if metrics is None or m in metrics]
    for s in batch.gpus if gpu_metrics else ():
        frozen = _gpu_labels(batch.node, s.index, s.uuid, owner)
        points.extend(SeriesPoint(m, frozen, v) for m, v in compute_gpu_series(s, gpu_metrics).items())
    if batch.host is not None:
        host_labels = make_labels({"node": batch.node})
        points.extend(
            SeriesPoint(m, host_labels, v)
            for m, v in compute_host_series(batch.host).items()
            if metrics is None or m in metrics
        )
    for e in batch.events:
        if e.gpu_index is None:
            continue
        labels = {"node": batch.node, "gpu": e.gpu_index}
        if e.kind is GpuEventKind.XID and e.xid is not None:
            points.append(SeriesPoint("gpu_xid", make_labels(labels | {"xid": e.xid}), float(e.xid)))
        elif e.kind is GpuEventKind.ECC_DBE:
            points.append(SeriesPoint("gpu_ecc_dbe", make_labels(labels), 1.0))
    return points


def compute_sample_series(
    node: str,
    gpus: Mapping[int, Mapping[str, float]],
    host: Mapping[str, float],
    uuids: Mapping[int, str],
    jobs: Sequence[JobPlacement] = (),
    metrics: Collection[str] | None = None,
) -> list[SeriesPoint]:
    """What compute_batch_series gives for a batch, from the node's latest stored samples instead (a batch another
    replica received): `gpus` maps a GPU index to its series' values, `host` the host series' values, `uuids` a GPU
    index to its UUID (the node's inventory). Same series, same labels; a batch's XID and ECC events are not kept
    as samples, so none here."""
    owner = _owners(node, jobs)
    out: list[SeriesPoint] = []

    def wanted(metric: str) -> bool:
        return metrics is None or metric in metrics

    for index in sorted(gpus):
        frozen = _gpu_labels(node, index, uuids.get(index, ""), owner)
        out.extend(SeriesPoint(m, frozen, v) for m, v in sorted(gpus[index].items()) if m in GPU_SERIES and wanted(m))
    host_labels = make_labels({"node": node})
    out.extend(SeriesPoint(m, host_labels, v) for m, v in sorted(host.items()) if m in HOST_SERIES and wanted(m))
    return out


def compute_health_series(node: str, unhealthy: Mapping[int, str], uuids: Mapping[int, str]) -> list[SeriesPoint]:
    """gpu_unhealthy = 1 for each GPU index -> reason in `unhealthy`."""
    return [
        SeriesPoint(
            "gpu_unhealthy", make_labels({"node": node, "gpu": i, "uuid": uuids.get(i, ""), "reason": reason}), 1.0
        )
        for i, reason in sorted(unhealthy.items())
    ]


def compute_node_lost_series(lost_nodes: Iterable[str]) -> list[SeriesPoint]:
    return [SeriesPoint("node_lost", make_labels({"node": n}), 1.0) for n in sorted(set(lost_nodes))]


def compute_job_utilization_series(
    jobs: Sequence[JobPlacement], utilization: Mapping[tuple[str, int], float]
) -> list[SeriesPoint]:
    """job_gpu_utilization_percent: mean of the latest utilisation of each job's GPUs.

    `utilization` maps (node, gpu index) to percent; a job none of whose GPUs has a value yet is
    skipped (no data is not idleness)."""
    points = []
    for j in jobs:
        values = [utilization[(j.node, i)] for i in j.gpu_indices if (j.node, i) in utilization]
        if values:
            labels = make_labels({"job": j.job, "tenant": j.tenant, "node": j.node})
            points.append(SeriesPoint("job_gpu_utilization_percent", labels, sum(values) / len(values)))
    return points


def compute_queue_series(queue_length_by_tenant: Mapping[str, int]) -> list[SeriesPoint]:
    return [
        SeriesPoint("queue_length", make_labels({"tenant": t}), float(n))
        for t, n in sorted(queue_length_by_tenant.items())
    ]


def compute_budget_series(used_percent_by_tenant: Mapping[str, float]) -> list[SeriesPoint]:
    """How much of its budget each tenant with one has used this period (the higher of GPU-hours and money)."""
    return [
        SeriesPoint("budget_used_percent", make_labels({"tenant": t}), float(p))
        for t, p in sorted(used_percent_by_tenant.items())
    ]
