"""The alert loop: every `alert_interval_s` one round of the alert service (series built, rules evaluated, history
kept, notifications and actions), and once a minute the telemetry rollups and retention."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from corral.server.background.loop import Loop

RETENTION_EVERY_S = 60.0


class AlertRounds(Protocol):
    """What the loop runs (corral.server.services.alerting.AlertService)."""

    def evaluate(self, now: float) -> Any:
        """One round of the rules at `now` (Unix seconds)."""
        ...

    def apply_retention(self, now: float) -> None:
        """Roll closed buckets up and prune what is past retention."""
        ...


class AlertLoop(Loop):
    """The first round comes one interval after start (the agents have reported by then)."""

    def __init__(self, service: AlertRounds, interval_s: float, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__("alerts", interval_s, delay_first=True, log=logging.getLogger("corral.alerts"))
        self.service = service
        self.clock = clock
        self._last_retention = 0.0

    def run_pass(self) -> None:
        now = self.clock()
        self.service.evaluate(now)
        if now - self._last_retention >= RETENTION_EVERY_S:
            self.service.apply_retention(now)
            self._last_retention = now
