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
        self._cum: dict[str, list[int]] = {}
        self._now = now_s
        self._unknown = {m: 0 for m in free}
        per_model: dict[str, list[tuple[float, int]]] = {}
        for r in running:
            end = r.expected_end_s
            if end is None:
                self._unknown[r.model] = self._unknown.get(r.model, 0) + r.job.need_milli
                continue
            per_model.setdefault(r.model, []).append((max(end, now_s), r.job.need_milli))
        for m, items in per_model.items():
            items.sort()
            self._ends[m] = [e for e, _ in items]
            total, cum = 0, []
            for _, milli in items:
                total += milli
                cum.append(total)
            self._cum[m] = cum

    def estimate(self, model: str, need_milli: int) -> float | None:
        """When `need_milli` more GPUs of `model` are likely free (None = only after jobs without a time
        limit end); the demand is then counted as ahead of later jobs."""
        target = self._ahead.get(model, 0) + need_milli - max(self._free.get(model, 0), 0)
        self._ahead[model] = self._ahead.get(model, 0) + need_milli
        if target <= 0:
            return self._now
        cum = self._cum.get(model, [])
        i = bisect.bisect_left(cum, target)
        if i >= len(cum):
            return None
        end = self._ends[model][i]
        return end if math.isfinite(end) else None
