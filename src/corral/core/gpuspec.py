"""Parse simulated GPU specs such as `sim:8xH100-80GB` or `sim:4xA100` (pure; memory from the model when left out)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from corral.core.errors import ValidationError

_SPEC = re.compile(r"^(?P<count>\d+)x(?P<model>[A-Za-z0-9][A-Za-z0-9._]*?)(?:-(?P<mem>\d+)GB)?$")

# Memory (GiB) of well-known models when the spec leaves it out.
DEFAULT_MEMORY_GB = {
    "H100": 80,
    "H200": 141,
    "A100": 80,
    "A10": 24,
    "A30": 24,
    "L4": 24,
    "L40S": 48,
    "V100": 32,
    "T4": 16,
    "P100": 16,
    "B200": 192,
    "RTX4090": 24,
}


@dataclass(frozen=True, slots=True)
class SimGpuSpec:
    count: int
    model: str  # e.g. "H100-80GB"
    memory_mib: int


def parse_sim_spec(spec: str) -> SimGpuSpec:
    """`sim:8xH100-80GB` -> SimGpuSpec(8, "H100-80GB", 81920). Raises ValidationError on bad input."""
    body = spec.removeprefix("sim:")
    m = _SPEC.match(body)
    if not m:
        raise ValidationError("gpus", f"bad simulated GPU spec {spec!r}; expected like sim:8xH100-80GB")
    count = int(m["count"])
    if not 0 <= count <= 64:
        raise ValidationError("gpus", f"simulated GPU count {count} out of range 0..64")
    base = m["model"]
    mem_gb = int(m["mem"]) if m["mem"] else DEFAULT_MEMORY_GB.get(base.upper(), 16)
    return SimGpuSpec(count=count, model=f"{base}-{mem_gb}GB", memory_mib=mem_gb * 1024)
