"""SimulatedGpuBackend and load_gpu_backend: deterministic inventory and realistic topology."""

from __future__ import annotations

import pytest

from corral.agent.gpu import GpuBackendError, SimulatedGpuBackend, load_gpu_backend
from corral.agent.gpu import nvml as nvml_module
from corral.core.errors import ValidationError


def test_same_node_same_uuids_other_node_other_uuids() -> None:
    a = SimulatedGpuBackend("sim:8xH100-80GB", "node-a").discover()
    assert a == SimulatedGpuBackend("sim:8xH100-80GB", "node-a").discover()
    b = SimulatedGpuBackend("sim:8xH100-80GB", "node-b").discover()
    assert not {g.uuid for g in a} & {g.uuid for g in b}
    assert all(g.uuid.startswith("GPU-sim-") for g in a)
    assert len({g.pci_bus_id for g in a}) == 8


@pytest.mark.parametrize(
    ("spec", "all_to_all"),
    [
        ("sim:8xH100-80GB", True),
        ("sim:8xH200", True),
        ("sim:8xA100-40GB", True),
        ("sim:8xB200", True),
        ("sim:4xH100-80GB", False),
        ("sim:8xL40S", False),
        ("sim:8xRTX4090", False),
    ],
)
def test_nvlink_by_model_and_count(spec: str, all_to_all: bool) -> None:
    gpus = SimulatedGpuBackend(spec, "n").discover()
    for g in gpus:
        expected = tuple(i for i in range(len(gpus)) if i != g.index) if all_to_all else ()
        assert g.nvlink_peers == expected, spec


def test_v100_hybrid_cube_mesh() -> None:
    gpus = SimulatedGpuBackend("sim:8xV100", "n").discover()
    assert gpus[0].nvlink_peers == (1, 2, 3, 4)
    assert gpus[5].nvlink_peers == (1, 4, 6, 7)


@pytest.mark.parametrize(
    ("spec", "numa"),
    [("sim:8xH100", [0, 0, 0, 0, 1, 1, 1, 1]), ("sim:4xL4", [0, 0, 1, 1]), ("sim:2xL4", [0, 0])],
)
def test_numa_split(spec: str, numa: list[int]) -> None:
    assert [g.numa_node for g in SimulatedGpuBackend(spec, "n").discover()] == numa


def test_pcie_switch_pairs_and_memory() -> None:
    gpus = SimulatedGpuBackend("sim:5xA10", "n").discover()
    assert [g.pcie_switch for g in gpus] == ["pcie0", "pcie0", "pcie2", "pcie2", "pcie4"]
    assert all(g.memory_mib == 24 * 1024 and g.model == "A10-24GB" for g in gpus)


def test_zero_gpus() -> None:
    assert SimulatedGpuBackend("sim:0xH100", "n").discover() == []


@pytest.mark.parametrize(
    ("spec", "kind", "backend_name"),
    [("sim:2xT4", "simulated", "simulated"), ("none", "none", "none"), (" sim:1xL4 ", "simulated", "simulated")],
)
def test_load_gpu_backend(spec: str, kind: str, backend_name: str) -> None:
    assert load_gpu_backend(spec, "n").name == backend_name


@pytest.mark.parametrize("spec", ["sim:lots", "cuda", "", "sim:99xH100"])
def test_load_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(ValidationError) as err:
        load_gpu_backend(spec, "n")
    assert err.value.field == "gpus"


def test_auto_and_nvml_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("corral.agent.gpu.nvml_available", lambda: False)
    backend = load_gpu_backend("auto", "n")
    assert backend.name == "simulated" and len(backend.discover()) == 8
    with pytest.raises(GpuBackendError, match="NVML found no GPUs"):
        load_gpu_backend("nvml", "n")


def test_auto_prefers_nvml_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("corral.agent.gpu.nvml_available", lambda: True)
    backend = load_gpu_backend("auto", "n")
    assert isinstance(backend, nvml_module.NvmlGpuBackend)
