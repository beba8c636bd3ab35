"""Prometheus text exposition for /metrics (pure rendering): DCGM-exporter names for GPU series, so
existing dashboards work, plus Corral's own node, queue, job and scheduler series."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.core.telemetry import GpuSample, HostSample

CONTENT_TYPE = CONTENT_TYPE_LATEST
GPU_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")  # as dcgm-exporter labels them
DEFAULT_LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """The latest sample of one GPU and what the server knows about it."""

    hostname: str
    model: str
    sample: GpuSample
    healthy: bool = True
    last_xid: int = 0  # the last Xid seen on this GPU (DCGM semantics), 0 for none


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Cumulative bucket counts over `bounds` (seconds, ascending), plus sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    total_s: float
    count: int


def compute_latency_histogram(
    observations_s: Iterable[float], bounds: Sequence[float] = DEFAULT_LATENCY_BUCKETS_S
) -> LatencyHistogram:
    """Bucket scheduling latencies (pure). Each bucket counts observations <= its bound."""
    ordered = tuple(sorted(bounds))
    counts = [0] * len(ordered)
    total, n = 0.0, 0
    for value in observations_s:
        total += value
        n += 1
        i = bisect.bisect_left(ordered, value)
        if i < len(counts):
            counts[i] += 1
    running, cumulative = 0, []
    for c in counts:
        running += c
        cumulative.append(running)
    return LatencyHistogram(ordered, tuple(cumulative), total, n)


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """Corral's own numbers at render time."""

    queue_length: int = 0
    pending_by_reason: Mapping[str, int] = field(default_factory=dict)
    jobs_by_state: Mapping[str, int] = field(default_factory=dict)
    nodes_by_state: Mapping[str, int] = field(default_factory=dict)
    alerts_by_state: Mapping[str, int] = field(default_factory=dict)
    scheduling_latency: LatencyHistogram | None = None
    samples_ingested: int = 0  # telemetry samples accepted since the server started
    samples_rejected: int = 0
    notification_failures: int = 0


# (DCGM-exporter name, help, how to read it from a sample); None values are left out.
_DCGM_GAUGES: tuple[tuple[str, str, Callable[[GpuSample], float | int | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda s: s.utilization_percent),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda s: s.memory_utilization_percent),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda s: s.memory_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda s: s.memory_free_mib),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", lambda s: s.memory_total_mib),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda s: s.power_w),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda s: s.temperature_c),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda s: s.memory_clock_mhz),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bit mask).", lambda s: s.throttle_reasons),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", lambda s: s.ecc_sbe_total),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", lambda s: s.ecc_dbe_total),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        lambda s: s.remapped_rows_correctable,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        lambda s: s.remapped_rows_uncorrectable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "Whether remapping of rows is pending (needs a GPU reset).",
        lambda s: int(s.remap_pending) if s.remapped_rows_correctable is not None else None,
    ),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe transmit throughput (in KB/s).", lambda s: s.pcie_tx_kib_s),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe receive throughput (in KB/s).", lambda s: s.pcie_rx_kib_s),
)


class _CorralCollector(Collector):
    def __init__(
        self, gpus: Sequence[GpuMetrics], hosts: Sequence[tuple[str, HostSample]], stats: ClusterStats | None
    ) -> None:
        self._gpus, self._hosts, self._stats = gpus, hosts, stats

    def collect(self) -> Iterator[Metric]:
        yield from _gpu_families(self._gpus)
        yield from _host_families(self._hosts)
        if self._stats is not None:
            yield from _cluster_families(self._stats)


def _gpu_labels(g: GpuMetrics) -> list[str]:
    return [str(g.sample.index), g.sample.uuid, f"nvidia{g.sample.index}", g.model, g.hostname]


def _gpu_families(gpus: Sequence[GpuMetrics]) -> Iterator[Metric]:
    for name, help_text, read in _DCGM_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
        for g in gpus:
            value = read(g.sample)
            if value is not None:
                family.add_metric(_gpu_labels(g), float(value))
        yield family
    xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=GPU_LABELS)
    healthy = GaugeMetricFamily(
        "corral_gpu_healthy", "1 when the GPU is in the pool, 0 when health checks took it out.", labels=GPU_LABELS
    )
    processes = GaugeMetricFamily("corral_gpu_processes", "Compute processes on the GPU.", labels=GPU_LABELS)
    retired = GaugeMetricFamily(
        "corral_gpu_retired_pages", "Retired memory pages (pre-Ampere GPUs).", labels=GPU_LABELS
    )
    nvlink = CounterMetricFamily(
        "corral_gpu_nvlink_bytes", "NVLink data bytes over all links.", labels=(*GPU_LABELS, "direction")
    )
    for g in gpus:
        labels = _gpu_labels(g)
        xid.add_metric(labels, float(g.last_xid))
        healthy.add_metric(labels, 1.0 if g.healthy else 0.0)
        processes.add_metric(labels, float(len(g.sample.processes)))
        if g.sample.retired_pages is not None:
            retired.add_metric(labels, float(g.sample.retired_pages))
        if g.sample.nvlink_rx_kib is not None and g.sample.nvlink_tx_kib is not None:
            nvlink.add_metric([*labels, "rx"], g.sample.nvlink_rx_kib * 1024.0)
            nvlink.add_metric([*labels, "tx"], g.sample.nvlink_tx_kib * 1024.0)
    yield from (xid, healthy, processes, retired, nvlink)


def _host_families(hosts: Sequence[tuple[str, HostSample]]) -> Iterator[Metric]:
    gauges: dict[str, tuple[str, Callable[[HostSample], float]]] = {
        "corral_node_cpu_percent": ("CPU busy over all cores (in %).", lambda h: h.cpu_percent),
        "corral_node_load1": ("1-minute load average.", lambda h: h.load_1m),
        "corral_node_memory_used_bytes": ("RAM in use.", lambda h: h.memory_used_mib * 1048576.0),
        "corral_node_memory_total_bytes": ("RAM installed.", lambda h: h.memory_total_mib * 1048576.0),
        "corral_node_disk_used_bytes": ("Disk in use on the agent's work volume.", lambda h: h.disk_used_bytes),
        "corral_node_disk_total_bytes": ("Disk size of the agent's work volume.", lambda h: h.disk_total_bytes),
    }
    counters: dict[str, tuple[str, Callable[[HostSample], float]]] = {
        "corral_node_disk_read_bytes": ("Bytes read from disks since boot.", lambda h: h.disk_read_bytes),
        "corral_node_disk_written_bytes": ("Bytes written to disks since boot.", lambda h: h.disk_write_bytes),
        "corral_node_network_receive_bytes": ("Bytes received since boot.", lambda h: h.net_rx_bytes),
        "corral_node_network_transmit_bytes": ("Bytes sent since boot.", lambda h: h.net_tx_bytes),
    }
    for name, (help_text, read) in gauges.items():
        gauge = GaugeMetricFamily(name, help_text, labels=("Hostname",))
        for hostname, h in hosts:
            gauge.add_metric([hostname], float(read(h)))
        yield gauge
    for name, (help_text, read) in counters.items():
        counter = CounterMetricFamily(name, help_text, labels=("Hostname",))
        for hostname, h in hosts:
            counter.add_metric([hostname], float(read(h)))
        yield counter


def _cluster_families(stats: ClusterStats) -> Iterator[Metric]:
    yield GaugeMetricFamily("corral_queue_length", "Jobs waiting to be scheduled.", value=stats.queue_length)
    for name, help_text, label, values in (
        ("corral_jobs_pending", "Pending jobs by why they wait.", "reason", stats.pending_by_reason),
        ("corral_jobs", "Jobs by state.", "state", stats.jobs_by_state),
        ("corral_nodes", "Nodes by state.", "state", stats.nodes_by_state),
        ("corral_alerts", "Alerts by state.", "state", stats.alerts_by_state),
    ):
        family = GaugeMetricFamily(name, help_text, labels=(label,))
        for key, count in sorted(values.items()):
            family.add_metric([key], float(count))
        yield family
    for name, help_text, value in (
        ("corral_telemetry_samples_ingested", "Telemetry samples accepted.", stats.samples_ingested),
        (
            "corral_telemetry_samples_rejected",
            "Telemetry samples refused (malformed or over the bound).",
            stats.samples_rejected,
        ),
        ("corral_alert_notification_failures", "Alert notifications given up on.", stats.notification_failures),
    ):
        yield CounterMetricFamily(name, help_text, value=value)
    h = stats.scheduling_latency
    if h is not None:
        buckets = [(_bound(b), float(c)) for b, c in zip(h.bounds, h.cumulative, strict=True)]
        buckets.append(("+Inf", float(h.count)))
        yield HistogramMetricFamily(
            "corral_scheduling_latency_seconds",
            "Time from a job's submission to its placement.",
            buckets=buckets,
            sum_value=h.total_s,
        )


def _bound(value: float) -> str:
    return repr(float(value))


def render_metrics(
    gpus: Sequence[GpuMetrics] = (), hosts: Sequence[tuple[str, HostSample]] = (), stats: ClusterStats | None = None
) -> bytes:
    """The /metrics body (serve it with CONTENT_TYPE). `hosts` items are (hostname, HostSample)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_CorralCollector(gpus, hosts, stats))
    return generate_latest(registry)
