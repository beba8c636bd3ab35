"""GPU health checks: a per-GPU state machine fed with samples, events and `now`; it returns transitions.

Pure apart from HealthChecker, which only holds the state between checks (behind a lock). A failed GPU
goes UNHEALTHY at once; it returns to HEALTHY after `recovery_checks` consecutive checks without a
failure, or when an admin enables it. An admin-disabled GPU stays out until enabled.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from corral.core.errors import ValidationError
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch

# Xids that mean the GPU cannot be trusted with work until reset (NVIDIA's XID catalogue):
# 48 double-bit ECC, 63/64 row-remapping / page-retirement failures, 74 NVLink error, 79 fallen off
# the bus, 92 high single-bit ECC rate, 94/95 contained / uncontained memory errors.
DEFAULT_FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})


class GpuHealth(StrEnum):
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"


# Reasons beyond the GpuEventKind values ("xid", "ecc_dbe", "off_bus", ...).
REASON_RECOVERED = "recovered"
REASON_ADMIN_ENABLE = "admin_enable"
REASON_ADMIN_DISABLE = "admin_disable"


_FAULT_WORDS = {
    "xid": "an Xid error",
    "ecc_dbe": "double-bit ECC error",
    "off_bus": "fallen off the bus",
    "nvml_error": "NVML cannot read it",
    "temperature": "over its temperature limit",
    "gpu_missing": "missing",
    REASON_ADMIN_DISABLE: "disabled by an admin",
}


def describe_gpu_fault(reason: str, detail: str = "") -> str:
    """A GPU's health reason in words: ("xid", "fatal Xid 79: ...") -> "Xid 79", "off_bus" -> "fallen off the
    bus"; an unknown reason as it is (pure)."""
    if reason == "xid":
        m = re.search(r"Xid (\d+)", detail)
        if m:
            return f"Xid {m.group(1)}"
    return _FAULT_WORDS.get(reason, reason)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """What counts as a failure and how long recovery takes. Raises ValidationError when out of range."""

    fatal_xids: frozenset[int] = DEFAULT_FATAL_XIDS
    temperature_limit_c: float = 90.0
    recovery_checks: int = 3
    # Xids after which the GPU stays out until an admin enables it (e.g. 48, 79 on real hardware,
    # where only a reset clears them); empty by default: recovery by clean checks, as for any failure.
    sticky_xids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.recovery_checks < 1:
            raise ValidationError("recovery_checks", "must be at least 1")
        if not 0 < self.temperature_limit_c < 200:
            raise ValidationError("temperature_limit_c", "must be between 0 and 200")
        if any(x <= 0 for x in self.fatal_xids):
            raise ValidationError("fatal_xids", "Xid codes are positive integers")
        if not self.sticky_xids <= self.fatal_xids:
            raise ValidationError("sticky_xids", "a sticky Xid must also be fatal")


@dataclass(frozen=True, slots=True)
class GpuFailure:
    index: int
    reason: str  # a GpuEventKind value
    detail: str
    sticky: bool = False  # only an admin brings the GPU back


@dataclass(frozen=True, slots=True)
class GpuHealthState:
    index: int
    health: GpuHealth = GpuHealth.HEALTHY
    reason: str = ""  # why it is (or last was) unhealthy
    detail: str = ""
    since: float = 0.0
    healthy_streak: int = 0  # consecutive checks without a failure while UNHEALTHY
    admin_disabled: bool = False
    ecc_dbe_seen: int | None = None  # last double-bit count read, to notice increases


@dataclass(frozen=True, slots=True)
class NodeHealthState:
    """The health of one node's GPUs. `registered_gpu_count`: GPUs the node had when it registered."""

    registered_gpu_count: int
    gpus: tuple[GpuHealthState, ...]
    gpu_count_low: bool = False

    @classmethod
    def initial(cls, gpu_indices: Iterable[int], now: float) -> NodeHealthState:
        indices = sorted(set(gpu_indices))
        return cls(len(indices), tuple(GpuHealthState(i, since=now) for i in indices))

    def gpu(self, index: int) -> GpuHealthState:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)

    @property
    def unhealthy_indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus if g.health is GpuHealth.UNHEALTHY)


@dataclass(frozen=True, slots=True)
class HealthTransition:
    """A change to report as an event on the node. `gpu_index` None: about the node's GPU count."""

    ts: float
    gpu_index: int | None
    old: GpuHealth
    new: GpuHealth
    reason: str
    detail: str


def compute_gpu_failures(
    state: NodeHealthState, samples: Sequence[GpuSample], events: Sequence[GpuEvent], policy: HealthPolicy
) -> dict[int, GpuFailure]:
    """The failures found in one check, first cause per GPU (pure)."""
    known = {g.index: g for g in state.gpus}
    failures: dict[int, GpuFailure] = {}

    def fail(index: int, reason: str, detail: str, sticky: bool = False) -> None:
        if index in known and index not in failures:
            failures[index] = GpuFailure(index, reason, detail, sticky)

    # Events first: they name the cause most precisely (a lost GPU also goes missing from samples).
    for e in events:
        if e.gpu_index is None:
            continue  # cannot be pinned on a GPU; the samples will show which one it was
        if e.kind is GpuEventKind.XID:
            if e.xid in policy.fatal_xids:
                fail(
                    e.gpu_index,
                    e.kind.value,
                    f"fatal Xid {e.xid}" + (f": {e.detail}" if e.detail else ""),
                    sticky=e.xid in policy.sticky_xids,
                )
        else:
            fail(e.gpu_index, e.kind.value, e.detail or e.kind.value)
    for s in samples:
        if s.temperature_c is not None and s.temperature_c >= policy.temperature_limit_c:
            fail(
                s.index,
                GpuEventKind.TEMPERATURE.value,
                f"{s.temperature_c:.0f} C at or over the {policy.temperature_limit_c:.0f} C limit",
            )
        seen = known[s.index].ecc_dbe_seen if s.index in known else None
        if s.ecc_dbe_total is not None and seen is not None and s.ecc_dbe_total > seen:
            fail(s.index, GpuEventKind.ECC_DBE.value, f"{s.ecc_dbe_total - seen} new double-bit ECC errors")
    sampled = {s.index for s in samples}
    for index in known:
        if index not in sampled:
            fail(index, GpuEventKind.GPU_MISSING.value, f"GPU {index} could not be read")
    return failures


def compute_health(
    state: NodeHealthState,
    samples: Sequence[GpuSample],
    events: Sequence[GpuEvent],
    gpu_count: int,
    now: float,
    policy: HealthPolicy,
) -> tuple[NodeHealthState, list[HealthTransition]]:
    """One health check: the next state and the transitions it caused (pure)."""
    failures = compute_gpu_failures(state, samples, events, policy)
    dbe = {s.index: s.ecc_dbe_total for s in samples if s.ecc_dbe_total is not None}
    transitions: list[HealthTransition] = []
    gpus = []
    for g in state.gpus:
        g = dataclasses.replace(g, ecc_dbe_seen=dbe.get(g.index, g.ecc_dbe_seen))
        new, transition = _step(g, failures.get(g.index), now, policy)
        gpus.append(new)
        if transition is not None:
            transitions.append(transition)
    low = gpu_count < state.registered_gpu_count
    if low != state.gpu_count_low:
        old, new_health = (GpuHealth.HEALTHY, GpuHealth.UNHEALTHY) if low else (GpuHealth.UNHEALTHY, GpuHealth.HEALTHY)
        transitions.append(
            HealthTransition(
                now,
                None,
                old,
                new_health,
                GpuEventKind.GPU_MISSING.value if low else REASON_RECOVERED,
                f"{gpu_count} of {state.registered_gpu_count} GPUs present",
            )
        )
    return dataclasses.replace(state, gpus=tuple(gpus), gpu_count_low=low), transitions


def _step(
    g: GpuHealthState, failure: GpuFailure | None, now: float, policy: HealthPolicy
) -> tuple[GpuHealthState, HealthTransition | None]:
    """One GPU's edge of the state machine."""
    if failure is not None:
        if g.health is GpuHealth.HEALTHY:  # HEALTHY -> UNHEALTHY: any failure, at once
            new = dataclasses.replace(
                g,
                health=GpuHealth.UNHEALTHY,
                reason=failure.reason,
                detail=failure.detail,
                since=now,
                healthy_streak=0,
                admin_disabled=failure.sticky,
            )
            return new, HealthTransition(now, g.index, g.health, new.health, failure.reason, failure.detail)
        # still failing: the streak starts over (and a sticky failure now needs an admin)
        return dataclasses.replace(g, healthy_streak=0, admin_disabled=g.admin_disabled or failure.sticky), None
    if g.health is GpuHealth.HEALTHY or g.admin_disabled:
        return g, None  # healthy stays healthy; admin-disabled waits for an admin
    streak = g.healthy_streak + 1
    if streak < policy.recovery_checks:
        return dataclasses.replace(g, healthy_streak=streak), None
    # UNHEALTHY -> HEALTHY: enough consecutive clean checks
    new = dataclasses.replace(g, health=GpuHealth.HEALTHY, reason="", detail="", since=now, healthy_streak=0)
    detail = f"{streak} consecutive healthy checks after {g.reason}"
    return new, HealthTransition(now, g.index, g.health, new.health, REASON_RECOVERED, detail)


def apply_admin_enable(
    state: NodeHealthState, index: int, now: float, by: str = "admin"
) -> tuple[NodeHealthState, list[HealthTransition]]:
    """An admin puts GPU `index` back in the pool now. Raises KeyError for an unknown GPU."""
    g = state.gpu(index)
    new = dataclasses.replace(
        g, health=GpuHealth.HEALTHY, reason="", detail="", since=now, healthy_streak=0, admin_disabled=False
    )
    transitions = []
    if g.health is GpuHealth.UNHEALTHY:
        transitions.append(HealthTransition(now, index, g.health, new.health, REASON_ADMIN_ENABLE, f"enabled by {by}"))
    return _replace_gpu(state, new), transitions


def apply_admin_disable(
    state: NodeHealthState, index: int, now: float, by: str = "admin"
) -> tuple[NodeHealthState, list[HealthTransition]]:
    """An admin takes GPU `index` out until enabled again. Raises KeyError for an unknown GPU."""
    g = state.gpu(index)
    new = dataclasses.replace(
        g,
        health=GpuHealth.UNHEALTHY,
        reason=REASON_ADMIN_DISABLE,
        detail=f"disabled by {by}",
        since=now,
        healthy_streak=0,
        admin_disabled=True,
    )
    transitions = []
    if g.health is GpuHealth.HEALTHY:
        transitions.append(HealthTransition(now, index, g.health, new.health, REASON_ADMIN_DISABLE, new.detail))
    return _replace_gpu(state, new), transitions


def _replace_gpu(state: NodeHealthState, new: GpuHealthState) -> NodeHealthState:
    return dataclasses.replace(state, gpus=tuple(new if g.index == new.index else g for g in state.gpus))


class HealthChecker:
    """Holds one node's NodeHealthState between checks; every method returns the transitions it caused."""

    def __init__(self, gpu_indices: Iterable[int], now: float, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self._state = NodeHealthState.initial(gpu_indices, now)
        self._lock = threading.Lock()

    @property
    def state(self) -> NodeHealthState:
        with self._lock:
            return self._state

    def check(
        self, samples: Sequence[GpuSample], events: Sequence[GpuEvent], gpu_count: int, now: float
    ) -> list[HealthTransition]:
        with self._lock:
            self._state, transitions = compute_health(self._state, samples, events, gpu_count, now, self.policy)
            return transitions

    def check_batch(self, batch: TelemetryBatch) -> list[HealthTransition]:
        """One check from what the agent sent for one interval, at the batch's time."""
        return self.check(batch.gpus, batch.events, batch.gpu_count, batch.ts)

    def enable(self, index: int, now: float, by: str = "admin") -> list[HealthTransition]:
        with self._lock:
            self._state, transitions = apply_admin_enable(self._state, index, now, by)
            return transitions

    def disable(self, index: int, now: float, by: str = "admin") -> list[HealthTransition]:
        with self._lock:
            self._state, transitions = apply_admin_disable(self._state, index, now, by)
            return transitions
