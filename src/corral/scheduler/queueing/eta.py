"""Estimated start times for pending jobs from the running jobs' time limits (pure)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from corral.scheduler.queueing.jobs import RunningJob


class EtaEstimator:
    """Per model, the free GPUs after this cycle plus GPUs released as running jobs reach their time
    limits. Jobs are asked about in rank order; each one's demand is queued ahead of the next."""

    def __init__(self, free: Mapping[str, int], running: Sequence[RunningJob], now_s: float) -> None:
        self._free = dict(free)
        self._ahead = {m: 0 for m in free}
        self._ends: dict[str, list[float]] = {}
        self._enders: dict[str, list[tuple[str, bool]]] = {}  # per model, (job id, by time limit) in end order
        self._cum: dict[str, list[int]] = {}
        self._now = now_s
        self._unknown = {m: 0 for m in free}
        per_model: dict[str, list[tuple[float, int, str, bool]]] = {}
        for r in running:
            end = r.expected_end_s
            if end is None:
                self._unknown[r.model] = self._unknown.get(r.model, 0) + r.job.need_milli
                continue
            per_model.setdefault(r.model, []).append((max(end, now_s), r.job.need_milli, r.job.id, not r.terminating))
        for m, items in per_model.items():
            items.sort()
            self._ends[m] = [e for e, _, _, _ in items]
            self._enders[m] = [(job_id, by_limit) for _, _, job_id, by_limit in items]
            total, cum = 0, []
            for _, milli, _, _ in items:
                total += milli
                cum.append(total)
            self._cum[m] = cum

    def estimate(self, model: str, need_milli: int) -> float | None:
        """When `need_milli` more GPUs of `model` are likely free (None = only after jobs without a time
        limit end); the demand is then counted as ahead of later jobs."""
        return self.estimate_why(model, need_milli)[0]

    def estimate_why(self, model: str, need_milli: int) -> tuple[float | None, tuple[str, bool] | None]:
        """estimate(), with the running job whose end makes the room: (its id, True when it ends by reaching
        its time limit, False when it is being preempted); None when the GPUs are free now or it is unknown."""
        target = self._ahead.get(model, 0) + need_milli - max(self._free.get(model, 0), 0)
        self._ahead[model] = self._ahead.get(model, 0) + need_milli
        if target <= 0:
            return self._now, None
        cum = self._cum.get(model, [])
        i = bisect.bisect_left(cum, target)
        if i >= len(cum):
            return None, None
        end = self._ends[model][i]
        return (end, self._enders[model][i]) if math.isfinite(end) else (None, None)
