"""SimulatedGpuBackend vital stats (driven by load) and injected faults (xid, ecc, off-bus, temperature)."""

from __future__ import annotations

import threading

import pytest

from corral.agent.gpu.simulated import SimulatedGpuBackend, compute_sim_gpus, compute_sim_sample
from corral.core.gpuspec import parse_sim_spec
from corral.core.simfault import SimFault
from corral.core.telemetry import GpuEvent, GpuEventKind


def _sim(spec: str = "sim:8xH100-80GB") -> SimulatedGpuBackend:
    return SimulatedGpuBackend(spec, "node-1", clock=lambda: 50.0)


def test_series_follow_load() -> None:
    sim = _sim()
    sim.set_load({0: 1.0, 1: 0.5})
    s = {x.index: x for x in sim.sample(100.0).samples}
    util = [s[i].utilization_percent for i in range(3)]
    assert util[0] > util[1] > util[2] == 0.0  # type: ignore[operator]
    assert s[0].power_w > s[1].power_w > s[2].power_w  # type: ignore[operator]
    assert s[0].temperature_c > s[2].temperature_c  # type: ignore[operator]
    assert s[0].sm_clock_mhz == 1980 and s[2].sm_clock_mhz < 1000
    assert s[2].throttle_reason_names == ("gpu_idle",) and s[0].throttle_reasons == 0
    assert s[0].power_w <= 700.0  # never above the H100 board limit  # type: ignore[operator]


def test_load_source_callable_is_read_on_every_sample() -> None:
    busy: dict[int, float] = {}
    sim = SimulatedGpuBackend("sim:2xA100", "n", load=lambda: busy)
    assert sim.sample(1.0).samples[1].utilization_percent == 0.0
    busy[1] = 1.0
    assert sim.sample(2.0).samples[1].utilization_percent > 90  # type: ignore[operator]


def test_set_load_accepts_indices() -> None:
    sim = _sim("sim:2xL4")
    sim.set_load([1])
    samples = sim.sample(1.0).samples
    assert samples[0].utilization_percent == 0.0 and samples[1].utilization_percent > 90  # type: ignore[operator]


def test_sample_is_deterministic_for_same_inputs() -> None:
    gpu = compute_sim_gpus(parse_sim_spec("sim:1xH100"), "n")[0]
    assert compute_sim_sample(gpu, 0.7, 10.0) == compute_sim_sample(gpu, 0.7, 10.0)


def test_nvlink_counters_grow_with_load_only_on_nvlink_gpus() -> None:
    sim = _sim()
    sim.set_load({0: 1.0})
    sim.sample(0.0)
    s = {x.index: x for x in sim.sample(5.0).samples}
    assert s[0].nvlink_rx_kib > 0 and s[1].nvlink_rx_kib == 0  # type: ignore[operator]
    pcie = _sim("sim:2xL40S").sample(1.0).samples[0]
    assert pcie.nvlink_rx_kib is None


@pytest.mark.parametrize(
    ("name", "fault", "kinds"),
    [
        ("xid", SimFault(xid=79), [GpuEventKind.XID]),
        ("ecc", SimFault(ecc=True), [GpuEventKind.ECC_DBE]),
        ("off bus", SimFault(off_bus=True), [GpuEventKind.OFF_BUS]),
        ("temperature", SimFault(temperature_c=95.0), []),
    ],
)
def test_fault_events_on_injection_and_every_pass_until_cleared(
    name: str, fault: SimFault, kinds: list[GpuEventKind]
) -> None:
    sim = _sim()
    sim.inject_fault(4, fault)
    assert [(e.kind, e.gpu_index, e.ts) for e in sim.wait_events(0)] == [(k, 4, 50.0) for k in kinds], name
    for now in (1.0, 2.0):
        assert [(e.kind, e.gpu_index) for e in sim.sample(now).events] == [(k, 4) for k in kinds], name
    sim.clear_faults(4)
    readout = sim.sample(3.0)
    assert readout.events == () and len(readout.samples) == 8, name


def test_xid_fault_carries_the_code() -> None:
    sim = _sim()
    sim.inject_fault(2, SimFault(xid=48))
    assert [e.xid for e in sim.wait_events(0)] == [48]


def test_ecc_fault_raises_the_double_bit_counter_and_counts_survive_clear() -> None:
    sim = _sim()
    sim.inject_fault(1, SimFault(ecc=True))
    first = sim.sample(1.0).samples[1].ecc_dbe_total
    second = sim.sample(2.0).samples[1].ecc_dbe_total
    assert first is not None and second is not None and second > first >= 1
    sim.clear_faults()
    assert sim.sample(3.0).samples[1].ecc_dbe_total == second


def test_temperature_fault_overrides_reading() -> None:
    sim = _sim()
    sim.inject_fault(0, SimFault(temperature_c=97.0))
    assert sim.sample(1.0).samples[0].temperature_c == 97.0


def test_off_bus_marks_gpu_unhealthy_in_discovery() -> None:
    sim = _sim()
    sim.inject_fault(6, SimFault(off_bus=True))
    assert [g.index for g in sim.discover() if not g.healthy] == [6]
    sim.clear_faults()
    assert all(g.healthy for g in sim.discover())


def test_faults_merge() -> None:
    sim = _sim()
    sim.inject_fault(0, SimFault(xid=79))
    sim.inject_fault(0, SimFault(temperature_c=99.0))
    assert sim.faults() == {0: SimFault(xid=79, temperature_c=99.0)}


def test_fault_on_unknown_gpu_is_refused() -> None:
    with pytest.raises(IndexError):
        _sim("sim:2xH100").inject_fault(5, SimFault(xid=79))


def test_wait_events_wakes_up_when_a_fault_is_injected() -> None:
    sim = _sim()
    got: list[GpuEvent] = []
    started = threading.Event()

    def watch() -> None:
        started.set()
        got.extend(sim.wait_events(30.0))

    watcher = threading.Thread(target=watch)
    watcher.start()
    started.wait(5)
    sim.inject_fault(3, SimFault(xid=94))
    watcher.join(30)
    assert [(e.gpu_index, e.xid) for e in got] == [(3, 94)]
