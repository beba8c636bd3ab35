"""Retrying a call that is safe to repeat (an idempotent submission): on connection errors and server errors
(5xx, 429), with exponential back-off bounded by a deadline. Never on other 4xx: those will not change."""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def is_retryable(error: Exception) -> bool:
    from corral.sdk.errors import CorralAPIError, CorralConnectionError

    if isinstance(error, CorralConnectionError):
        return True
    return isinstance(error, CorralAPIError) and error.status in RETRY_STATUSES


def call_with_retries(
    call: Callable[[], T],
    retry_for_s: float,
    *,
    first_delay_s: float = 0.25,
    max_delay_s: float = 4.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()`, again after each retryable error until `retry_for_s` has passed; then its last error is raised."""
    deadline = clock() + retry_for_s
    delay = first_delay_s
    while True:
        try:
            return call()
        except Exception as e:
            if not is_retryable(e) or clock() + delay > deadline:
                raise
        sleep(delay)
        delay = min(delay * 2, max_delay_s)
