"""GpuBackend over NVIDIA's NVML (nvidia-ml-py): inventory, health, topology, vital stats, fault events."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, TypeVar

import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information

from corral.agent.gpu.base import GpuBackendError
from corral.agent.gpu.nvml_telemetry import (
    GpuLostError,
    NvmlEventWatcher,
    PcieCounters,
    compute_failure_event,
    read_gpu_sample,
)
from corral.core.resources import GpuInfo
from corral.core.telemetry import GpuEvent, GpuReadout, GpuSample

_MIB = 1024 * 1024
_NODE_SET_WORDS = 4  # 64-bit words of NUMA node mask asked from NVML: nodes 0..255
_T = TypeVar("_T")

# The NVML surface is the pynvml module or a FakeNvml with the same attributes; it is untyped either way.
NvmlModule = Any


def nvml_available(nvml: NvmlModule = pynvml) -> bool:
    """True when NVML loads, initialises and reports at least one GPU. Never raises."""
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError):
        return False
    try:
        return int(nvml.nvmlDeviceGetCount()) > 0
    except nvml.NVMLError:
        return False
    finally:
        _shutdown_quietly(nvml)


def _shutdown_quietly(nvml: NvmlModule) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass  # shutting down a half-initialised library: nothing more to release


def decode_text(value: str | bytes) -> str:
    """pynvml before 11.x returned bytes for names, UUIDs and bus ids; newer versions return str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:18:00.0` (NVML) -> `0000:18:00.0` (Linux sysfs), lower case; '' stays ''."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3:
        return bus_id.strip().lower()
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return bus_id.strip().lower()
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


def compute_nvlink_peers(remotes: dict[int, set[str]], gpu_by_bus: dict[str, int]) -> dict[int, tuple[int, ...]]:
    """Peers per GPU index from the (normalized) remote bus ids of each GPU's active NVLinks.

    A remote that is another GPU is a direct peer. A remote that is not a GPU is an NVSwitch: every
    GPU attached to the same switch is a peer (DGX/HGX A100, H100). The result is symmetric.
    """
    peers: dict[int, set[int]] = {i: set() for i in remotes}
    switch_members: dict[str, set[int]] = {}
    for i, buses in remotes.items():
        for bus in buses:
            j = gpu_by_bus.get(bus)
            if j is None:
                switch_members.setdefault(bus, set()).add(i)
            elif j != i:
                peers[i].add(j)
                peers.setdefault(j, set()).add(i)
    for members in switch_members.values():
        for i in members:
            peers[i] |= members - {i}
    return {i: tuple(sorted(p)) for i, p in peers.items()}


def compute_switch_groups(indices: Iterable[int], shared: Iterable[tuple[int, int]]) -> dict[int, str]:
    """Label GPUs that share a PCIe switch (pairs in `shared`, closed transitively) as `pcie<lowest>`.

    GPUs that share a switch with no other GPU get no label: the scheduler cannot use it.
    """
    parent = {i: i for i in indices}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in shared:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in parent:
        groups.setdefault(root(i), []).append(i)
    return {i: f"pcie{min(g)}" for g in groups.values() if len(g) > 1 for i in g}


@dataclass
class _Probe:
    """What one discovery pass could read about one GPU (mutable scratch)."""

    index: int
    handle: Any = None
    uuid: str = ""
    model: str = "unknown"
    memory_mib: int = 0
    bus_id: str = ""
    numa_node: int | None = None
    ecc_enabled: bool = False
    healthy: bool = True
    remotes: set[str] = field(default_factory=set)

    def to_info(self, peers: tuple[int, ...], switch: str | None) -> GpuInfo:
        return GpuInfo(
            index=self.index,
            uuid=self.uuid or f"GPU-unavailable-{self.index}",
            model=self.model,
            memory_mib=self.memory_mib,
            pci_bus_id=self.bus_id,
            numa_node=self.numa_node,
            nvlink_peers=peers,
            pcie_switch=switch,
            ecc_enabled=self.ecc_enabled,
            healthy=self.healthy,
        )


class NvmlGpuBackend:
    """Discovers GPUs through NVML. `nvml` is the pynvml module, or a FakeNvml in tests.

    `sysfs_root` is where the NUMA fallback (`bus/pci/devices/<bus>/numa_node`) is read from;
    `clock` stamps fault events. Stop the event watcher thread before close().
    """

    name = "nvml"

    def __init__(
        self, nvml: NvmlModule = pynvml, sysfs_root: Path = Path("/sys"), clock: Callable[[], float] = time.time
    ) -> None:
        self._nvml = nvml
        self._sysfs_root = sysfs_root
        self._lock = threading.Lock()
        self._event_lock = threading.Lock()  # one watcher; never held while sampling
        self._initialized = False
        self._watcher = NvmlEventWatcher(nvml, clock)
        self._pcie = PcieCounters()

    def discover(self) -> list[GpuInfo]:
        with self._lock:
            self._ensure_initialized()
            try:
                count = int(self._nvml.nvmlDeviceGetCount())
            except self._nvml.NVMLError as e:
                raise GpuBackendError(f"NVML could not count GPUs: {e}") from e
            probes = [self._probe(i) for i in range(count)]
            gpu_by_bus = {normalize_bus_id(p.bus_id): p.index for p in probes if p.bus_id}
            peers = compute_nvlink_peers({p.index: p.remotes for p in probes}, gpu_by_bus)
            switches = self._switch_groups(probes)
            return [p.to_info(peers.get(p.index, ()), switches.get(p.index)) for p in probes]

    def sample(self, now: float) -> GpuReadout:
        with self._lock:
            self._ensure_initialized()
            nv = self._nvml
            try:
                count = int(nv.nvmlDeviceGetCount())
            except nv.NVMLError as e:
                raise GpuBackendError(f"NVML could not count GPUs: {e}") from e
            samples: list[GpuSample] = []
            events: list[GpuEvent] = []
            for index in range(count):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    uuid = decode_text(nv.nvmlDeviceGetUUID(handle))
                    samples.append(read_gpu_sample(nv, handle, index, uuid, now, self._pcie))
                except (nv.NVMLError, GpuLostError) as e:
                    events.append(compute_failure_event(nv, index, e, now))
            return GpuReadout(tuple(samples), tuple(events))

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        with self._lock:
            self._ensure_initialized()
        with self._event_lock:
            return self._watcher.wait(timeout_s)

    def close(self) -> None:
        with self._event_lock:
            self._watcher.close()
        with self._lock:
            if self._initialized:
                self._initialized = False
                _shutdown_quietly(self._nvml)

    def _ensure_initialized(self) -> None:
        if self._initialized:
            return
        try:
            self._nvml.nvmlInit()
        except (self._nvml.NVMLError, OSError) as e:
            raise GpuBackendError(f"NVML is not usable on this node: {e}") from e
        self._initialized = True

    def _probe(self, index: int) -> _Probe:
        """Read one GPU. Identity and memory are required (failure: unhealthy); the rest is best effort."""
        nv = self._nvml
        probe = _Probe(index=index)
        try:
            probe.handle = nv.nvmlDeviceGetHandleByIndex(index)
            probe.uuid = decode_text(nv.nvmlDeviceGetUUID(probe.handle))
            probe.model = decode_text(nv.nvmlDeviceGetName(probe.handle))
            probe.memory_mib = int(nv.nvmlDeviceGetMemoryInfo(probe.handle).total) // _MIB
        except nv.NVMLError:
            probe.healthy = False
        if probe.handle is None:
            return probe
        handle = probe.handle
        probe.bus_id = self._optional(probe, lambda: decode_text(nv.nvmlDeviceGetPciInfo(handle).busId), "")
        probe.numa_node = self._numa_node(probe)
        probe.ecc_enabled = self._optional(
            probe, lambda: int(nv.nvmlDeviceGetEccMode(handle)[0]) == nv.NVML_FEATURE_ENABLED, False
        )
        probe.remotes = self._nvlink_remotes(handle)
        return probe

    def _optional(self, probe: _Probe, read: Callable[[], _T], default: _T) -> _T:
        """An optional field: NOT_SUPPORTED and friends give `default`; a lost GPU is also unhealthy."""
        try:
            return read()
        except self._nvml.NVMLError as e:
            if getattr(e, "value", None) == self._nvml.NVML_ERROR_GPU_IS_LOST:
                probe.healthy = False
            return default

    def _numa_node(self, probe: _Probe) -> int | None:
        """The host NUMA node nearest the GPU: NVML's memory affinity, else its NUMA node id, else sysfs.

        Memory affinity comes first: on an H200 in a VM (driver 580) NumaNodeId answered NOT_SUPPORTED and
        sysfs -1 while the memory affinity named node 0, as `nvidia-smi topo -m` does; on coherent GPUs
        (Grace Hopper) NumaNodeId names the GPU's own memory node, which holds no CPUs.
        """
        node = self._memory_affinity_node(probe)
        if node is not None:
            return node
        getter = getattr(self._nvml, "nvmlDeviceGetNumaNodeId", None)  # absent before nvidia-ml-py 12
        if getter is not None:
            node = self._optional(probe, lambda: int(getter(probe.handle)), None)
            if node is not None:
                return node if node >= 0 else None
        return self._sysfs_numa_node(probe.bus_id)

    def _memory_affinity_node(self, probe: _Probe) -> int | None:
        """The lowest NUMA node in NVML's memory-affinity mask (scope node); None if unsupported or empty."""
        nv = self._nvml
        getter = getattr(nv, "nvmlDeviceGetMemoryAffinity", None)
        scope = getattr(nv, "NVML_AFFINITY_SCOPE_NODE", None)
        if getter is None or scope is None:
            return None
        empty: list[int] = []
        words = self._optional(probe, lambda: [int(w) for w in getter(probe.handle, _NODE_SET_WORDS, scope)], empty)
        for word_index, word in enumerate(words):
            if word:
                return int(word_index * 64 + (word & -word).bit_length() - 1)
        return None

    def _sysfs_numa_node(self, bus_id: str) -> int | None:
        if not bus_id:
            return None
        path = self._sysfs_root / "bus" / "pci" / "devices" / normalize_bus_id(bus_id) / "numa_node"
        try:
            node = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None  # -1: the kernel does not know (single socket, some VMs)

    def _nvlink_remotes(self, handle: Any) -> set[str]:
        """Normalized bus ids at the far end of each active NVLink; an NVMLError on a link = no link."""
        nv = self._nvml
        remote_type = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        remotes: set[str] = set()
        for link in range(int(nv.NVML_NVLINK_MAX_LINKS)):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link) != nv.NVML_FEATURE_ENABLED:
                    continue
                if remote_type is not None and _is_cpu_link(nv, remote_type, handle, link):
                    continue
                remotes.add(normalize_bus_id(decode_text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)))
            except nv.NVMLError:
                continue
        return remotes

    def _switch_groups(self, probes: list[_Probe]) -> dict[int, str]:
        """GPUs whose closest common PCIe ancestor is a switch (or the same board) share a switch."""
        nv = self._nvml
        with_handle = [p for p in probes if p.handle is not None]
        shared: list[tuple[int, int]] = []
        for a, b in combinations(with_handle, 2):
            try:
                level = int(nv.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle))
            except nv.NVMLError:
                continue
            if level <= nv.NVML_TOPOLOGY_MULTIPLE:
                shared.append((a.index, b.index))
        return compute_switch_groups((p.index for p in probes), shared)


def _is_cpu_link(nv: NvmlModule, remote_type: Callable[[Any, int], int], handle: Any, link: int) -> bool:
    """POWER9 hosts link GPUs to the CPU (an IBM NPU): not a GPU peer, not a switch."""
    try:
        return bool(int(remote_type(handle, link)) == nv.NVML_NVLINK_DEVICE_TYPE_IBMNPU)
    except nv.NVMLError:
        return False
