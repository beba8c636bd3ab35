"""GpuBackend contract, run over every implementation: the surface the agent and scheduler rely on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.agent.gpu import GpuBackend, NoGpuBackend, NvmlGpuBackend, SimulatedGpuBackend
from corral.agent.gpu.fake_nvml import FakeNvml
from corral.core.simfault import SimFault
from corral.core.telemetry import GpuEventKind

BACKENDS: dict[str, Callable[[], GpuBackend]] = {
    "nvml-dgx-nvswitch": lambda: NvmlGpuBackend(FakeNvml.dgx(8)),
    "nvml-dgx-direct": lambda: NvmlGpuBackend(FakeNvml.dgx(4, nvlink="direct")),
    "nvml-pcie": lambda: NvmlGpuBackend(FakeNvml.pcie_box(4)),
    "simulated-h100": lambda: SimulatedGpuBackend("sim:8xH100-80GB", "node-1"),
    "simulated-v100": lambda: SimulatedGpuBackend("sim:8xV100", "node-1"),
    "simulated-l4": lambda: SimulatedGpuBackend("sim:3xL4", "node-1"),
    "none": NoGpuBackend,
}
# (GPUs, NVLink peer links) each backend must discover: the loops below never pass by running over nothing
# (the `none` backend, which has no GPUs, is held to that explicitly in test_no_gpu_backend_is_empty_everywhere).
SHAPE: dict[str, tuple[int, int]] = {
    "nvml-dgx-nvswitch": (8, 56),
    "nvml-dgx-direct": (4, 12),
    "nvml-pcie": (4, 0),
    "simulated-h100": (8, 56),
    "simulated-v100": (8, 32),
    "simulated-l4": (3, 0),
    "none": (0, 0),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> GpuBackend:
    made = BACKENDS[request.param]()
    request.addfinalizer(made.close)
    return made


@pytest.fixture
def shape(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SHAPE[request.node.callspec.params["backend"]]


def test_name(backend: GpuBackend) -> None:
    assert backend.name in {"nvml", "simulated", "none"}


def test_every_backend_has_a_declared_shape() -> None:
    assert set(SHAPE) == set(BACKENDS)


def test_discovers_the_declared_gpus_and_links(backend: GpuBackend, shape: tuple[int, int]) -> None:
    gpus = backend.discover()
    assert (len(gpus), sum(len(g.nvlink_peers) for g in gpus)) == shape


def test_no_gpu_backend_is_empty_everywhere() -> None:
    backend = NoGpuBackend()
    assert backend.name == "none" and backend.discover() == []
    readout = backend.sample(1000.0)
    assert readout.samples == () and readout.events == () and backend.wait_events(0) == []
    backend.close()


def test_indices_and_uuids_unique_and_sorted(backend: GpuBackend) -> None:
    gpus = backend.discover()
    assert [g.index for g in gpus] == sorted({g.index for g in gpus})
    assert len({g.uuid for g in gpus}) == len(gpus)
    assert all(g.uuid for g in gpus)


def test_memory_and_model(backend: GpuBackend, shape: tuple[int, int]) -> None:
    gpus = backend.discover()
    assert len(gpus) == shape[0]
    for g in gpus:
        assert g.memory_mib > 0 and g.model


def test_nvlink_peers_symmetric_and_existing(backend: GpuBackend, shape: tuple[int, int]) -> None:
    gpus = {g.index: g for g in backend.discover()}
    assert (len(gpus), sum(len(g.nvlink_peers) for g in gpus.values())) == shape
    for g in gpus.values():
        assert g.index not in g.nvlink_peers
        assert list(g.nvlink_peers) == sorted(set(g.nvlink_peers))
        for peer in g.nvlink_peers:
            assert peer in gpus
            assert g.index in gpus[peer].nvlink_peers


def test_discover_is_repeatable_and_close_idempotent(backend: GpuBackend) -> None:
    first = backend.discover()
    assert backend.discover() == first
    backend.close()
    backend.close()


# ----- sampling and fault events -----


def test_sample_covers_discovered_gpus(backend: GpuBackend, shape: tuple[int, int]) -> None:
    gpus = {g.index: g.uuid for g in backend.discover()}
    readout = backend.sample(1000.0)
    assert readout.events == () and len(readout.samples) == shape[0]
    assert [s.index for s in readout.samples] == sorted(gpus)
    for s in readout.samples:
        assert s.ts == 1000.0 and s.uuid == gpus[s.index]
        assert s.utilization_percent is not None and 0 <= s.utilization_percent <= 100
        assert s.memory_total_mib and s.memory_used_mib is not None and 0 <= s.memory_used_mib <= s.memory_total_mib
        assert s.temperature_c is not None and s.sm_clock_mhz


def test_wait_events_polls_without_blocking_when_idle(backend: GpuBackend) -> None:
    assert backend.wait_events(0) == []


class FaultHarness:
    """Drives one backend's faults through the backend's own means (FakeNvml or the simulator's API)."""

    def __init__(
        self,
        backend: GpuBackend,
        busy: Callable[[int], None],
        xid: Callable[[int, int], None],
        lose: Callable[[int], None],
    ) -> None:
        self.backend, self.busy, self.xid, self.lose = backend, busy, xid, lose


def _nvml_harness() -> FaultHarness:
    fake = FakeNvml.dgx(4)
    return FaultHarness(NvmlGpuBackend(fake), fake.busy, fake.emit_xid, fake.lose)


def _sim_harness() -> FaultHarness:
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "node-1")
    busy: set[int] = set()

    def make_busy(index: int) -> None:
        busy.add(index)
        sim.set_load(busy)

    return FaultHarness(
        sim,
        make_busy,
        lambda i, code: sim.inject_fault(i, SimFault(xid=code)),
        lambda i: sim.inject_fault(i, SimFault(off_bus=True)),
    )


HARNESSES: dict[str, Callable[[], FaultHarness]] = {"nvml-fake": _nvml_harness, "simulated": _sim_harness}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest) -> FaultHarness:
    made = HARNESSES[request.param]()
    request.addfinalizer(made.backend.close)
    return made


def test_busy_gpu_reads_busy_and_idle_gpu_idle(harness: FaultHarness) -> None:
    harness.busy(1)
    samples = {s.index: s for s in harness.backend.sample(5.0).samples}
    busy, idle = samples[1], samples[0]
    assert busy.utilization_percent is not None and busy.utilization_percent > 50
    assert idle.utilization_percent is not None and idle.utilization_percent < 5
    assert busy.power_w is not None and idle.power_w is not None and busy.power_w > idle.power_w
    assert busy.memory_used_mib is not None and idle.memory_used_mib is not None
    assert busy.memory_used_mib > idle.memory_used_mib


def test_xid_is_delivered_by_wait_events_once(harness: FaultHarness) -> None:
    harness.backend.wait_events(0)
    harness.xid(2, 79)
    events = harness.backend.wait_events(0)
    assert [(e.kind, e.gpu_index, e.xid) for e in events] == [(GpuEventKind.XID, 2, 79)]


def test_lost_gpu_is_left_out_of_samples_and_reported_off_bus(harness: FaultHarness) -> None:
    harness.lose(3)
    readout = harness.backend.sample(7.0)
    assert 3 not in {s.index for s in readout.samples}
    assert (GpuEventKind.OFF_BUS, 3) in {(e.kind, e.gpu_index) for e in readout.events}
    assert [g.healthy for g in harness.backend.discover() if g.index == 3] == [False]
