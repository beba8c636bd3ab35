"""GpuBackend contract, run over every implementation: the surface the agent and scheduler rely on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.agent.gpu import GpuBackend, NoGpuBackend, NvmlGpuBackend, SimulatedGpuBackend
from corral.agent.gpu.fake_nvml import FakeNvml

BACKENDS: dict[str, Callable[[], GpuBackend]] = {
    "nvml-dgx-nvswitch": lambda: NvmlGpuBackend(FakeNvml.dgx(8)),
    "nvml-dgx-direct": lambda: NvmlGpuBackend(FakeNvml.dgx(4, nvlink="direct")),
    "nvml-pcie": lambda: NvmlGpuBackend(FakeNvml.pcie_box(4)),
    "simulated-h100": lambda: SimulatedGpuBackend("sim:8xH100-80GB", "node-1"),
    "simulated-v100": lambda: SimulatedGpuBackend("sim:8xV100", "node-1"),
    "simulated-l4": lambda: SimulatedGpuBackend("sim:3xL4", "node-1"),
    "none": NoGpuBackend,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> GpuBackend:
    made = BACKENDS[request.param]()
    request.addfinalizer(made.close)
    return made


def test_name(backend: GpuBackend) -> None:
    assert backend.name in {"nvml", "simulated", "none"}


def test_indices_and_uuids_unique_and_sorted(backend: GpuBackend) -> None:
    gpus = backend.discover()
    assert [g.index for g in gpus] == sorted({g.index for g in gpus})
    assert len({g.uuid for g in gpus}) == len(gpus)
    assert all(g.uuid for g in gpus)


def test_memory_and_model(backend: GpuBackend) -> None:
    for g in backend.discover():
        assert g.memory_mib > 0 and g.model


def test_nvlink_peers_symmetric_and_existing(backend: GpuBackend) -> None:
    gpus = {g.index: g for g in backend.discover()}
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
