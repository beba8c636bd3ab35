"""GPU backends for the agent: pick NVML, a simulated inventory, or none from one `gpus` setting."""

from __future__ import annotations

import threading

from corral.agent.gpu.base import GpuBackend, GpuBackendError
from corral.agent.gpu.nvml import NvmlGpuBackend, nvml_available
from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.core.errors import ValidationError
from corral.core.resources import GpuInfo
from corral.core.telemetry import GpuEvent, GpuReadout

__all__ = [
    "DEFAULT_SIM_SPEC",
    "GpuBackend",
    "GpuBackendError",
    "NoGpuBackend",
    "NvmlGpuBackend",
    "SimulatedGpuBackend",
    "load_gpu_backend",
    "nvml_available",
]

# What "auto" falls back to on a machine without NVIDIA GPUs (laptops, CI, demos).
DEFAULT_SIM_SPEC = "sim:8xH100-80GB"


class NoGpuBackend:
    """A CPU-only node."""

    name = "none"

    def __init__(self) -> None:
        self._closed = threading.Event()

    def discover(self) -> list[GpuInfo]:
        return []

    def sample(self, now: float) -> GpuReadout:
        return GpuReadout()

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        self._closed.wait(timeout_s)  # nothing to watch; honour the blocking contract so watchers do not spin
        return []

    def close(self) -> None:
        self._closed.set()


def load_gpu_backend(spec: str, node_name: str) -> GpuBackend:
    """`auto` (NVML when it sees GPUs, else DEFAULT_SIM_SPEC), `nvml`, `sim:<N>x<MODEL>[-<MEM>GB]`, `none`.

    Raises GpuBackendError for `nvml` without usable GPUs, ValidationError(field "gpus") for a bad spec.
    """
    spec = spec.strip()
    if spec == "auto":
        if nvml_available():
            return NvmlGpuBackend()
        return SimulatedGpuBackend(DEFAULT_SIM_SPEC, node_name)
    if spec == "nvml":
        if not nvml_available():
            raise GpuBackendError(
                "gpus=nvml but NVML found no GPUs (is the NVIDIA driver installed and are devices visible?);"
                " use gpus=auto, gpus=sim:8xH100-80GB or gpus=none"
            )
        return NvmlGpuBackend()
    if spec.startswith("sim:"):
        return SimulatedGpuBackend(spec, node_name)
    if spec == "none":
        return NoGpuBackend()
    raise ValidationError("gpus", f"unknown GPU backend {spec!r}; expected auto, nvml, sim:8xH100-80GB or none")
