"""GPU health rules in detail: policy validation names the field and the problem, what each failure reports,
the exact states and transitions of recovery and of admin enable/disable."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.health import (
    GpuFailure,
    GpuHealth,
    GpuHealthState,
    HealthChecker,
    HealthPolicy,
    HealthTransition,
    NodeHealthState,
    apply_admin_disable,
    apply_admin_enable,
    compute_gpu_failures,
    compute_health,
)
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch

H, U = GpuHealth.HEALTHY, GpuHealth.UNHEALTHY


def _sample(index: int, temperature_c: float | None = 40.0, ecc_dbe_total: int | None = 0) -> GpuSample:
    return GpuSample(ts=0.0, index=index, uuid=f"u{index}", temperature_c=temperature_c, ecc_dbe_total=ecc_dbe_total)


def _clean(count: int = 2) -> list[GpuSample]:
    return [_sample(i) for i in range(count)]


def _xid(index: int | None, code: int, detail: str = "") -> GpuEvent:
    return GpuEvent(1.0, GpuEventKind.XID, index, detail=detail, xid=code)


# ----- policy validation -----


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"recovery_checks": 0}, "recovery_checks: must be at least 1"),
        ({"temperature_limit_c": 0}, "temperature_limit_c: must be between 0 and 200"),
        ({"temperature_limit_c": 200}, "temperature_limit_c: must be between 0 and 200"),
        ({"temperature_limit_c": 250}, "temperature_limit_c: must be between 0 and 200"),
        ({"fatal_xids": frozenset({79, 0})}, "fatal_xids: Xid codes are positive integers"),
        ({"fatal_xids": frozenset({-3})}, "fatal_xids: Xid codes are positive integers"),
        ({"sticky_xids": frozenset({79, 13})}, "sticky_xids: a sticky Xid must also be fatal"),
    ],
)
def test_bad_policy_names_the_field_and_the_problem(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        HealthPolicy(**bad)  # type: ignore[arg-type]
    field, problem = message.split(": ", 1)
    assert (caught.value.field, caught.value.problem, str(caught.value)) == (field, problem, message)


@pytest.mark.parametrize(
    "good",
    [
        {"recovery_checks": 1},
        {"temperature_limit_c": 0.5},  # the range is open: anything above 0 ...
        {"temperature_limit_c": 199.5},  # ... and below 200
        {"fatal_xids": frozenset({1})},  # 1 is the smallest Xid code
        {"fatal_xids": frozenset({48, 79}), "sticky_xids": frozenset({48, 79})},  # every fatal Xid may be sticky
    ],
)
def test_policy_values_at_the_edges_are_accepted(good: dict[str, object]) -> None:
    policy = HealthPolicy(**good)  # type: ignore[arg-type]
    for key, value in good.items():
        assert getattr(policy, key) == value


# ----- initial state -----


def test_initial_state_is_healthy_since_now_and_counts_distinct_gpus() -> None:
    state = NodeHealthState.initial([3, 1, 1, 0], now=12.5)
    assert state.registered_gpu_count == 3
    assert state.gpus == (GpuHealthState(0, since=12.5), GpuHealthState(1, since=12.5), GpuHealthState(3, since=12.5))
    assert HealthChecker(range(2), now=7.0).state.gpu(1) == GpuHealthState(1, since=7.0)


def test_unknown_gpu_raises_key_error_naming_the_index() -> None:
    state = NodeHealthState.initial(range(2), now=0.0)
    with pytest.raises(KeyError) as caught:
        state.gpu(7)
    assert caught.value.args == (7,)


# ----- what each failure reports -----


def _failures(samples: list[GpuSample], events: list[GpuEvent], **policy: object) -> dict[int, GpuFailure]:
    state = NodeHealthState.initial(range(2), now=0.0)
    return compute_gpu_failures(state, samples, events, HealthPolicy(**policy))  # type: ignore[arg-type]


def test_fatal_xid_detail_names_the_code_and_the_driver_text() -> None:
    events = [_xid(0, 79, "GPU has fallen off the bus"), _xid(1, 48)]
    assert _failures(_clean(), events) == {
        0: GpuFailure(0, "xid", "fatal Xid 79: GPU has fallen off the bus"),
        1: GpuFailure(1, "xid", "fatal Xid 48"),
    }


def test_only_sticky_xids_make_a_sticky_failure() -> None:
    events = [_xid(0, 79), _xid(1, 48)]
    failures = _failures(_clean(), events, sticky_xids=frozenset({79}))
    assert failures == {0: GpuFailure(0, "xid", "fatal Xid 79", sticky=True), 1: GpuFailure(1, "xid", "fatal Xid 48")}


def test_other_events_report_their_detail_or_else_their_kind() -> None:
    events = [
        GpuEvent(1.0, GpuEventKind.OFF_BUS, 0, detail="NVML: GPU is lost"),
        GpuEvent(1.0, GpuEventKind.NVML_ERROR, 1),
    ]
    assert _failures(_clean(), events) == {
        0: GpuFailure(0, "off_bus", "NVML: GPU is lost"),
        1: GpuFailure(1, "nvml_error", "nvml_error"),
    }


def test_an_event_without_a_gpu_does_not_hide_the_events_after_it() -> None:
    events = [GpuEvent(1.0, GpuEventKind.NVML_ERROR, None, detail="driver gone"), _xid(1, 79)]
    assert _failures(_clean(), events) == {1: GpuFailure(1, "xid", "fatal Xid 79")}


def test_temperature_failure_names_the_reading_and_the_limit() -> None:
    samples = [_sample(0, temperature_c=95.2), _sample(1, temperature_c=None)]  # None: not reported, not a failure
    assert _failures(samples, []) == {0: GpuFailure(0, "temperature", "95 C at or over the 90 C limit")}


def test_missing_gpu_failure_names_the_gpu() -> None:
    assert _failures([_sample(0)], []) == {1: GpuFailure(1, "gpu_missing", "GPU 1 could not be read")}


def test_samples_for_gpus_the_node_did_not_register_are_ignored() -> None:
    assert _failures([*_clean(), _sample(9, temperature_c=120.0, ecc_dbe_total=5)], []) == {}


def test_first_cause_wins_events_before_samples() -> None:
    samples = [_sample(0, temperature_c=99.0), _sample(1)]
    events = [GpuEvent(1.0, GpuEventKind.ECC_DBE, 0, detail="first"), _xid(0, 79)]
    assert _failures(samples, events) == {0: GpuFailure(0, "ecc_dbe", "first")}


def test_ecc_failure_counts_the_new_double_bit_errors() -> None:
    checker = HealthChecker(range(1), now=0.0)
    checker.check([_sample(0, ecc_dbe_total=2)], [], 1, now=1.0)  # baseline: 2 errors already
    transitions = checker.check([_sample(0, ecc_dbe_total=5)], [], 1, now=2.0)
    assert transitions == [HealthTransition(2.0, 0, H, U, "ecc_dbe", "3 new double-bit ECC errors")]


def test_ecc_baseline_survives_a_check_that_did_not_read_the_counter() -> None:
    checker = HealthChecker(range(1), now=0.0)
    checker.check([_sample(0, ecc_dbe_total=2)], [], 1, now=1.0)
    assert checker.check([_sample(0, ecc_dbe_total=None)], [], 1, now=2.0) == []
    assert checker.state.gpu(0).ecc_dbe_seen == 2
    transitions = checker.check([_sample(0, ecc_dbe_total=3)], [], 1, now=3.0)
    assert [(t.reason, t.detail) for t in transitions] == [("ecc_dbe", "1 new double-bit ECC errors")]


# ----- the state machine -----


def test_failure_records_reason_detail_and_time_on_the_gpu() -> None:
    checker = HealthChecker(range(2), now=0.0)
    transitions = checker.check(_clean(), [_xid(1, 79, "lost")], 2, now=4.0)
    assert transitions == [HealthTransition(4.0, 1, H, U, "xid", "fatal Xid 79: lost")]
    assert checker.state.gpu(1) == GpuHealthState(1, U, "xid", "fatal Xid 79: lost", since=4.0, ecc_dbe_seen=0)
    assert checker.state.gpu(0) == GpuHealthState(0, since=0.0, ecc_dbe_seen=0)


def test_recovery_clears_the_reason_and_reports_the_clean_checks() -> None:
    checker = HealthChecker(range(1), now=0.0, policy=HealthPolicy(recovery_checks=3))
    checker.check([_sample(0)], [_xid(0, 48)], 1, now=1.0)
    assert checker.check([_sample(0)], [], 1, now=2.0) == []
    assert checker.state.gpu(0).healthy_streak == 1
    assert checker.check([_sample(0)], [], 1, now=3.0) == []
    assert checker.state.gpu(0).healthy_streak == 2
    back = checker.check([_sample(0)], [], 1, now=4.0)
    assert back == [HealthTransition(4.0, 0, U, H, "recovered", "3 consecutive healthy checks after xid")]
    assert checker.state.gpu(0) == GpuHealthState(0, H, "", "", since=4.0, healthy_streak=0, ecc_dbe_seen=0)


def test_a_sticky_xid_while_already_unhealthy_still_needs_an_admin() -> None:
    policy = HealthPolicy(recovery_checks=1, sticky_xids=frozenset({79}))
    checker = HealthChecker(range(1), now=0.0, policy=policy)
    checker.check([_sample(0)], [_xid(0, 48)], 1, now=1.0)  # out, but would recover by itself
    assert checker.check([_sample(0)], [_xid(0, 79)], 1, now=2.0) == []  # already out: nothing new to report
    assert checker.state.gpu(0).admin_disabled is True
    for now in (3.0, 4.0, 5.0):
        assert checker.check([_sample(0)], [], 1, now=now) == []
    assert checker.state.unhealthy_indices == (0,)


def test_a_failure_on_an_admin_disabled_gpu_does_not_undo_the_disable() -> None:
    checker = HealthChecker(range(1), now=0.0, policy=HealthPolicy(recovery_checks=1))
    checker.disable(0, now=1.0)
    checker.check([_sample(0)], [_xid(0, 48)], 1, now=2.0)
    assert checker.state.gpu(0).admin_disabled is True
    for now in (3.0, 4.0):
        assert checker.check([_sample(0)], [], 1, now=now) == []
    assert checker.state.unhealthy_indices == (0,)


def test_gpu_count_transitions_carry_time_and_both_states() -> None:
    checker = HealthChecker(range(2), now=0.0)
    low = checker.check([_sample(0), _sample(1)], [], 1, now=5.0)
    assert low == [HealthTransition(5.0, None, H, U, "gpu_missing", "1 of 2 GPUs present")]
    back = checker.check([_sample(0), _sample(1)], [], 2, now=6.0)
    assert back == [HealthTransition(6.0, None, U, H, "recovered", "2 of 2 GPUs present")]
    assert not checker.state.gpu_count_low


def test_check_batch_uses_the_batch_time() -> None:
    checker = HealthChecker(range(1), now=0.0)
    batch = TelemetryBatch("n1", 42.0, None, (_sample(0),), (_xid(0, 79),), gpu_count=1)
    assert checker.check_batch(batch) == [HealthTransition(42.0, 0, H, U, "xid", "fatal Xid 79")]
    assert checker.state.gpu(0).since == 42.0


def test_compute_health_returns_the_state_it_describes() -> None:
    state = NodeHealthState.initial(range(1), now=0.0)
    new, transitions = compute_health(state, [], [], 0, 3.0, HealthPolicy())
    assert new.gpus == (GpuHealthState(0, U, "gpu_missing", "GPU 0 could not be read", since=3.0),)
    assert new.gpu_count_low and [t.gpu_index for t in transitions] == [0, None]


# ----- admin enable / disable -----


def _out_with_streak() -> NodeHealthState:
    """GPU 0 unhealthy after an Xid with one clean check behind it; GPU 1 healthy."""
    state = NodeHealthState.initial(range(2), now=0.0)
    policy = HealthPolicy(recovery_checks=3)
    state, _ = compute_health(state, _clean(), [_xid(0, 48)], 2, 1.0, policy)
    state, _ = compute_health(state, _clean(), [], 2, 2.0, policy)
    assert state.gpu(0).healthy_streak == 1
    return state


def test_admin_enable_resets_the_gpu_completely() -> None:
    state, transitions = apply_admin_enable(_out_with_streak(), 0, now=5.0)
    assert transitions == [HealthTransition(5.0, 0, U, H, "admin_enable", "enabled by admin")]
    assert state.gpu(0) == GpuHealthState(0, H, "", "", since=5.0, healthy_streak=0, ecc_dbe_seen=0)
    assert state.gpu(1) == _out_with_streak().gpu(1)


def test_admin_enable_lifts_a_disable_so_later_failures_recover_by_themselves() -> None:
    checker = HealthChecker(range(1), now=0.0, policy=HealthPolicy(recovery_checks=1))
    checker.disable(0, now=1.0, by="bob")
    assert checker.enable(0, now=2.0) == [HealthTransition(2.0, 0, U, H, "admin_enable", "enabled by admin")]
    assert checker.state.gpu(0) == GpuHealthState(0, H, since=2.0)
    checker.check([_sample(0)], [_xid(0, 48)], 1, now=3.0)
    assert [t.new for t in checker.check([_sample(0)], [], 1, now=4.0)] == [H]


def test_admin_disable_of_a_healthy_gpu() -> None:
    state = NodeHealthState.initial(range(2), now=0.0)
    state, transitions = apply_admin_disable(state, 1, now=3.0)
    assert transitions == [HealthTransition(3.0, 1, H, U, "admin_disable", "disabled by admin")]
    assert state.gpu(1) == GpuHealthState(1, U, "admin_disable", "disabled by admin", since=3.0, admin_disabled=True)
    assert state.gpu(0) == GpuHealthState(0, since=0.0)


def test_admin_disable_of_an_unhealthy_gpu_takes_over_the_reason_quietly() -> None:
    state, transitions = apply_admin_disable(_out_with_streak(), 0, now=3.0, by="carol")
    assert transitions == []  # it was already out of the pool
    expected = GpuHealthState(
        0, U, "admin_disable", "disabled by carol", since=3.0, admin_disabled=True, ecc_dbe_seen=0
    )
    assert state.gpu(0) == expected


def test_checker_enable_and_disable_pass_time_and_who() -> None:
    checker = HealthChecker(range(2), now=0.0)
    assert checker.disable(0, now=1.0) == [HealthTransition(1.0, 0, H, U, "admin_disable", "disabled by admin")]
    assert checker.disable(1, 2.0, "dave") == [HealthTransition(2.0, 1, H, U, "admin_disable", "disabled by dave")]
    assert checker.state.gpu(0).since == 1.0 and checker.state.gpu(1).since == 2.0
    assert checker.enable(0, now=3.0) == [HealthTransition(3.0, 0, U, H, "admin_enable", "enabled by admin")]
    assert checker.enable(1, 4.0, "erin") == [HealthTransition(4.0, 1, U, H, "admin_enable", "enabled by erin")]
    assert checker.state.gpu(0).since == 3.0 and checker.state.gpu(1).since == 4.0
