"""The services' pure rules: the rolling update's step (simulated to the end under Hypothesis: availability never
drops below desired - max_unavailable, never more than desired + max_surge replicas, and it always completes), the
autoscaler (up at once, down after the window, to zero after the idle period) and names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.errors import ValidationError
from corral.core.services import (
    Autoscaler,
    ReplicaView,
    ScalePolicy,
    check_health_path,
    check_service_name,
    plan_rollout,
    restart_delay_s,
)


def _simulate(
    replicas: list[ReplicaView], target: int, desired: int, surge: int, unavailable: int, *, ready_after: int = 1
) -> tuple[list[ReplicaView], int, int, int]:
    """Run plan_rollout to the end: new replicas become ready `ready_after` steps after they start; stopped ones
    vanish at once. Returns (final replicas, steps, fewest ready seen, most replicas seen)."""
    next_id = max([r.job_id for r in replicas], default=0) + 1
    age: dict[int, int] = {}
    fewest_ready = sum(r.ready for r in replicas)
    most = len(replicas)
    for step_no in range(200):
        step = plan_rollout(replicas, target, desired, surge, unavailable)
        if step.complete:
            return replicas, step_no, fewest_ready, most
        replicas = [r for r in replicas if r.job_id not in step.stop]
        fewest_ready = min(fewest_ready, sum(r.ready for r in replicas))
        for _ in range(step.start):
            replicas.append(ReplicaView(next_id, target, False))
            age[next_id] = 0
            next_id += 1
        most = max(most, len(replicas))
        grown = []
        for r in replicas:
            if not r.ready and r.job_id in age:
                age[r.job_id] += 1
                if age[r.job_id] >= ready_after:
                    r = ReplicaView(r.job_id, r.revision, True)
            grown.append(r)
        replicas = grown
    raise AssertionError("the rollout never completed")


@settings(max_examples=300, deadline=None)
@given(
    old=st.integers(0, 8),
    desired=st.integers(0, 8),
    surge=st.integers(0, 3),
    unavailable=st.integers(0, 3),
    ready_after=st.integers(1, 3),
)
def test_a_rollout_keeps_availability_and_completes(
    old: int, desired: int, surge: int, unavailable: int, ready_after: int
) -> None:
    if surge + unavailable == 0:
        surge = 1  # the API refuses both at 0 (no move would be allowed)
    replicas = [ReplicaView(i + 1, 1, True) for i in range(old)]
    final, _, fewest_ready, most = _simulate(replicas, 2, desired, surge, unavailable, ready_after=ready_after)
    assert len(final) == desired and all(r.revision == 2 and r.ready for r in final)
    assert fewest_ready >= min(old, desired - unavailable), "a ready replica was stopped below the floor"
    assert most <= max(old, desired + surge), "more replicas than desired + max_surge at once"


def test_default_rollout_is_one_new_replica_then_one_old_stopped() -> None:
    old = [ReplicaView(1, 1, True), ReplicaView(2, 1, True)]
    step = plan_rollout(old, 2, 2)
    assert (step.start, step.stop) == (1, ())  # surge one; no ready replica may go yet
    step = plan_rollout([*old, ReplicaView(3, 2, False)], 2, 2)
    assert (step.start, step.stop) == (0, ())  # the new one is not ready: nothing moves
    step = plan_rollout([*old, ReplicaView(3, 2, True)], 2, 2)
    assert (step.start, step.stop) == (1, (1,))  # ready: the oldest goes, the next new one starts


def test_unready_old_replicas_go_at_once_and_scale_down_stops_unready_first() -> None:
    step = plan_rollout([ReplicaView(1, 1, False), ReplicaView(2, 1, True)], 2, 1)
    assert step.stop == (1,)
    step = plan_rollout([ReplicaView(1, 2, True), ReplicaView(2, 2, False), ReplicaView(3, 2, True)], 2, 1)
    assert step.stop == (2, 3)  # the unready one, then the newest of the ready ones
    assert plan_rollout([ReplicaView(1, 2, True)], 2, 1).complete
    assert plan_rollout([], 2, 0).complete


def test_autoscaler_goes_up_at_once_and_down_only_after_the_window() -> None:
    policy = ScalePolicy(min_replicas=1, max_replicas=10, target_rps=10.0, scale_down_delay_s=30.0).check()
    a = Autoscaler()
    d = a.decide(policy, 1, rps=45.0, now=0.0, last_request_at=0.0)
    assert d.desired == 5 and "scaled up from 1 to 5" in d.reason and "45.0 requests/s" in d.reason
    assert a.decide(policy, 5, rps=11.0, now=10.0, last_request_at=10.0).desired == 5  # within the window
    assert a.decide(policy, 5, rps=11.0, now=29.0, last_request_at=29.0).desired == 5
    d = a.decide(policy, 5, rps=11.0, now=41.0, last_request_at=41.0)  # the 45 rps point left the window
    assert d.desired == 2 and "scaled down from 5 to 2" in d.reason
    assert a.decide(policy, 2, rps=500.0, now=42.0, last_request_at=42.0).desired == 10  # capped at max


def test_autoscaler_scales_to_zero_only_after_the_idle_period_and_a_waiting_request_wakes_it() -> None:
    policy = ScalePolicy(min_replicas=0, max_replicas=3, target_rps=5.0, scale_down_delay_s=0.0, idle_timeout_s=60.0)
    a = Autoscaler()
    assert a.decide(policy.check(), 1, rps=0.0, now=100.0, last_request_at=50.0).desired == 1  # idle 50 s only
    d = a.decide(policy, 1, rps=0.0, now=111.0, last_request_at=50.0)
    assert d.desired == 0 and "no request for 60 s" in d.reason
    d = a.decide(policy, 0, rps=0.0, now=200.0, last_request_at=50.0, waiting=1)
    assert d.desired == 1 and "a request waits" in d.reason


def test_fixed_replicas_ignore_the_rate() -> None:
    assert Autoscaler().decide(ScalePolicy(replicas=3), 3, rps=1000.0, now=0.0, last_request_at=0.0).desired == 3


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (ScalePolicy(min_replicas=3, max_replicas=2, target_rps=1.0), "min_replicas"),
        (ScalePolicy(min_replicas=0, max_replicas=0, target_rps=1.0), "max_replicas"),
        (ScalePolicy(min_replicas=0, max_replicas=2, target_rps=0.0), "target_rps"),
        (ScalePolicy(replicas=-1), "replicas"),
    ],
)
def test_bad_scale_policies_name_the_field(policy: ScalePolicy, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        policy.check()
    assert e.value.field == field


@pytest.mark.parametrize("name", ["Echo", "1st", "a_b", "-a", "a-", "a" * 64, "", "a/b"])
def test_service_names_are_dns_labels(name: str) -> None:
    with pytest.raises(ValidationError):
        check_service_name(name)


def test_good_names_and_health_paths() -> None:
    assert check_service_name("llama-3-8b") == "llama-3-8b"
    assert check_health_path("/healthz?ready=1") == "/healthz?ready=1"
    for bad in ("healthz", "/a b", "http://x/healthz"):
        with pytest.raises(ValidationError):
            check_health_path(bad)


def test_restart_backoff_doubles_to_a_minute() -> None:
    assert [restart_delay_s(n) for n in (0, 1, 2, 3, 7, 20)] == [0.0, 1.0, 2.0, 4.0, 60.0, 60.0]
