"""Faults injected into simulated GPUs, and their parsing from API/CLI input (pure).

The agent's SimulatedGpuBackend acts them out; the server validates a request with parse_sim_fault first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corral.core.errors import ValidationError


@dataclass(frozen=True, slots=True)
class SimFault:
    """A fault injected into one simulated GPU; it lasts until cleared.

    xid: the GPU reports this Xid on injection and on every sampling pass. ecc: one more double-bit
    ECC error per pass. off_bus: the GPU cannot be read at all. temperature_c: it reads this hot.
    """

    xid: int | None = None
    ecc: bool = False
    off_bus: bool = False
    temperature_c: float | None = None

    def merge(self, other: SimFault) -> SimFault:
        return SimFault(
            xid=other.xid if other.xid is not None else self.xid,
            ecc=self.ecc or other.ecc,
            off_bus=self.off_bus or other.off_bus,
            temperature_c=other.temperature_c if other.temperature_c is not None else self.temperature_c,
        )


def parse_sim_fault(data: Mapping[str, object]) -> SimFault | None:
    """A fault from API/CLI input: {"xid": 79} | {"ecc": true} | {"off_bus": true} | {"temperature_c": 95},
    several at once, or {"clear": true} (returns None: clear the GPU's faults).
    Raises ValidationError naming the field."""
    if data.get("clear"):
        # A flag set to false names no fault, but a number (0 degrees included) does (0 == False in Python).
        named = [data.get(k) is not None for k in ("xid", "temperature_c")]
        named += [data.get(k) not in (None, False) for k in ("ecc", "off_bus")]
        if any(named):
            raise ValidationError("clear", "clear cannot be combined with a fault")
        return None
    xid, temp = data.get("xid"), data.get("temperature_c")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or not 0 < xid < 1000):
        raise ValidationError("xid", f"expected an Xid code 1..999, got {xid!r}")
    if temp is not None and (isinstance(temp, bool) or not isinstance(temp, int | float) or not 0 <= temp <= 150):
        raise ValidationError("temperature_c", f"expected degrees C 0..150, got {temp!r}")
    fault = SimFault(
        xid=xid,
        ecc=data.get("ecc") is True,
        off_bus=data.get("off_bus") is True,
        temperature_c=float(temp) if temp is not None else None,
    )
    if fault == SimFault():
        raise ValidationError("fault", "name a fault: xid, ecc, off_bus or temperature_c (or clear)")
    return fault
