"""/metrics rendering: parses with prometheus-client's parser, DCGM names and labels, Corral series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.core.telemetry import GpuSample, HostSample
from corral.server.prometheus import (
    CONTENT_TYPE,
    ClusterStats,
    GpuMetrics,
    compute_latency_histogram,
    render_metrics,
)

HOST = HostSample(10.0, 12.5, 64, 1.5, 1.0, 0.5, 1024, 4096, 5, 10, 100, 200, 300, 400)


def _parse(body: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    families: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        families[family.name] = [(s.name, s.labels, s.value) for s in family.samples]
    return families


def _gpus() -> list[GpuMetrics]:
    sim = SimulatedGpuBackend("sim:8xH100-80GB", "dgx-1")  # 8 SXM GPUs: NVLink counters too
    sim.set_load({1: 1.0})
    return [
        GpuMetrics("dgx-1", "H100-80GB", s, healthy=s.index == 0, last_xid=79 if s.index == 1 else 0)
        for s in sim.sample(100.0).samples[:2]
    ]


def test_gpu_series_carry_dcgm_names_labels_and_values() -> None:
    gpus = _gpus()
    families = _parse(render_metrics(gpus))
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    ):
        assert len(families[name]) == 2, name
    util = {labels["gpu"]: (labels, value) for _, labels, value in families["DCGM_FI_DEV_GPU_UTIL"]}
    labels, value = util["1"]
    assert labels == {
        "gpu": "1",
        "UUID": gpus[1].sample.uuid,
        "device": "nvidia1",
        "modelName": "H100-80GB",
        "Hostname": "dgx-1",
    }
    assert value == gpus[1].sample.utilization_percent
    free = {lab["gpu"]: v for _, lab, v in families["DCGM_FI_DEV_FB_FREE"]}
    assert free["1"] == gpus[1].sample.memory_total_mib - gpus[1].sample.memory_used_mib  # type: ignore[operator]
    assert {lab["gpu"]: v for _, lab, v in families["DCGM_FI_DEV_XID_ERRORS"]} == {"0": 0.0, "1": 79.0}
    assert {lab["gpu"]: v for _, lab, v in families["corral_gpu_healthy"]} == {"0": 1.0, "1": 0.0}
    nvlink = families["corral_gpu_nvlink_bytes"]
    assert {s[0] for s in nvlink} == {"corral_gpu_nvlink_bytes_total"} and len(nvlink) == 4


def test_values_a_gpu_does_not_report_are_left_out() -> None:
    bare = GpuSample(ts=1.0, index=0, uuid="GPU-x", utilization_percent=5.0)
    families = _parse(render_metrics([GpuMetrics("n", "L4", bare)]))
    assert len(families["DCGM_FI_DEV_GPU_UTIL"]) == 1
    assert families["DCGM_FI_DEV_POWER_USAGE"] == [] and families["DCGM_FI_DEV_FB_FREE"] == []
    assert families["DCGM_FI_DEV_ROW_REMAP_PENDING"] == []


def test_odd_label_values_are_escaped() -> None:
    sample = GpuSample(ts=1.0, index=0, uuid='GPU-"q"\\x', utilization_percent=1.0)
    families = _parse(render_metrics([GpuMetrics('host "a"\nb', "model\\1", sample)]))
    [(_, labels, _)] = families["DCGM_FI_DEV_GPU_UTIL"]
    assert (labels["Hostname"], labels["modelName"], labels["UUID"]) == ('host "a"\nb', "model\\1", 'GPU-"q"\\x')


def test_corral_series() -> None:
    stats = ClusterStats(
        queue_length=7,
        pending_by_reason={"insufficient_gpus": 5, "quota": 2},
        jobs_by_state={"RUNNING": 3},
        nodes_by_state={"READY": 2, "LOST": 1},
        alerts_by_state={"firing": 1},
        scheduling_latency=compute_latency_histogram([0.002, 0.02, 0.3, 120.0], bounds=(0.01, 0.1, 1.0)),
        samples_ingested=1600,
        samples_rejected=3,
        notification_failures=1,
    )
    families = _parse(render_metrics(hosts=[("dgx-1", HOST)], stats=stats))
    assert families["corral_queue_length"] == [("corral_queue_length", {}, 7.0)]
    assert {lab["reason"]: v for _, lab, v in families["corral_jobs_pending"]} == {"insufficient_gpus": 5, "quota": 2}
    assert families["corral_nodes"] == [
        ("corral_nodes", {"state": "LOST"}, 1.0),
        ("corral_nodes", {"state": "READY"}, 2.0),
    ]
    assert families["corral_telemetry_samples_ingested"] == [("corral_telemetry_samples_ingested_total", {}, 1600.0)]
    hist = {(n, lab.get("le")): v for n, lab, v in families["corral_scheduling_latency_seconds"]}
    assert hist[("corral_scheduling_latency_seconds_bucket", "0.01")] == 1
    assert hist[("corral_scheduling_latency_seconds_bucket", "1.0")] == 3
    assert hist[("corral_scheduling_latency_seconds_bucket", "+Inf")] == 4
    assert hist[("corral_scheduling_latency_seconds_count", None)] == 4
    assert hist[("corral_scheduling_latency_seconds_sum", None)] == 0.002 + 0.02 + 0.3 + 120.0
    assert families["corral_node_memory_used_bytes"] == [
        ("corral_node_memory_used_bytes", {"Hostname": "dgx-1"}, 1024 * 1048576.0)
    ]
    assert families["corral_node_network_receive_bytes"][0][2] == 300.0


def test_histogram_buckets_are_cumulative_and_bound_inclusive() -> None:
    h = compute_latency_histogram([0.1, 0.1, 0.5, 2.0], bounds=(1.0, 0.1))
    assert (h.bounds, h.cumulative, h.count) == ((0.1, 1.0), (2, 3), 4)


def test_empty_render_parses_and_content_type() -> None:
    assert "text/plain" in CONTENT_TYPE
    families = _parse(render_metrics())
    assert families["DCGM_FI_DEV_GPU_UTIL"] == [] and "corral_queue_length" not in families
