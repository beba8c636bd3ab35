"""Rollups at their edges: bucket widths other than a minute, bucket boundaries, retention policy limits."""

from __future__ import annotations

import math

import pytest

from corral.core.errors import ValidationError
from corral.core.rollup import (
    RawPoint,
    RetentionPolicy,
    Rollup,
    compute_bucket_start,
    compute_closed_before,
    compute_keyed_rollups,
    compute_retention_cutoffs,
    compute_rollups,
    merge_rollup,
    select_resolution,
)

DAY = 86400.0


def test_buckets_are_a_minute_by_default() -> None:
    assert compute_bucket_start(125.0) == 120.0
    assert compute_bucket_start(119.999) == 60.0
    assert compute_bucket_start(-0.5) == -60.0
    assert compute_bucket_start(125.0, 3600) == 0.0


def test_rollups_use_the_bucket_width_asked_for() -> None:
    rollups = compute_rollups([RawPoint(10, 1), RawPoint(290, 3), RawPoint(300, 5)], bucket_s=300)
    assert [(r.start, r.count, r.min, r.max, r.sum) for r in rollups] == [(0.0, 2, 1, 3, 4), (300.0, 1, 5, 5, 5)]


def test_a_non_finite_value_skips_only_that_point() -> None:
    points = [RawPoint(5, math.nan), RawPoint(10, math.inf), RawPoint(20, 2), RawPoint(70, -math.inf), RawPoint(80, 4)]
    assert [(r.start, r.count, r.last) for r in compute_rollups(points)] == [(0.0, 1, 2), (60.0, 1, 4)]


def test_at_equal_timestamps_the_later_point_is_last() -> None:
    [r] = compute_rollups([RawPoint(70, 1), RawPoint(70, 2)])
    assert (r.last, r.last_ts, r.count) == (2, 70, 2)


def test_merging_keeps_the_value_with_the_latest_timestamp_either_way() -> None:
    early = Rollup(60, 1, 1, 1, 1, 1, 61)
    late = Rollup(60, 1, 9, 9, 9, 9, 119)
    for merged in (merge_rollup(early, late), merge_rollup(late, early)):
        assert (merged.count, merged.min, merged.max, merged.sum, merged.last, merged.last_ts) == (2, 1, 9, 10, 9, 119)


def test_merging_different_buckets_says_so() -> None:
    with pytest.raises(ValueError) as e:
        merge_rollup(Rollup(0, 1, 1, 1, 1, 1, 1), Rollup(60, 1, 1, 1, 1, 1, 61))
    assert str(e.value) == "rollups of different buckets"


def test_closed_buckets_allow_fifteen_seconds_of_grace_by_default() -> None:
    assert compute_closed_before(now=75.0) == 60.0  # the 0..60 bucket closes 15 s after it ends
    assert compute_closed_before(now=74.9) == 0.0
    assert compute_closed_before(now=3615.0, bucket_s=3600) == 3600.0
    assert compute_closed_before(now=3614.0, bucket_s=3600) == 0.0


def test_a_point_at_the_closing_time_waits_for_its_bucket() -> None:
    points = [("a", RawPoint(59.5, 1)), ("a", RawPoint(60.0, 2))]
    keyed = compute_keyed_rollups(points, closed_before=60.0)
    assert {k: [(r.start, r.count, r.last) for r in v] for k, v in keyed.items()} == {"a": [(0.0, 1, 1)]}


def test_keyed_rollups_use_the_bucket_width_asked_for() -> None:
    points = [("gpu0", RawPoint(100, 1)), ("gpu0", RawPoint(3000, 3)), ("gpu1", RawPoint(3599, 7))]
    keyed = compute_keyed_rollups(points, closed_before=3600.0, bucket_s=3600)
    assert {k: [(r.start, r.count) for r in v] for k, v in keyed.items()} == {"gpu0": [(0.0, 2)], "gpu1": [(0.0, 1)]}


def test_cutoffs_align_to_the_policys_buckets() -> None:
    policy = RetentionPolicy(raw_s=2 * DAY, rollup_s=10 * DAY, bucket_s=3600)
    now = 20 * DAY + 5400.0  # 01:30 on day 20
    cut = compute_retention_cutoffs(now, policy)
    assert (cut.raw_before, cut.rollup_before) == (18 * DAY + 3600, 10 * DAY + 3600)


def test_resolution_follows_the_policy_and_includes_the_cutoff() -> None:
    policy = RetentionPolicy(raw_s=3600, rollup_s=DAY, bucket_s=60)
    now = 10 * DAY
    assert select_resolution(now - 3600, now, policy) == "raw"  # exactly the raw cut-off: still in raw
    assert select_resolution(now - 3660, now, policy) == "rollup"
    assert select_resolution(now - 7200, now) == "raw"  # the default keeps a day of raw points


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"bucket_s": 1, "raw_s": 1, "rollup_s": 1}, id="one-second-buckets-kept-one-bucket"),
        pytest.param({"bucket_s": 0.5, "raw_s": 60}, id="half-second-buckets"),
        pytest.param({"bucket_s": DAY, "raw_s": DAY, "rollup_s": DAY}, id="daily-everything-equal"),
        pytest.param({"raw_s": 60}, id="raw-kept-exactly-one-bucket"),
        pytest.param({"raw_s": 3600, "rollup_s": 3600}, id="rollups-kept-as-long-as-raw"),
    ],
)
def test_limit_policies_are_allowed(kwargs: dict[str, float]) -> None:
    RetentionPolicy(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field", "problem"),
    [
        ({"bucket_s": -60}, "bucket_s", "must be positive and divide a day evenly"),
        ({"bucket_s": 7}, "bucket_s", "must be positive and divide a day evenly"),
        ({"raw_s": 59}, "raw_s", "raw points must be kept at least one bucket, to roll them up"),
        ({"raw_s": DAY, "rollup_s": DAY - 1}, "rollup_s", "rollups must be kept at least as long as raw points"),
    ],
)
def test_bad_policies_say_what_is_wrong(kwargs: dict[str, float], field: str, problem: str) -> None:
    with pytest.raises(ValidationError) as e:
        RetentionPolicy(**kwargs)
    assert (e.value.field, e.value.problem) == (field, problem)
