"""Quota rules (quota.py): fair-share weights, the cohort hierarchy, borrowing and the guarantee walk."""

from __future__ import annotations

import pytest
from queue_builders import MODEL, job

from corral.core.errors import ValidationError
from corral.scheduler.queueing import TOTAL, QuotaBook, TenantQuota, validate_quotas
from corral.scheduler.queueing.quota import check_quota, compute_cohort_shortfall, is_borrowing, select_within_guarantee


def test_fair_weight_is_the_weight_else_the_total_guarantee_else_one() -> None:
    assert TenantQuota("a", {TOTAL: 4000}, weight=2.5).fair_weight() == 2.5
    assert TenantQuota("a", {TOTAL: 4000, MODEL: 1000}).fair_weight() == 4000.0  # the total, not the sum
    assert TenantQuota("a", {MODEL: 1000, "T4-16GB": 2000}).fair_weight() == 3000.0  # per model: their sum
    assert TenantQuota("a").fair_weight() == 1.0  # no guarantee at all
    assert TenantQuota("a", {TOTAL: 0}).fair_weight() == 1.0  # a zero guarantee weighs like none
    assert TenantQuota("a", {TOTAL: 0}, weight=0.0).fair_weight() == 0.0  # an explicit weight is kept


def test_cohort_root_is_the_top_of_the_hierarchy() -> None:
    b = QuotaBook({}, cohort_parent={"team": "dept", "dept": "org"})
    assert b.cohort_root("team") == "org"
    assert b.cohort_root("dept") == "org"
    assert b.cohort_root("org") == "org"
    assert b.cohort_root("alone") == "alone"


def test_cohort_root_stops_in_a_cycle_below_the_start() -> None:
    # validate_quotas rejects cycles; a book that has one anyway must not hang the cycle.
    b = QuotaBook({}, cohort_parent={"team": "a", "a": "b", "b": "a"})
    assert b.cohort_root("team") == "b"


def test_members_under_a_cohort_include_the_teams_below_it() -> None:
    b = QuotaBook(
        {
            "x": TenantQuota("x", cohort="team1"),
            "y": TenantQuota("y", cohort="team2"),
            "z": TenantQuota("z", cohort="other"),
            "solo": TenantQuota("solo"),
        },
        cohort_parent={"team1": "dept", "team2": "dept"},
    )
    assert [q.tenant for q in b.members_under("dept")] == ["x", "y"]
    assert [q.tenant for q in b.members_under("team1")] == ["x"]
    assert [q.tenant for q in b.cohort_members("other")] == ["z"]


def test_a_team_borrows_its_sibling_teams_idle_guarantee_but_not_another_departments() -> None:
    b = QuotaBook(
        {
            "x": TenantQuota("x", {TOTAL: 2000}, cohort="team1"),
            "y": TenantQuota("y", {TOTAL: 2000}, cohort="team2"),
            "z": TenantQuota("z", {TOTAL: 4000}, cohort="other"),
        },
        cohort_parent={"team1": "dept", "team2": "dept"},
    )
    usage = {"x": {MODEL: 2000, TOTAL: 2000}}
    assert compute_cohort_shortfall(b, usage, job("x2", "x", 2), MODEL) == 0  # y's 2 are idle
    assert compute_cohort_shortfall(b, usage, job("x3", "x", 3), MODEL) == 1000  # z's are not dept's
    assert check_quota(b, usage, job("x3", "x", 3), MODEL) == (
        "borrow-limit",
        "cohort 'team1' lacks 1 idle guaranteed GPUs",
    )


def test_borrowing_is_use_above_the_guarantee_per_model_or_in_total() -> None:
    q = TenantQuota("a", {MODEL: 2000})
    assert not is_borrowing({"a": {MODEL: 1000, TOTAL: 1000}}, q, MODEL, 1000)
    assert is_borrowing({"a": {MODEL: 1000, TOTAL: 1000}}, q, MODEL, 1001)
    assert not is_borrowing({"a": {"T4-16GB": 9000, TOTAL: 9000}}, q, MODEL)  # no total guarantee
    # No guarantee for the model nor in total (no quota, or guarantees for other models only): all it runs is
    # borrowed, so it cannot reclaim another tenant's GPUs, and its own jobs can be reclaimed.
    assert is_borrowing({}, None, MODEL, 1000)
    assert is_borrowing({"b": {MODEL: 1000, TOTAL: 1000}}, TenantQuota("b", {"T4-16GB": 8000}), MODEL)
    assert is_borrowing({"c": {MODEL: 1000, TOTAL: 1000}}, TenantQuota("c", weight=4.0), MODEL)


def test_quota_reasons_name_the_tenant_the_model_and_the_amounts() -> None:
    required = QuotaBook({"a": TenantQuota("a", {"T4-16GB": 1000})}, require_quota=True)
    assert check_quota(required, {}, job("x", "nobody"), MODEL) == ("quota", "tenant 'nobody' has no quota")
    assert check_quota(required, {}, job("x", "a"), MODEL) == ("quota", f"tenant 'a' has no quota for model '{MODEL}'")
    assert check_quota(required, {}, job("x", "a"), "T4-16GB") is None
    assert check_quota(QuotaBook(), {}, job("x", "nobody"), MODEL) is None  # quotas not required: no limit
    capped = QuotaBook({"a": TenantQuota("a", {}, {TOTAL: 4000, MODEL: 2000})})
    usage = {"a": {MODEL: 1000, TOTAL: 3000}}
    assert check_quota(capped, usage, job("x", "a", 1), MODEL) is None  # exactly at both maximums
    assert check_quota(capped, usage, job("x", "a", 2), MODEL) == ("quota", f"{MODEL}: 3 GPUs > maximum 2")
    assert check_quota(capped, {"a": {TOTAL: 3500}}, job("x", "a", 1), "T4-16GB") == (
        "quota",
        "*: 4.5 GPUs > maximum 4",
    )


def test_validate_quotas_says_what_is_wrong() -> None:
    pool = {MODEL: 8000}
    cases = [
        (
            QuotaBook({"a": TenantQuota("a", {TOTAL: 4000}, {TOTAL: 2000})}),
            "quota.a.*",
            "nominal 4 must be in 0..maximum",
        ),
        (QuotaBook({"a": TenantQuota("a", {TOTAL: -1000})}), "quota.a.*", "nominal -1 must be in 0..maximum"),
        (QuotaBook({"a": TenantQuota("a", {"H100": 1000})}), "quota.a.H100", "no GPU model 'H100' in the pool"),
        (
            QuotaBook({"a": TenantQuota("a", {MODEL: 5000}), "b": TenantQuota("b", {MODEL: 4500})}),
            f"quota.{MODEL}",
            "guarantees add up to 9.5 GPUs; the pool has 8",
        ),
        (
            QuotaBook({}, cohort_parent={"x": "y", "y": "z", "z": "x"}),
            "cohort",
            "cycle in the cohort hierarchy: x -> y -> z -> x",
        ),
    ]
    for book, field, problem in cases:
        with pytest.raises(ValidationError) as err:
            validate_quotas(book, pool)
        assert (err.value.field, err.value.problem) == (field, problem)
    # At the limits: guarantees equal to the pool, nominal equal to maximum, a chain without a cycle.
    validate_quotas(QuotaBook({"a": TenantQuota("a", {MODEL: 8000}, {MODEL: 8000})}), pool)
    validate_quotas(QuotaBook({"a": TenantQuota("a", {TOTAL: 0})}, cohort_parent={"x": "y", "y": "z"}), pool)


def test_the_guarantee_walk_stops_at_the_maximum_and_skips_later_jobs_that_do_not_fit() -> None:
    b = QuotaBook({"a": TenantQuota("a", {TOTAL: 4000}, {TOTAL: 3000}), "n": TenantQuota("n", {MODEL: 2000})})
    jobs = [job("a1", "a", 2), job("a2", "a", 2), job("a3", "a", 1), job("n1", "n", 1), job("n2", "n", 1, model=MODEL)]
    # a: 2 fits, 2 more would pass its maximum (3), 1 fits; n's job of any model has no total guarantee.
    assert select_within_guarantee(jobs, {}, b) == {"a1", "a3", "n2"}
    assert select_within_guarantee(jobs, {"a": {TOTAL: 2000}}, b) == {"a3", "n2"}
    assert select_within_guarantee(jobs, {}, QuotaBook()) == set()
