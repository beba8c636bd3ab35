"""Telemetry rules in detail: what the parser accepts, defaults and refuses (naming field and problem), the named
series, the per-job summary's edges and the ingest budget's edges."""

from __future__ import annotations

from typing import Any

import pytest

from corral.core.errors import ValidationError
from corral.core.telemetry import (
    GpuEvent,
    GpuEventKind,
    GpuProcess,
    GpuSample,
    HostSample,
    IngestBudget,
    JobGpuSummary,
    TelemetryBatch,
    batch_from_dict,
    compute_batch_size,
    compute_gpu_series,
    compute_host_series,
    compute_ingest,
    merge_job_gpu_summary,
)

HOST_WIRE: dict[str, Any] = {
    "ts": 10.5,
    "cpu_percent": 12.5,
    "cpu_count": 64,
    "load_1m": 1.25,
    "load_5m": 0.5,
    "load_15m": 0.75,
    "memory_used_mib": 1000,
    "memory_total_mib": 4000,
    "disk_used_bytes": 25,
    "disk_total_bytes": 100,
    "disk_read_bytes": 1,
    "disk_write_bytes": 2,
    "net_rx_bytes": 3,
    "net_tx_bytes": 4,
}


def _refused(data: Any, **limits: int) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        batch_from_dict(data, **limits)
    return caught.value


def _gpu(**values: Any) -> dict[str, Any]:
    return {"ts": 1.0, "index": 0, "uuid": "u0", **values}


# ----- refused input: the field and the problem -----


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("batch not an object", "n1", "batch: expected an object"),
        ("node missing", {"ts": 1}, "node: expected a non-empty string"),
        ("node empty", {"node": "", "ts": 1}, "node: expected a non-empty string"),
        ("node a number", {"node": 5, "ts": 1}, "node: expected a non-empty string"),
        ("ts missing", {"node": "n"}, "ts: missing"),
        ("ts a string", {"node": "n", "ts": "soon"}, "ts: expected a finite number, got 'soon'"),
        ("ts infinite", {"node": "n", "ts": float("inf")}, "ts: expected a finite number, got inf"),
        ("gpus not a list", {"node": "n", "ts": 1, "gpus": {}}, "gpus: expected a list"),
        ("events not a list", {"node": "n", "ts": 1, "events": "x"}, "events: expected a list"),
        ("host not an object", {"node": "n", "ts": 1, "host": [1]}, "host: expected an object"),
        ("gpu not an object", {"node": "n", "ts": 1, "gpus": [7]}, "gpus: each GPU sample must be an object"),
        ("gpu uuid empty", {"node": "n", "ts": 1, "gpus": [_gpu(uuid="")]}, "uuid: expected a non-empty string"),
        ("event not an object", {"node": "n", "ts": 1, "events": [None]}, "events: each event must be an object"),
        (
            "unknown event kind",
            {"node": "n", "ts": 1, "events": [{"ts": 1, "kind": "meltdown"}]},
            "events: unknown event kind 'meltdown'",
        ),
        ("process not an object", {"node": "n", "ts": 1, "gpus": [_gpu(processes=[7])]}, "pid: missing"),
        (
            "dropped_events a bool",
            {"node": "n", "ts": 1, "dropped_events": True},
            "dropped_events: expected a finite number, got True",
        ),
    ],
)
def test_bad_input_names_the_field_and_the_problem(name: str, data: Any, message: str) -> None:
    err = _refused(data)
    field, problem = message.split(": ", 1)
    assert (err.field, err.problem, str(err)) == (field, problem, message), name


def test_too_many_entries_name_the_list_and_the_limit() -> None:
    err = _refused({"node": "n", "ts": 1, "gpus": [_gpu()] * 3}, max_gpus=2)
    assert (err.field, err.problem) == ("gpus", "3 entries; at most 2 allowed")


def test_default_limits_allow_1000_events_and_1024_processes_per_gpu() -> None:
    event = {"ts": 1, "kind": "off_bus", "gpu_index": 0}
    assert len(batch_from_dict({"node": "n", "ts": 1, "events": [event] * 1000}).events) == 1000
    err = _refused({"node": "n", "ts": 1, "events": [event] * 1001})
    assert (err.field, err.problem) == ("events", "1001 entries; at most 1000 allowed")
    process = {"pid": 1}
    gpu = batch_from_dict({"node": "n", "ts": 1, "gpus": [_gpu(processes=[process] * 1024)]}).gpus[0]
    assert len(gpu.processes) == 1024
    err = _refused({"node": "n", "ts": 1, "gpus": [_gpu(processes=[process] * 1025)]})
    assert (err.field, err.problem) == ("processes", "1025 entries; at most 1024 allowed")


# ----- accepted input: values and defaults -----


def test_batch_counters_are_read() -> None:
    batch = batch_from_dict({"node": "n", "ts": 1, "gpu_count": 8, "dropped_events": 3})
    assert (batch.gpu_count, batch.dropped_events) == (8, 3)
    assert batch_from_dict({"node": "n", "ts": 1}).dropped_events == 0


def test_host_keeps_fractions_where_they_mean_something() -> None:
    host = batch_from_dict({"node": "n", "ts": 1, "host": HOST_WIRE}).host
    assert host is not None
    assert (host.ts, host.cpu_percent, host.load_1m, host.load_5m, host.load_15m) == (10.5, 12.5, 1.25, 0.5, 0.75)
    assert host == HostSample(**HOST_WIRE)


def test_host_counts_are_integers() -> None:
    host = batch_from_dict(
        {"node": "n", "ts": 1, "host": {**HOST_WIRE, "cpu_count": 64.0, "memory_used_mib": 1000.0}}
    ).host
    assert host is not None
    assert type(host.cpu_count) is int and type(host.memory_used_mib) is int


def test_gpu_sample_defaults_when_only_identity_is_sent() -> None:
    gpu = batch_from_dict({"node": "n", "ts": 1, "gpus": [_gpu()]}).gpus[0]
    assert gpu == GpuSample(ts=1.0, index=0, uuid="u0")
    assert gpu.throttle_reasons == 0 and gpu.remap_pending is False and gpu.processes == ()


def test_gpu_sample_values_are_read() -> None:
    wire = _gpu(
        utilization_percent=55.5,
        memory_used_mib=2048.0,
        memory_total_mib=81920,
        temperature_c=61.5,
        throttle_reasons=0x20,
        remap_pending=True,
        processes=[{"pid": 7, "used_memory_mib": 100}, {"pid": 8}],
    )
    gpu = batch_from_dict({"node": "n", "ts": 1, "gpus": [wire]}).gpus[0]
    assert gpu == GpuSample(
        ts=1.0,
        index=0,
        uuid="u0",
        utilization_percent=55.5,
        memory_used_mib=2048,
        memory_total_mib=81920,
        temperature_c=61.5,
        throttle_reasons=0x20,
        remap_pending=True,
        processes=(GpuProcess(7, 100), GpuProcess(8, None)),
    )
    assert type(gpu.memory_used_mib) is int  # counters are whole numbers, even when sent as 2048.0


def test_event_optional_fields_default() -> None:
    event = batch_from_dict({"node": "n", "ts": 1, "events": [{"ts": 2, "kind": "nvml_error"}]}).events[0]
    assert event == GpuEvent(2.0, GpuEventKind.NVML_ERROR, None, detail="", xid=None)


def test_event_values_are_read_and_detail_is_cut_at_1000_characters() -> None:
    wire = {"ts": 2, "kind": "xid", "gpu_index": 3, "xid": 79, "detail": "x" * 1500}
    event = batch_from_dict({"node": "n", "ts": 1, "events": [wire]}).events[0]
    assert event == GpuEvent(2.0, GpuEventKind.XID, 3, detail="x" * 1000, xid=79)


# ----- named series -----


def test_gpu_series_names_every_reported_value() -> None:
    sample = GpuSample(
        ts=1,
        index=0,
        uuid="u",
        utilization_percent=50.0,
        memory_used_mib=20,
        memory_total_mib=80,
        power_w=300.0,
        temperature_c=65.0,
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
        throttle_reasons=0x4,
        ecc_sbe_total=2,
        ecc_dbe_total=1,
        retired_pages=3,
        remapped_rows_uncorrectable=4,
        pcie_rx_kib_s=100.0,
        pcie_tx_kib_s=200.0,
    )
    assert compute_gpu_series(sample) == {
        "gpu_utilization_percent": 50.0,
        "gpu_memory_used_mib": 20.0,
        "gpu_memory_used_percent": 25.0,
        "gpu_power_w": 300.0,
        "gpu_temperature_c": 65.0,
        "gpu_sm_clock_mhz": 1980.0,
        "gpu_memory_clock_mhz": 2619.0,
        "gpu_throttled": 1.0,  # sw_power_cap
        "gpu_ecc_sbe_total": 2.0,
        "gpu_ecc_dbe_total": 1.0,
        "gpu_retired_pages": 3.0,
        "gpu_remapped_rows_uncorrectable": 4.0,
        "gpu_pcie_rx_kib_s": 100.0,
        "gpu_pcie_tx_kib_s": 200.0,
    }


@pytest.mark.parametrize(("used", "total"), [(10, 0), (10, None), (None, 80)])
def test_memory_percent_is_absent_without_both_values(used: int | None, total: int | None) -> None:
    series = compute_gpu_series(GpuSample(ts=1, index=0, uuid="u", memory_used_mib=used, memory_total_mib=total))
    assert "gpu_memory_used_percent" not in series


def test_host_series_names_every_value() -> None:
    host = HostSample(**HOST_WIRE)
    assert compute_host_series(host) == {
        "host_cpu_percent": 12.5,
        "host_load_1m": 1.25,
        "host_memory_used_percent": 25.0,
        "host_disk_used_percent": 25.0,
    }


# ----- per-job summary -----


def _util(ts: float, util: float, mem: int | None = None) -> GpuSample:
    return GpuSample(ts=ts, index=0, uuid="u", utilization_percent=util, memory_used_mib=mem)


def test_idle_means_strictly_under_five_percent() -> None:
    summary = merge_job_gpu_summary(JobGpuSummary(), [_util(1, 5.0), _util(2, 4.9)])
    assert (summary.samples, summary.idle_samples) == (2, 1)


def test_memory_max_ignores_samples_without_memory() -> None:
    summary = merge_job_gpu_summary(JobGpuSummary(), [_util(1, 50.0)])
    assert summary.memory_used_max_mib == 0


def test_time_span_holds_for_samples_out_of_order() -> None:
    summary = merge_job_gpu_summary(JobGpuSummary(), [_util(20, 50.0), _util(30, 50.0), _util(10, 50.0)])
    assert (summary.first_ts, summary.last_ts) == (10, 30)


# ----- ingest budget -----


def test_a_batch_that_exactly_empties_the_bucket_is_accepted() -> None:
    budget, ok = compute_ingest(IngestBudget.full(rate_per_s=1.0, burst=9.0, now=0.0), 9, now=0.0)
    assert ok and budget.tokens == 0.0
    budget, ok = compute_ingest(budget, 1, now=0.0)
    assert not ok and budget.tokens == 0.0


def test_batch_size_counts_the_host_only_when_present() -> None:
    gpus = (GpuSample(ts=1, index=0, uuid="u"),)
    assert compute_batch_size(TelemetryBatch("n", 1.0, None, gpus)) == 1
    assert compute_batch_size(TelemetryBatch("n", 1.0, HostSample(**HOST_WIRE), gpus)) == 2
