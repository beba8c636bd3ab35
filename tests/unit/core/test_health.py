"""GPU health state machine: each failure cause, recovery after N clean checks, admin enable/disable,
GPU count below registration."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.core.errors import ValidationError
from corral.core.health import (
    DEFAULT_FATAL_XIDS,
    GpuHealth,
    HealthChecker,
    HealthPolicy,
    NodeHealthState,
    compute_health,
)
from corral.core.simfault import SimFault
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch

H, U = GpuHealth.HEALTHY, GpuHealth.UNHEALTHY


def _samples(count: int = 4, changes: Mapping[int, Mapping[str, Any]] | None = None) -> list[GpuSample]:
    """Clean samples for GPUs 0..count-1; changes={2: {"temperature_c": 95}} changes GPU 2."""
    out = []
    for i in range(count):
        s = GpuSample(ts=0.0, index=i, uuid=f"u{i}", temperature_c=40.0, ecc_dbe_total=0)
        out.append(dataclasses.replace(s, **(changes or {}).get(i, {})))
    return out


def _xid(index: int, code: int) -> GpuEvent:
    return GpuEvent(1.0, GpuEventKind.XID, index, xid=code)


@pytest.mark.parametrize(
    ("name", "samples", "events", "reason"),
    [
        ("fatal xid 79", _samples(), [_xid(2, 79)], "xid"),
        ("double-bit ecc event", _samples(), [GpuEvent(1.0, GpuEventKind.ECC_DBE, 2)], "ecc_dbe"),
        ("double-bit counter rose", _samples(changes={2: {"ecc_dbe_total": 1}}), [], "ecc_dbe"),
        ("off the bus", [s for s in _samples() if s.index != 2], [GpuEvent(1.0, GpuEventKind.OFF_BUS, 2)], "off_bus"),
        (
            "nvml error",
            [s for s in _samples() if s.index != 2],
            [GpuEvent(1.0, GpuEventKind.NVML_ERROR, 2)],
            "nvml_error",
        ),
        ("not read, no event", [s for s in _samples() if s.index != 2], [], "gpu_missing"),
        ("too hot", _samples(changes={2: {"temperature_c": 90.0}}), [], "temperature"),
    ],
)
def test_each_failure_takes_the_gpu_out_at_once(
    name: str, samples: list[GpuSample], events: list[GpuEvent], reason: str
) -> None:
    checker = HealthChecker(range(4), now=0.0)
    checker.check(_samples(), [], 4, now=5.0)  # establishes the ECC baseline
    transitions = checker.check(samples, events, 4, now=10.0)
    assert [(t.gpu_index, t.old, t.new, t.reason, t.ts) for t in transitions] == [(2, H, U, reason, 10.0)], name
    assert checker.state.unhealthy_indices == (2,), name


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_non_fatal_xids_leave_the_gpu_in(code: int) -> None:
    checker = HealthChecker(range(4), now=0.0)
    assert checker.check(_samples(), [_xid(1, code)], 4, now=1.0) == []


def test_fatal_xid_set_is_configurable() -> None:
    checker = HealthChecker(range(4), now=0.0, policy=HealthPolicy(fatal_xids=frozenset({13})))
    assert checker.check(_samples(), [_xid(0, 79)], 4, now=1.0) == []
    assert [t.gpu_index for t in checker.check(_samples(), [_xid(0, 13)], 4, now=2.0)] == [0]
    assert {48, 63, 64, 74, 79, 92, 94, 95} == DEFAULT_FATAL_XIDS


def test_sticky_xids_need_an_admin() -> None:
    policy = HealthPolicy(recovery_checks=1, sticky_xids=frozenset({79}))
    checker = HealthChecker(range(2), now=0.0, policy=policy)
    checker.check(_samples(2), [_xid(0, 79), _xid(1, 48)], 2, now=1.0)
    for now in (2.0, 3.0, 4.0):
        checker.check(_samples(2), [], 2, now=now)
    assert checker.state.unhealthy_indices == (0,)  # 48 recovered by a clean check, 79 waits
    assert [t.reason for t in checker.enable(0, now=5.0)] == ["admin_enable"]
    assert checker.state.unhealthy_indices == ()


def test_temperature_limit_is_configurable() -> None:
    hot = _samples(changes={0: {"temperature_c": 85.0}})
    assert HealthChecker(range(4), 0.0).check(hot, [], 4, 1.0) == []
    assert len(HealthChecker(range(4), 0.0, HealthPolicy(temperature_limit_c=80)).check(hot, [], 4, 1.0)) == 1


def test_returns_only_after_n_consecutive_healthy_checks() -> None:
    checker = HealthChecker(range(4), now=0.0, policy=HealthPolicy(recovery_checks=3))
    checker.check(_samples(), [_xid(1, 79)], 4, now=1.0)
    assert checker.check(_samples(), [], 4, now=2.0) == []
    assert checker.check(_samples(), [], 4, now=3.0) == []
    checker.check(_samples(), [_xid(1, 79)], 4, now=4.0)  # failing again: the count starts over
    assert checker.check(_samples(), [], 4, now=5.0) == []
    assert checker.check(_samples(), [], 4, now=6.0) == []
    back = checker.check(_samples(), [], 4, now=7.0)
    assert [(t.gpu_index, t.old, t.new, t.reason) for t in back] == [(1, U, H, "recovered")]
    assert checker.state.gpu(1).since == 7.0 and checker.state.unhealthy_indices == ()


def test_admin_enable_returns_a_gpu_at_once_and_disable_keeps_it_out() -> None:
    checker = HealthChecker(range(2), now=0.0, policy=HealthPolicy(recovery_checks=2))
    checker.check(_samples(2), [_xid(0, 48)], 2, now=1.0)
    enabled = checker.enable(0, now=2.0, by="alice")
    assert [(t.gpu_index, t.new, t.reason, t.detail) for t in enabled] == [(0, H, "admin_enable", "enabled by alice")]
    assert checker.enable(0, now=2.5) == []  # already in: nothing to report
    assert [t.reason for t in checker.disable(1, now=3.0)] == ["admin_disable"]
    for now in (4.0, 5.0, 6.0):
        assert checker.check(_samples(2), [], 2, now=now) == []
    assert checker.state.unhealthy_indices == (1,)
    with pytest.raises(KeyError):
        checker.enable(7, now=7.0)


def test_gpu_count_below_registration_is_reported_for_the_node() -> None:
    checker = HealthChecker(range(8), now=0.0)
    eight = _samples(8)
    transitions = checker.check(eight[:7], [], 7, now=1.0)
    assert [(t.gpu_index, t.new, t.reason) for t in transitions] == [(7, U, "gpu_missing"), (None, U, "gpu_missing")]
    assert transitions[1].detail == "7 of 8 GPUs present" and checker.state.gpu_count_low
    assert checker.check(eight[:7], [], 7, now=2.0) == []  # reported once
    back = checker.check(eight, [], 8, now=3.0)
    assert [(t.gpu_index, t.new) for t in back] == [(None, H)]


def test_events_without_a_gpu_and_for_unknown_gpus_are_ignored() -> None:
    checker = HealthChecker(range(2), now=0.0)
    events = [GpuEvent(1.0, GpuEventKind.OFF_BUS, None), GpuEvent(1.0, GpuEventKind.ECC_DBE, 9)]
    assert checker.check(_samples(2), events, 2, now=1.0) == []


def test_compute_health_is_pure() -> None:
    state = NodeHealthState.initial(range(2), 0.0)
    policy = HealthPolicy()
    first = compute_health(state, _samples(2), [_xid(0, 79)], 2, 1.0, policy)
    assert compute_health(state, _samples(2), [_xid(0, 79)], 2, 1.0, policy) == first
    assert state.unhealthy_indices == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"recovery_checks": 0},
        {"temperature_limit_c": -5},
        {"fatal_xids": frozenset({0})},
        {"sticky_xids": frozenset({13})},
    ],
)
def test_bad_policy_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HealthPolicy(**bad)  # type: ignore[arg-type]


def test_simulated_xid_79_goes_unhealthy_and_back_after_clear() -> None:
    """The closed loop the e2e test exercises, without processes: inject, check, clear, recover."""
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1", clock=lambda: 0.0)
    checker = HealthChecker((g.index for g in sim.discover()), now=0.0, policy=HealthPolicy(recovery_checks=2))

    def check(now: float) -> list[tuple[int | None, GpuHealth]]:
        readout = sim.sample(now)
        events = list(readout.events) + sim.wait_events(0)
        batch = TelemetryBatch("n1", now, None, readout.samples, tuple(events), gpu_count=len(sim.discover()))
        return [(t.gpu_index, t.new) for t in checker.check_batch(batch)]

    assert check(5.0) == []
    sim.inject_fault(3, SimFault(xid=79))
    assert check(10.0) == [(3, U)]
    assert check(15.0) == []  # the fault persists until cleared
    sim.clear_faults(3)
    assert check(20.0) == []
    assert check(25.0) == [(3, H)]
