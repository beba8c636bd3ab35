"""Collector: batches from the simulated backend and the host, event buffering and bounds, threads."""

from __future__ import annotations

import threading
import time

import pytest

from corral.agent.gpu import NoGpuBackend, NvmlGpuBackend, SimulatedGpuBackend
from corral.agent.gpu.fake_nvml import FakeNvml
from corral.agent.metrics import Collector, collect_host_sample
from corral.core.simfault import SimFault
from corral.core.telemetry import GpuEvent, GpuEventKind, HostSample, TelemetryBatch


def _host(now: float) -> HostSample:
    return HostSample(now, 1.0, 8, 0.1, 0.1, 0.1, 100, 1000, 1, 10, 0, 0, 0, 0)


def _poll(condition, deadline_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    """Poll until `condition()` holds or the deadline passes (no fixed sleeps in assertions)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_collect_once_builds_a_batch_and_hands_it_to_the_sink() -> None:
    sim = SimulatedGpuBackend("sim:8xH100-80GB", "n1")
    sim.set_load({0: 1.0, 5: 0.5})
    got: list[TelemetryBatch] = []
    batch = Collector(sim, got.append, node="n1", host_reader=_host).collect_once(now=42.0)
    assert got == [batch]
    assert (batch.node, batch.ts, batch.gpu_count, batch.host) == ("n1", 42.0, 8, _host(42.0))
    assert [s.index for s in batch.gpus] == list(range(8)) and all(s.ts == 42.0 for s in batch.gpus)
    assert batch.gpus[0].utilization_percent > batch.gpus[5].utilization_percent > 0  # type: ignore[operator]


def test_real_host_sample_is_plausible() -> None:
    collect_host_sample(0.0)
    s = collect_host_sample(1.0)
    assert 0 <= s.cpu_percent <= 100 and s.cpu_count >= 1
    assert 0 < s.memory_used_mib <= s.memory_total_mib
    assert 0 < s.disk_used_bytes <= s.disk_total_bytes
    assert s.net_rx_bytes >= 0 and s.load_1m >= 0


def test_lost_gpu_still_counts_and_its_event_is_in_the_batch() -> None:
    fake = FakeNvml.dgx(4)
    fake.lose(1)
    batch = Collector(NvmlGpuBackend(fake), lambda b: None, node="n", host_reader=None).collect_once(now=1.0)
    assert batch.gpu_count == 4 and [s.index for s in batch.gpus] == [0, 2, 3]
    assert [(e.kind, e.gpu_index) for e in batch.events] == [(GpuEventKind.OFF_BUS, 1)]


def test_backend_failure_becomes_an_event_not_a_crash() -> None:
    fake = FakeNvml.dgx(2)
    batch = Collector(NvmlGpuBackend(fake), lambda b: None, node="n", host_reader=None)
    fake.init_error = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    out = batch.collect_once(now=1.0)
    assert out.gpus == () and [(e.kind, e.gpu_index) for e in out.events] == [(GpuEventKind.NVML_ERROR, None)]


def test_pending_events_are_bounded_and_drops_counted_once() -> None:
    collector = Collector(NoGpuBackend(), lambda b: None, node="n", host_reader=None, max_pending_events=3)
    collector.add_events(GpuEvent(float(i), GpuEventKind.XID, 0, xid=79) for i in range(5))
    first = collector.collect_once(now=10.0)
    assert [e.ts for e in first.events] == [0.0, 1.0, 2.0] and first.dropped_events == 2
    second = collector.collect_once(now=15.0)
    assert second.events == () and second.dropped_events == 0


def test_injected_fault_reaches_the_sink_without_waiting_an_interval() -> None:
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1")
    got: list[TelemetryBatch] = []
    collector = Collector(sim, got.append, node="n1", host_reader=None, interval_s=3600, event_wait_s=0.05)
    collector.start()
    try:
        assert _poll(lambda: len(got) >= 1)  # the first pass runs at start
        sim.inject_fault(2, SimFault(xid=79))
        assert _poll(lambda: any(e.xid == 79 and e.gpu_index == 2 for b in got for e in b.events))
    finally:
        collector.stop()


def test_sink_errors_are_reported_and_collection_goes_on() -> None:
    sim = SimulatedGpuBackend("sim:1xL4", "n1")
    errors: list[Exception] = []
    calls: list[TelemetryBatch] = []

    def flaky(batch: TelemetryBatch) -> None:
        calls.append(batch)
        if len(calls) == 1:
            raise ConnectionError("server down")

    collector = Collector(
        sim, flaky, node="n1", host_reader=None, interval_s=3600, on_error=errors.append, event_wait_s=0.05
    )
    collector.start()
    try:
        assert _poll(lambda: len(errors) == 1)
        sim.inject_fault(0, SimFault(ecc=True))  # wakes the loop for a second pass
        assert _poll(lambda: len(calls) >= 2)
    finally:
        collector.stop()
    assert isinstance(errors[0], ConnectionError)


def test_stop_ends_both_threads() -> None:
    collector = Collector(NoGpuBackend(), lambda b: None, node="n", host_reader=None, event_wait_s=0.05)
    collector.start()
    collector.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith(("corral-collector-n", "corral-gpu-events-n"))]


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Collector(NoGpuBackend(), lambda b: None, node="n", interval_s=0)
