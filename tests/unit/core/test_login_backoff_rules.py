"""Failed-login back-off: a scaled policy changes only the free failures."""

from __future__ import annotations

from corral.core.login_backoff import BackoffPolicy, compute_lockout_s


def test_scaling_multiplies_only_the_free_failures() -> None:
    policy = BackoffPolicy(free_failures=3, base_s=2.0, max_s=60.0, forget_after_s=120.0)
    assert policy.scaled(4) == BackoffPolicy(free_failures=12, base_s=2.0, max_s=60.0, forget_after_s=120.0)


def test_a_scaled_policy_locks_later_but_as_long() -> None:
    per_address = BackoffPolicy(free_failures=2, base_s=1.0, max_s=8.0).scaled(3)
    assert [compute_lockout_s(n, per_address) for n in (5, 6, 7, 9, 10)] == [0.0, 1.0, 2.0, 8.0, 8.0]
