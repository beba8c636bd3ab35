"""The SDK's retries of an idempotent call: which errors are retried, and that the back-off is bounded."""

from __future__ import annotations

import pytest

from corral.sdk.client import CorralAPIError, CorralConnectionError
from corral.sdk.retry import call_with_retries


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def api_error(status: int) -> CorralAPIError:
    return CorralAPIError(status, "x", "x", None, {})


def failing(errors: list[Exception], result: str = "job") -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return calls, call


@pytest.mark.parametrize(
    "error",
    [CorralConnectionError("down"), api_error(503), api_error(500), api_error(502), api_error(429)],
    ids=["connection", "503", "500", "502", "429"],
)
def test_retryable_errors_are_retried_until_it_works(error: Exception) -> None:
    clock = FakeClock()
    calls, call = failing([error, error])
    assert call_with_retries(call, 30, sleep=clock.sleep, clock=lambda: clock.now) == "job"  # type: ignore[arg-type]
    assert len(calls) == 3 and clock.sleeps == [0.25, 0.5]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_client_errors_are_not_retried(status: int) -> None:
    clock = FakeClock()
    calls, call = failing([api_error(status)])
    with pytest.raises(CorralAPIError):
        call_with_retries(call, 30, sleep=clock.sleep, clock=lambda: clock.now)  # type: ignore[arg-type]
    assert len(calls) == 1


def test_the_back_off_is_capped_and_gives_up_at_the_deadline() -> None:
    clock = FakeClock()
    calls, call = failing([CorralConnectionError("down")] * 100)
    with pytest.raises(CorralConnectionError):
        call_with_retries(call, 20, sleep=clock.sleep, clock=lambda: clock.now)  # type: ignore[arg-type]
    assert max(clock.sleeps) == 4.0 and clock.now <= 20
    assert clock.sleeps[:5] == [0.25, 0.5, 1.0, 2.0, 4.0]


def test_no_retry_with_a_zero_window() -> None:
    calls, call = failing([CorralConnectionError("down")])
    with pytest.raises(CorralConnectionError):
        call_with_retries(call, 0, sleep=lambda s: None)  # type: ignore[arg-type]
    assert len(calls) == 1
