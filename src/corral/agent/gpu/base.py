"""The GpuBackend protocol: how the agent learns which GPUs its node has."""

from __future__ import annotations

from typing import Protocol

from corral.core.errors import CorralError
from corral.core.resources import GpuInfo


class GpuBackendError(CorralError):
    """The backend as a whole cannot work (no driver, no library, no devices where some were required)."""

    code = "gpu_backend"


class GpuBackend(Protocol):
    """Source of the node's GPU inventory and topology.

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

    def close(self) -> None:
        """Release driver handles. Idempotent; discover() after close() re-opens where it can."""
        ...
