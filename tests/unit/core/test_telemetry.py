"""Telemetry values: wire round trip, validation of agent input, throttle names, named series."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.core.errors import ValidationError
from corral.core.simfault import SimFault
from corral.core.telemetry import (
    GPU_SERIES,
    GPU_VALUE,
    GpuEvent,
    GpuEventKind,
    GpuProcess,
    GpuSample,
    HostSample,
    IngestBudget,
    JobGpuSummary,
    TelemetryBatch,
    batch_from_dict,
    batch_to_dict,
    compute_batch_size,
    compute_gpu_series,
    compute_host_series,
    compute_ingest,
    compute_throttle_reason_names,
    merge_job_gpu_summary,
)

HOST = HostSample(
    ts=10.0,
    cpu_percent=12.5,
    cpu_count=64,
    load_1m=1.0,
    load_5m=0.5,
    load_15m=0.25,
    memory_used_mib=1000,
    memory_total_mib=4000,
    disk_used_bytes=25,
    disk_total_bytes=100,
    disk_read_bytes=1 << 40,
    disk_write_bytes=3,
    net_rx_bytes=4,
    net_tx_bytes=5,
)


def _batch() -> TelemetryBatch:
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1", clock=lambda: 10.0)
    sim.set_load({0: 1.0})
    sim.inject_fault(2, SimFault(xid=79))
    readout = sim.sample(10.0)
    with_processes = dataclasses.replace(readout.samples[0], processes=(GpuProcess(7, 100), GpuProcess(8, None)))
    gpus = (with_processes, *readout.samples[1:])
    return TelemetryBatch(node="n1", ts=10.0, host=HOST, gpus=gpus, events=readout.events, gpu_count=4)


def test_round_trip_through_json() -> None:
    batch = _batch()
    wire = json.loads(json.dumps(batch_to_dict(batch)))
    assert batch_from_dict(wire) == batch


def test_batch_without_host_and_gpus() -> None:
    assert batch_from_dict({"node": "n", "ts": 1}) == TelemetryBatch(node="n", ts=1.0, host=None)


def _wire(**changes: Any) -> dict[str, Any]:
    wire = json.loads(json.dumps(batch_to_dict(_batch())))
    for key, value in changes.items():
        target = wire
        *path, last = key.split(".")
        for part in path:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
    return wire


@pytest.mark.parametrize(
    ("name", "wire", "field"),
    [
        ("not an object", [], "batch"),
        ("no node", {"ts": 1}, "node"),
        ("ts a string", _wire(ts="soon"), "ts"),
        ("ts NaN", _wire(ts=float("nan")), "ts"),
        ("gpu value a bool", _wire(**{"gpus.0.power_w": True}), "power_w"),
        ("gpus not a list", _wire(gpus={}), "gpus"),
        ("unknown event kind", _wire(**{"events.0.kind": "meltdown"}), "events"),
        ("host field missing", _wire(host={"ts": 1}), "cpu_percent"),
        ("process memory a string", _wire(**{"gpus.0.processes.0.used_memory_mib": "lots"}), "used_memory_mib"),
        ("process memory an object", _wire(**{"gpus.0.processes.0.used_memory_mib": {"a": [1]}}), "used_memory_mib"),
    ],
)
def test_bad_input_names_the_field(name: str, wire: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        batch_from_dict(wire)
    assert caught.value.field == field, name


def test_flood_of_samples_or_events_is_refused() -> None:
    with pytest.raises(ValidationError, match="at most 64"):
        batch_from_dict({"node": "n", "ts": 1, "gpus": [{}] * 65})
    event = {"ts": 1, "kind": "xid", "gpu_index": 0, "xid": 79}
    with pytest.raises(ValidationError, match="at most 10"):
        batch_from_dict({"node": "n", "ts": 1, "events": [event] * 11}, max_events=10)
    assert len(batch_from_dict({"node": "n", "ts": 1, "events": [event] * 10}, max_events=10).events) == 10


def test_throttle_reason_names() -> None:
    assert compute_throttle_reason_names(0) == ()
    names = compute_throttle_reason_names(0x1 | 0x20 | 0x80)
    assert names == ("gpu_idle", "sw_thermal_slowdown", "hw_power_brake_slowdown")


def test_gpu_series_skip_unreported_values() -> None:
    s = GpuSample(
        ts=1, index=0, uuid="u", utilization_percent=50, memory_used_mib=20, memory_total_mib=80, throttle_reasons=0x1
    )
    series = compute_gpu_series(s)
    assert series["gpu_memory_used_percent"] == 25.0 and series["gpu_utilization_percent"] == 50.0
    assert series["gpu_throttled"] == 0.0  # idle is not throttling
    assert "gpu_power_w" not in series and "gpu_ecc_dbe_total" not in series
    assert compute_gpu_series(GpuSample(ts=1, index=0, uuid="u", throttle_reasons=0x40))["gpu_throttled"] == 1.0


def test_every_gpu_series_has_its_value_in_order_and_only_the_asked_ones_are_made() -> None:
    assert list(GPU_VALUE) == list(GPU_SERIES)
    s = GpuSample(ts=1, index=0, uuid="u", utilization_percent=50, temperature_c=61, power_w=300, memory_total_mib=80)
    every = compute_gpu_series(s)
    assert list(every) == [m for m in GPU_SERIES if m in every]
    asked = ["gpu_temperature_c", "gpu_utilization_percent", "gpu_ecc_dbe_total"]  # the last: not reported
    assert compute_gpu_series(s, asked) == {"gpu_temperature_c": 61.0, "gpu_utilization_percent": 50.0}


def test_host_series_percentages() -> None:
    series = compute_host_series(HOST)
    assert series["host_memory_used_percent"] == 25.0 and series["host_disk_used_percent"] == 25.0


def test_event_kinds_are_the_documented_set() -> None:
    assert {k.value for k in GpuEventKind} == {"xid", "ecc_dbe", "off_bus", "nvml_error", "temperature", "gpu_missing"}
    assert GpuEvent(1.0, GpuEventKind.XID, 0, xid=79).xid == 79


def test_job_gpu_summary_folds_samples_incrementally() -> None:
    def sample(ts: float, util: float | None, power: float | None = 100.0, mem: int = 10) -> GpuSample:
        return GpuSample(ts=ts, index=0, uuid="u", utilization_percent=util, power_w=power, memory_used_mib=mem)

    first = merge_job_gpu_summary(JobGpuSummary(), [sample(10, 90, mem=500), sample(10, 2, power=None)])
    both = merge_job_gpu_summary(first, [sample(15, 40), sample(5, None), sample(20, 0, mem=7)])
    assert (both.samples, both.utilization_max, both.memory_used_max_mib, both.idle_samples) == (4, 90, 500, 2)
    assert both.utilization_avg == (90 + 2 + 40 + 0) / 4 and both.idle_fraction == 0.5
    assert both.power_w_avg == 100.0 and both.power_samples == 3
    assert (both.first_ts, both.last_ts) == (10, 20)
    assert JobGpuSummary().utilization_avg is None


def test_ingest_budget_allows_the_steady_rate_and_refuses_a_flood() -> None:
    # An 8-GPU agent at 5 s sends 9 samples a batch; allow 4 samples/s with a burst of 40.
    budget = IngestBudget.full(rate_per_s=4, burst=40, now=0.0)
    size = compute_batch_size(_batch())
    assert size == 4 + 1 + 1  # 4 GPUs, the host, one event
    for i in range(1, 100):
        budget, ok = compute_ingest(budget, 9, now=5.0 * i)
        assert ok
    accepted = 0
    for _ in range(20):  # twenty batches in the same instant: the full bucket (40) holds four
        budget, ok = compute_ingest(budget, 9, now=500.0)
        accepted += ok
    assert accepted == 4
    budget, ok = compute_ingest(budget, 9, now=510.0)  # the bucket refills with time
    assert ok
