"""NvmlGpuBackend over FakeNvml: fields, NVLink and PCIe topology, ECC, failing GPUs, availability."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from corral.agent.gpu import GpuBackendError, NvmlGpuBackend, nvml_available
from corral.agent.gpu.fake_nvml import FakeGpu, FakeNvml
from corral.agent.gpu.nvml import compute_nvlink_peers, compute_switch_groups, normalize_bus_id


def test_discovers_identity_memory_and_pci_fields() -> None:
    fake = FakeNvml.dgx(8, "NVIDIA H100 80GB HBM3")
    gpus = NvmlGpuBackend(fake).discover()
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert gpus[0].memory_mib == 81559
    assert gpus[0].uuid == fake.gpus[0].uuid and gpus[0].uuid.startswith("GPU-")
    assert gpus[3].pci_bus_id == "00000000:5D:00.0"
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.healthy and g.ecc_enabled for g in gpus)


@pytest.mark.parametrize(
    ("name", "fake", "expected_peers"),
    [
        ("nvswitch fabric", FakeNvml.dgx(8, nvlink="all"), {0: (1, 2, 3, 4, 5, 6, 7), 7: (0, 1, 2, 3, 4, 5, 6)}),
        ("direct mesh", FakeNvml.dgx(4, nvlink="direct"), {0: (1, 2, 3), 2: (0, 1, 3)}),
        ("no nvlink", FakeNvml.dgx(8, nvlink="none"), {0: (), 5: ()}),
        ("pcie box", FakeNvml.pcie_box(4), {0: (), 3: ()}),
    ],
)
def test_nvlink_peers(name: str, fake: FakeNvml, expected_peers: dict[int, tuple[int, ...]]) -> None:
    gpus = NvmlGpuBackend(fake).discover()
    for index, peers in expected_peers.items():
        assert gpus[index].nvlink_peers == peers, name


def test_nvlink_bridge_pairs_map_bus_ids_to_indices() -> None:
    fake = FakeNvml.pcie_box(4, "NVIDIA RTX A6000")
    buses = [g.pci_bus_id for g in fake.gpus]
    fake.gpus[0].nvlinks = {0: buses[1], 1: buses[1]}  # two links to the same peer count once
    fake.gpus[1].nvlinks = {0: buses[0], 1: buses[0]}
    fake.gpus[2].nvlinks = {0: buses[3].lower().replace("00000000:", "0000:")}  # other bus id spelling
    fake.gpus[3].nvlinks = {0: buses[2]}
    gpus = NvmlGpuBackend(fake).discover()
    assert [g.nvlink_peers for g in gpus] == [(1,), (0,), (3,), (2,)]


def test_error_on_one_link_means_no_link() -> None:
    fake = FakeNvml.dgx(4, nvlink="direct")
    fake.fail(0, "nvmlDeviceGetNvLinkRemotePciInfo", pynvml.NVML_ERROR_UNKNOWN)
    gpus = NvmlGpuBackend(fake).discover()
    assert gpus[0].healthy  # links are optional: the GPU itself is fine
    assert gpus[0].nvlink_peers == (1, 2, 3)  # peers still found from the other GPUs' links


def test_pcie_switch_groups_and_ecc() -> None:
    gpus = NvmlGpuBackend(FakeNvml.pcie_box(4)).discover()
    assert [g.pcie_switch for g in gpus] == ["pcie0", "pcie0", "pcie2", "pcie2"]
    assert not any(g.ecc_enabled for g in gpus)


def test_numa_falls_back_to_sysfs(tmp_path: Path) -> None:
    fake = FakeNvml.pcie_box(2)
    for gpu in fake.gpus:
        gpu.numa_node = None  # NVML answers NOT_SUPPORTED
    sysfs_dir = tmp_path / "bus" / "pci" / "devices" / normalize_bus_id(fake.gpus[0].pci_bus_id)
    sysfs_dir.mkdir(parents=True)
    (sysfs_dir / "numa_node").write_text("1\n")
    gpus = NvmlGpuBackend(fake, sysfs_root=tmp_path).discover()
    assert [g.numa_node for g in gpus] == [1, None]  # second GPU: no sysfs entry


def test_numa_from_memory_affinity_first(tmp_path: Path) -> None:
    """As on a real H200 VM (driver 580): NumaNodeId NOT_SUPPORTED, sysfs -1, memory affinity node 0."""
    fake = FakeNvml.pcie_box(2)
    fake.gpus[0].numa_node, fake.gpus[0].memory_affinity = None, 0
    fake.gpus[1].numa_node, fake.gpus[1].memory_affinity = 0, 65  # a second word of the mask; wins over NumaNodeId
    sysfs_dir = tmp_path / "bus" / "pci" / "devices" / normalize_bus_id(fake.gpus[0].pci_bus_id)
    sysfs_dir.mkdir(parents=True)
    (sysfs_dir / "numa_node").write_text("-1\n")
    gpus = NvmlGpuBackend(fake, sysfs_root=tmp_path).discover()
    assert [g.numa_node for g in gpus] == [0, 65]


def test_lost_gpu_is_reported_unhealthy_not_raised() -> None:
    fake = FakeNvml.dgx(8)
    fake.lose(3)
    gpus = NvmlGpuBackend(fake).discover()
    assert len(gpus) == 8
    assert not gpus[3].healthy and gpus[3].memory_mib == 0
    assert len({g.uuid for g in gpus}) == 8
    assert 3 not in gpus[0].nvlink_peers
    assert all(g.healthy for g in gpus if g.index != 3)


@pytest.mark.parametrize("call", ["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName", "nvmlDeviceGetUUID"])
def test_gpu_failing_a_required_read_is_unhealthy(call: str) -> None:
    fake = FakeNvml.dgx(2, nvlink="none")
    fake.fail(1, call)
    gpus = NvmlGpuBackend(fake).discover()
    assert gpus[0].healthy and not gpus[1].healthy


def test_bytes_strings_from_old_pynvml_are_decoded() -> None:
    gpus = NvmlGpuBackend(FakeNvml.dgx(2, "Tesla V100-SXM2-32GB", nvlink="direct")).discover()
    old = FakeNvml.dgx(2, "Tesla V100-SXM2-32GB", nvlink="direct")
    old.bytes_strings = True
    assert NvmlGpuBackend(old).discover() == gpus
    assert gpus[0].model == "Tesla V100-SXM2-32GB"


def test_close_shuts_nvml_down_and_discover_reopens() -> None:
    fake = FakeNvml.dgx(2)
    backend = NvmlGpuBackend(fake)
    backend.discover()
    backend.discover()
    assert fake.init_refs == 1
    backend.close()
    backend.close()
    assert fake.init_refs == 0
    assert len(backend.discover()) == 2


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_NO_PERMISSION],
)
def test_unusable_library(code: int) -> None:
    fake = FakeNvml(init_error=code)
    assert nvml_available(fake) is False
    with pytest.raises(GpuBackendError):
        NvmlGpuBackend(fake).discover()


def test_available_needs_at_least_one_gpu() -> None:
    assert nvml_available(FakeNvml([])) is False
    fake = FakeNvml.dgx(1)
    assert nvml_available(fake) is True
    assert fake.init_refs == 0  # the probe shuts NVML down again


def test_compute_helpers() -> None:
    remotes = {0: {"sw"}, 1: {"sw"}, 2: {"0000:18:00.0"}, 3: set()}
    peers = compute_nvlink_peers(remotes, {"0000:18:00.0": 0})
    assert peers == {0: (1, 2), 1: (0,), 2: (0,), 3: ()}
    assert compute_switch_groups(range(5), [(3, 4), (1, 3)]) == {1: "pcie1", 3: "pcie1", 4: "pcie1"}
    assert normalize_bus_id("00000000:DB:00.0") == "0000:db:00.0"


def test_fake_gpu_defaults_get_unique_uuids() -> None:
    fake = FakeNvml([FakeGpu(pci_bus_id="00000000:18:00.0"), FakeGpu(pci_bus_id="00000000:2A:00.0")])
    assert len({g.uuid for g in NvmlGpuBackend(fake).discover()}) == 2
