"""The GpuBackend protocol: how the agent learns which GPUs its node has, how they are doing, and their faults."""

from __future__ import annotations

from typing import Protocol

from corral.core.errors import CorralError
from corral.core.resources import GpuInfo
from corral.core.telemetry import GpuEvent, GpuReadout


class GpuBackendError(CorralError):
    """The backend as a whole cannot work (no driver, no library, no devices where some were required)."""

    code = "gpu_backend"


class GpuBackend(Protocol):
    """Source of the node's GPU inventory, topology, vital stats and fault events.

    Implementations: NvmlGpuBackend (real hardware), SimulatedGpuBackend (a spec such as sim:8xH100-80GB).
    """

    # "nvml" or "simulated": reported upstream so operators can tell real nodes from simulated ones.
    name: str

    def discover(self) -> list[GpuInfo]:
        """The GPUs now present, sorted by index; indices and UUIDs are unique.

        Cheap enough to call at start and then periodically (a few ms for 8 GPUs); blocks only on the
        driver. Never raises for one GPU that errors: that GPU is reported with healthy=False (and what
        could still be read). Raises GpuBackendError only when the backend as a whole fails (e.g. the
        driver went away). `nvlink_peers` is symmetric and only names indices in the result.
        Thread-safe.
        """
        ...

    def sample(self, now: float) -> GpuReadout:
        """Read every GPU's vital stats once, stamped `now` (Unix seconds).

        Blocks only on the driver (tens of ms for 8 GPUs on NVML, nothing for the simulator). Values a
        GPU does not support are None in its sample. A GPU that cannot be read at all gets no sample and
        an event instead (off_bus when it fell off the bus, nvml_error otherwise), so one bad GPU never
        hides the others. Raises GpuBackendError only when the backend as a whole fails. Thread-safe,
        and safe to call while another thread is inside wait_events().
        """
        ...

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        """Block up to `timeout_s` for fault events (Xid errors, double-bit ECC, a GPU lost) and return
        those that arrived, oldest first; [] on timeout. `timeout_s` 0 polls without blocking.

        Meant for one dedicated watcher thread. Events are delivered once. Never raises for a fault
        on one GPU (that is an event); raises GpuBackendError only when event watching cannot work
        at all on this node (the caller then relies on sample() alone).
        """
        ...

    def close(self) -> None:
        """Release driver handles. Idempotent; discover() after close() re-opens where it can."""
        ...
