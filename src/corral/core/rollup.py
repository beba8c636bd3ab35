"""Time-series downsampling (pure): raw points -> fixed-width rollups (min/max/avg/last), and the
retention cut-offs that decide what the store may delete."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from corral.core.errors import ValidationError

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class RawPoint:
    ts: float  # Unix seconds
    value: float


@dataclass(frozen=True, slots=True)
class Rollup:
    """Points with start <= ts < start + width. `last` is the value with the latest ts."""

    start: float
    count: int
    min: float
    max: float
    sum: float
    last: float
    last_ts: float

    @property
    def avg(self) -> float:
        return self.sum / self.count


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Defaults: raw points 24 h, 1-minute rollups 30 days. Raises ValidationError when inconsistent."""

    raw_s: float = 86400.0
    rollup_s: float = 30 * 86400.0
    bucket_s: float = 60.0

    def __post_init__(self) -> None:
        if self.bucket_s <= 0 or 86400 % self.bucket_s:
            raise ValidationError("bucket_s", "must be positive and divide a day evenly")
        if self.raw_s < self.bucket_s:
            raise ValidationError("raw_s", "raw points must be kept at least one bucket, to roll them up")
        if self.rollup_s < self.raw_s:
            raise ValidationError("rollup_s", "rollups must be kept at least as long as raw points")


@dataclass(frozen=True, slots=True)
class RetentionCutoffs:
    """Delete raw points with ts < raw_before and rollups with start < rollup_before."""

    raw_before: float
    rollup_before: float


def compute_bucket_start(ts: float, bucket_s: float = 60.0) -> float:
    return math.floor(ts / bucket_s) * bucket_s


def compute_rollups(points: Iterable[RawPoint], bucket_s: float = 60.0) -> list[Rollup]:
    """One rollup per bucket that has points, in time order. Non-finite values are skipped."""
    acc: dict[float, Rollup] = {}
    for p in points:
        if not math.isfinite(p.value):
            continue
        start = compute_bucket_start(p.ts, bucket_s)
        one = Rollup(start, 1, p.value, p.value, p.value, p.value, p.ts)
        acc[start] = merge_rollup(acc[start], one) if start in acc else one
    return [acc[k] for k in sorted(acc)]


def merge_rollup(a: Rollup, b: Rollup) -> Rollup:
    """Two rollups of the same bucket as one (late points, or a bucket rolled up in two passes)."""
    if a.start != b.start:
        raise ValueError("rollups of different buckets")
    later = b if b.last_ts >= a.last_ts else a
    return Rollup(
        a.start, a.count + b.count, min(a.min, b.min), max(a.max, b.max), a.sum + b.sum, later.last, later.last_ts
    )


def compute_coarser_rollups(rollups: Sequence[Rollup], bucket_s: float) -> list[Rollup]:
    """Re-bucket finer rollups into `bucket_s` buckets (e.g. 1 min -> 1 h for long-range charts)."""
    acc: dict[float, Rollup] = {}
    for r in rollups:
        start = compute_bucket_start(r.start, bucket_s)
        moved = Rollup(start, r.count, r.min, r.max, r.sum, r.last, r.last_ts)
        acc[start] = merge_rollup(acc[start], moved) if start in acc else moved
    return [acc[k] for k in sorted(acc)]


def compute_closed_before(now: float, bucket_s: float = 60.0, grace_s: float = 15.0) -> float:
    """Buckets starting before this are complete: every point in them arrived, allowing `grace_s` for
    agents' late uploads. Roll them up; the current bucket waits."""
    return compute_bucket_start(now - grace_s, bucket_s)


def compute_keyed_rollups(
    points: Iterable[tuple[K, RawPoint]], closed_before: float, bucket_s: float = 60.0
) -> dict[K, list[Rollup]]:
    """Rollups per series key over closed buckets only (points in open buckets are left for later)."""
    by_key: dict[K, list[RawPoint]] = {}
    for key, p in points:
        if p.ts < closed_before:
            by_key.setdefault(key, []).append(p)
    return {k: compute_rollups(ps, bucket_s) for k, ps in by_key.items()}


def compute_retention_cutoffs(now: float, policy: RetentionPolicy = RetentionPolicy()) -> RetentionCutoffs:
    """Cut-offs aligned to bucket starts, so a bucket is never half deleted."""
    return RetentionCutoffs(
        raw_before=compute_bucket_start(now - policy.raw_s, policy.bucket_s),
        rollup_before=compute_bucket_start(now - policy.rollup_s, policy.bucket_s),
    )


def select_resolution(
    start: float, now: float, policy: RetentionPolicy = RetentionPolicy()
) -> Literal["raw", "rollup"]:
    """Which table answers a query from `start` to now: raw while it still holds `start`, else rollups."""
    return "raw" if start >= compute_retention_cutoffs(now, policy).raw_before else "rollup"
