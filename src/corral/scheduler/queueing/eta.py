"""Estimated start times for pending jobs from the running jobs' time limits, or their predicted ends (pure)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from corral.scheduler.queueing.jobs import RunningJob


def compute_predicted_ends(running: Sequence[RunningJob], now_s: float) -> dict[str, float]:
    """Per running job with a run-time prediction (not being preempted): when it is predicted to end, the
    median of its predicted run time given how long it has run (earlier attempts included), from now."""
    ends: dict[str, float] = {}
    for r in running:
        p = r.job.predicted
        if p is None or r.terminating:
            continue
        ran_s = r.job.attained_gpu_s / max(r.job.need_milli / 1000, 1e-3) + max(now_s - r.start_s, 0.0)
        ends[r.job.id] = now_s + max(p.quantile_s(0.5, ran_s) - ran_s, 0.0)
    return ends


class EtaEstimator:
    """Per model, the free GPUs after this cycle plus GPUs released as running jobs reach their time
    limits. Jobs are asked about in rank order; each one's demand is queued ahead of the next.
    `predicted_end_s` (job id -> predicted end, `compute_predicted_ends`): a running job listed there is
    counted as ending then (or at its time limit, if sooner); None = time limits only."""

    def __init__(
        self,
        free: Mapping[str, int],
        running: Sequence[RunningJob],
        now_s: float,
        predicted_end_s: Mapping[str, float] | None = None,
    ) -> None:
        self._free = dict(free)
        self._ahead = {m: 0 for m in free}
        self._ends: dict[str, list[float]] = {}
        self._enders: dict[str, list[tuple[str, bool]]] = {}  # per model, (job id, by time limit) in end order
        self._cum: dict[str, list[int]] = {}
        self._now = now_s
        self._unknown = {m: 0 for m in free}
        self._by_prediction: set[str] = set()  # running jobs counted at their predicted end
        per_model: dict[str, list[tuple[float, int, str, bool]]] = {}
        for r in running:
            end = r.expected_end_s
            guess = None if predicted_end_s is None or r.terminating else predicted_end_s.get(r.job.id)
            if guess is not None and (end is None or guess < end):
                end = guess
                self._by_prediction.add(r.job.id)
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
        its time limit, False when it is being preempted); None when the GPUs are free now or it is unknown, or
        when that job is counted at its predicted end (the wording has no sentence for a guess yet)."""
        target = self._ahead.get(model, 0) + need_milli - max(self._free.get(model, 0), 0)
        self._ahead[model] = self._ahead.get(model, 0) + need_milli
        if target <= 0:
            return self._now, None
        cum = self._cum.get(model, [])
        i = bisect.bisect_left(cum, target)
        if i >= len(cum):
            return None, None
        end = self._ends[model][i]
        if not math.isfinite(end):
            return None, None
        ender = self._enders[model][i]
        return end, (None if ender[0] in self._by_prediction else ender)
