"""AlertEngine: the alert state between evaluations, for the server's alert loop (thread-safe).

It holds rules, silences and alerts, runs the pure evaluate_rules() on the series it is given, hands
notifications to a dispatcher (which never blocks) and action requests to a callback.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence

from corral.alerts.defaults import DEFAULT_RULES, merge_rules
from corral.alerts.evaluator import (
    ActionRequest,
    Alert,
    AlertChange,
    AlertState,
    Evaluation,
    SeriesPoint,
    evaluate_rules,
)
from corral.alerts.rules import AlertRule
from corral.alerts.silences import Silence
from corral.core.errors import ConflictError, NotFoundError


class AlertEngine:
    """`submit` receives the changes to notify, if any (NotificationDispatcher.submit); `act` each action request
    (cordon a node, stop a job). Both are called outside the engine's lock."""

    def __init__(
        self,
        rules: Sequence[AlertRule] = DEFAULT_RULES,
        *,
        submit: Callable[[Sequence[AlertChange]], None] | None = None,
        act: Callable[[ActionRequest], None] | None = None,
        resolved_keep_s: float = 3600.0,
    ) -> None:
        self._rules = list(rules)
        self._silences: list[Silence] = []
        self._alerts: dict[str, Alert] = {}
        self._submit, self._act, self._keep_s = submit, act, resolved_keep_s
        self._lock = threading.Lock()

    # ----- rules and silences -----
    def rules(self) -> list[AlertRule]:
        with self._lock:
            return list(self._rules)

    def set_custom_rules(self, custom: Sequence[AlertRule]) -> None:
        """Defaults plus `custom` (same name replaces a default). Raises ConflictError on duplicate names."""
        names = [r.name for r in custom]
        if len(names) != len(set(names)):
            raise ConflictError(f"duplicate rule names: {sorted({n for n in names if names.count(n) > 1})}")
        with self._lock:
            self._rules = merge_rules(list(custom))

    def replace_silences(self, silences: Sequence[Silence]) -> None:
        """The silences are exactly these (as stored: with several server replicas, another may have added or
        ended one)."""
        with self._lock:
            self._silences = list(silences)

    def add_silence(self, silence: Silence) -> None:
        with self._lock:
            if any(s.id == silence.id for s in self._silences):
                raise ConflictError(f"silence {silence.id!r} exists")
            self._silences.append(silence)

    def expire_silence(self, silence_id: str, now: float) -> None:
        """End a silence now. Raises NotFoundError."""
        with self._lock:
            for i, s in enumerate(self._silences):
                if s.id == silence_id:
                    if s.ends_at > now:
                        ends = max(now, s.starts_at + 1e-6)
                        self._silences[i] = dataclasses.replace(s, ends_at=ends)
                    return
        raise NotFoundError("silence", silence_id)

    def silences(self, now: float | None = None) -> list[Silence]:
        """All silences, or only those active at `now`."""
        with self._lock:
            return [s for s in self._silences if now is None or s.active(now)]

    # ----- evaluation -----
    def evaluate(self, series: Iterable[SeriesPoint], now: float) -> Evaluation:
        """One round. Silences that ended are pruned."""
        with self._lock:
            self._silences = [s for s in self._silences if s.ends_at > now]
            result = evaluate_rules(self._rules, series, self._alerts, now, self._silences, self._keep_s)
            self._alerts = result.alerts
        to_notify = [c for c in result.changes if c.notify]
        if self._submit is not None and to_notify:
            self._submit(to_notify)
        if self._act is not None:
            for request in result.actions:
                self._act(request)
        return result

    def alerts(self, states: Iterable[AlertState] | None = None) -> list[Alert]:
        """Current alerts (firing first, then pending, then recently resolved), newest first within each."""
        wanted = set(states) if states is not None else set(AlertState)
        order = {AlertState.FIRING: 0, AlertState.PENDING: 1, AlertState.RESOLVED: 2}
        with self._lock:
            found = [a for a in self._alerts.values() if a.state in wanted]
        return sorted(found, key=lambda a: (order[a.state], -a.updated_at, a.rule, a.labels))
