"""The failed-login back-off policy (pure): free failures, doubling, the cap, an address's larger allowance."""

from __future__ import annotations

import pytest

from corral.core.login_backoff import BackoffPolicy, compute_lockout_s

POLICY = BackoffPolicy(free_failures=5, base_s=1.0, max_s=900.0)


@pytest.mark.parametrize(
    "failures,lockout_s",
    [
        (0, 0.0),
        (1, 0.0),
        (4, 0.0),  # within the free failures
        (5, 1.0),
        (6, 2.0),
        (7, 4.0),
        (10, 32.0),  # doubling from the 5th
        (15, 900.0),
        (1000, 900.0),  # capped (and no overflow for huge counts)
    ],
)
def test_lockout_grows_from_the_free_failures_and_is_capped(failures: int, lockout_s: float) -> None:
    assert compute_lockout_s(failures, POLICY) == lockout_s


def test_an_address_may_fail_more_often_than_one_name() -> None:
    address = POLICY.scaled(4)
    assert compute_lockout_s(19, address) == 0.0 and compute_lockout_s(20, address) == 1.0
