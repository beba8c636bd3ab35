"""Failed-login back-off (pure): how long a user name or a client address is locked after N failures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """After `free_failures` consecutive failures the key is locked for `base_s`, doubled with each further
    failure, at most `max_s`. A counter that saw no failure for `forget_after_s` starts again from zero."""

    free_failures: int = 5
    base_s: float = 1.0
    max_s: float = 900.0
    forget_after_s: float = 3600.0

    def scaled(self, factor: int) -> BackoffPolicy:
        """The same policy allowing `factor` times the free failures (a client address, shared behind a NAT)."""
        return BackoffPolicy(self.free_failures * factor, self.base_s, self.max_s, self.forget_after_s)


def compute_lockout_s(failures: int, policy: BackoffPolicy) -> float:
    """Seconds locked after the `failures`-th consecutive failure (0 before the `free_failures`-th)."""
    over = failures - policy.free_failures
    if over < 0:
        return 0.0
    return min(policy.max_s, policy.base_s * 2.0 ** min(over, 40))
