"""Quotas: guarantees and maxima per tenant and model, borrowing within a cohort, reclaim victims, and
clear errors for bad quota configurations."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from queue_builders import MODEL, admit, admitted, book, job, quota, running

from corral.core.errors import ValidationError
from corral.scheduler.queueing import TOTAL, QueueingPolicy, QuotaBook, TenantQuota, validate_quotas
from corral.scheduler.queueing.preemption import RECLAIM, order_reclaim_candidates, select_victims
from corral.scheduler.queueing.quota import compute_usage

NO_RANK_PREEMPTION = QueueingPolicy("quota-only", "fifo")


@dataclass
class BadBook:
    name: str
    book: QuotaBook
    field: str


BAD_BOOKS = [
    BadBook("guarantees exceed the pool", book(quota("a", 6), quota("b", 6)), "quota.*"),
    BadBook("nominal above maximum", book(quota("a", 4, 2)), "quota.a.*"),
    BadBook("model not in the pool", book(quota("a", 1, model="H100-80GB")), "quota.a.H100-80GB"),
    BadBook("cycle in the cohort hierarchy", QuotaBook({}, cohort_parent={"x": "y", "y": "x"}), "cohort"),
]


@pytest.mark.parametrize("case", BAD_BOOKS, ids=lambda c: c.name)
def test_bad_quotas_are_rejected_with_the_field(case: BadBook) -> None:
    with pytest.raises(ValidationError) as err:
        validate_quotas(case.book, {MODEL: 8000})
    assert err.value.field == case.field


def test_valid_quotas_pass() -> None:
    validate_quotas(book(quota("a", 4, 8), quota("b", 4, 8)), {MODEL: 8000})


def test_never_above_maximum() -> None:
    plan = admit(
        [job("a1", "a", 2), job("a2", "a", 3, submit=1)],
        gpus=8,
        quotas=book(quota("a", 2, 4)),
        policy=NO_RANK_PREEMPTION,
    )
    assert admitted(plan) == ["a1"] and plan.pending["a2"].reason == "quota"


def test_no_quota_for_the_model_is_a_clear_reason() -> None:
    # z holds the one T4 within its own guarantee (a tenant with no guarantee there would be reclaimed from).
    b = QuotaBook(
        {"a": TenantQuota("a", {"T4-16GB": 1000}), "z": TenantQuota("z", {"T4-16GB": 1000})}, require_quota=True
    )
    plan = admit(
        [job("x", "a"), job("y", "nobody", submit=1)],
        pool={MODEL: 8000, "T4-16GB": 1000},
        quotas=b,
        policy=NO_RANK_PREEMPTION,
        run=[running(job("t4", "z"), model="T4-16GB")],
    )
    # x may run on T4 (its quota's model) once it is free: it waits for capacity there, saying why not V100.
    assert (
        plan.pending["x"].reason == "capacity"
        and "T4-16GB" in plan.pending["x"].detail
        and MODEL in plan.pending["x"].detail
    )
    assert plan.pending["y"].reason == "quota" and "no quota" in plan.pending["y"].detail


def test_borrowing_only_from_idle_guarantees_of_the_cohort() -> None:
    # Cohort c: a and b guaranteed 2 each (4 in all). a holds 2; b holds 2: no idle guarantee to borrow.
    b = book(quota("a", 2, 8, cohort="c"), quota("b", 2, 8, cohort="c"))
    run = [running(job("a0", "a", 2)), running(job("b0", "b", 2))]
    plan = admit([job("a1", "a", 1)], gpus=8, run=run, quotas=b, policy=NO_RANK_PREEMPTION)
    assert admitted(plan) == [] and plan.pending["a1"].reason == "borrow-limit"
    plan = admit([job("a1", "a", 1)], gpus=8, run=run[:1], quotas=b, policy=NO_RANK_PREEMPTION)
    assert admitted(plan) == ["a1"]  # b is idle: a borrows b's guarantee


def test_reclaim_takes_borrowed_work_lowest_priority_most_recent_first() -> None:
    # a guaranteed 4, b guaranteed 4; b borrowed all 8. a asks for 3 of its guarantee back.
    b = book(quota("a", 4, 8), quota("b", 4, 8))
    run = [
        running(job("b-old-low", "b", 1, priority=0), start=0),
        running(job("b-new-low", "b", 1, priority=0), start=5),
        running(job("b-new-low2", "b", 1, priority=0), start=6),
        running(job("b-high", "b", 1, priority=9), start=9),
        running(job("b-rest", "b", 4, priority=5), start=1),
    ]
    plan = admit([job("a1", "a", 3, submit=10)], gpus=8, run=run, quotas=b, policy=NO_RANK_PREEMPTION, now=10)
    assert sorted(p.job_id for p in plan.preempt) == ["b-new-low", "b-new-low2", "b-old-low"]
    assert all(p.kind == RECLAIM for p in plan.preempt) and plan.pending["a1"].reason == "preempting"
    assert set(plan.nominate) == {"a1"}  # a preemption's beneficiary is nominated (the server relies on it)


def test_reclaim_never_touches_a_tenant_within_its_guarantee() -> None:
    b = book(quota("a", 4, 8), quota("b", 4, 8))
    run = [running(job("b0", "b", 4)), running(job("a0", "a", 4))]
    victims = select_victims(
        job("a1", "a", 1), MODEL, 1000, order_reclaim_candidates(run), set(), compute_usage(run), b, RECLAIM
    )
    assert victims is None


def test_borrowing_tenant_cannot_reclaim() -> None:
    b = book(quota("a", 2, 8), quota("b", 6, 8))
    run = [running(job("a0", "a", 2)), running(job("b0", "b", 6))]
    plan = admit([job("a1", "a", 1)], gpus=8, run=run, quotas=b, policy=NO_RANK_PREEMPTION)
    assert plan.preempt == () and plan.pending["a1"].reason == "capacity"


def test_total_and_per_model_keys() -> None:
    q = TenantQuota("a", {TOTAL: 2000, MODEL: 1000}, {TOTAL: 3000, MODEL: 1000})
    plan = admit([job("x", "a", 2, model="V100")], gpus=8, quotas=QuotaBook({"a": q}), policy=NO_RANK_PREEMPTION)
    assert plan.pending["x"].reason == "quota" and MODEL in plan.pending["x"].detail


def _department() -> QuotaBook:
    # Department d: teams x (tenants x1, x2) and y (tenant y1); department e: team z (tenant z1). 2 GPUs each.
    quotas = [
        quota("x1", 2, 8, cohort="x"),
        quota("x2", 2, 8, cohort="x"),
        quota("y1", 2, 8, cohort="y"),
        quota("z1", 2, 8, cohort="z"),
    ]
    return QuotaBook({q.tenant: q for q in quotas}, cohort_parent={"x": "d", "y": "d", "z": "e"})


def test_teams_borrow_within_their_department_only() -> None:
    b = _department()
    run = [running(job("x2-0", "x2", 2))]
    # x1 may take its 2 plus y1's idle 2 (same department d), but not z1's (department e): 4 at most.
    plan = admit(
        [job(f"x1-{i}", "x1", 1, submit=i) for i in range(6)], gpus=8, run=run, quotas=b, policy=NO_RANK_PREEMPTION
    )
    assert admitted(plan) == ["x1-0", "x1-1", "x1-2", "x1-3"]
    assert plan.pending["x1-4"].reason == "borrow-limit"


def test_reclaim_prefers_the_own_team_then_the_department() -> None:
    b = _department()
    # y1 borrowed from team x's idle guarantee... x1 comes back for its 2: y1's borrowed job goes, z1's never.
    run = [
        running(job("y1-a", "y1", 2), start=0),
        running(job("y1-b", "y1", 2), start=1),
        running(job("z1-a", "z1", 2), start=2),
        running(job("z1-b", "z1", 2), start=3),
    ]
    plan = admit([job("x1-0", "x1", 2, submit=5)], gpus=8, run=run, quotas=b, policy=NO_RANK_PREEMPTION, now=5)
    assert [p.job_id for p in plan.preempt] == ["y1-b"]


def test_a_job_of_any_model_runs_where_its_quota_allows() -> None:
    # a may hold 1 T4 and 8 V100s: its 2-GPU job of any model best-fits the 2 free T4s, but starts on V100s
    # (it used to wait forever on the T4 maximum while V100s were idle).
    q = TenantQuota("a", {}, {"T4-16GB": 1000, MODEL: 8000})
    plan = admit(
        [job("x", "a", 2)], pool={MODEL: 8000, "T4-16GB": 2000}, quotas=QuotaBook({"a": q}), policy=NO_RANK_PREEMPTION
    )
    assert [(a.job_id, a.model) for a in plan.admit] == [("x", MODEL)]


def test_a_job_its_maximum_holds_back_does_not_keep_the_guarantee_from_the_others() -> None:
    # a: 2 V100s guaranteed, 2 GPUs at most in all; it holds 1 A100. Its older 2-GPU job x cannot run (3 > 2),
    # so the guarantee goes to y: y starts on the free V100 before d's higher-priority borrowing job w.
    q = TenantQuota("a", {MODEL: 2000, "A100-80GB": 0}, {MODEL: 2000, "A100-80GB": 1000, TOTAL: 2000})
    run = [running(job("a0", "a"), model="A100-80GB"), running(job("b0", "b"))]
    plan = admit(
        [job("x", "a", 2, model=MODEL), job("w", "d", priority=5), job("y", "a", 1, submit=1, model=MODEL)],
        pool={MODEL: 2000, "A100-80GB": 1000},
        quotas=QuotaBook({"a": q, "d": TenantQuota("d", {TOTAL: 0})}),
        policy=NO_RANK_PREEMPTION,
        run=run,
    )
    assert admitted(plan) == ["y"] and not plan.preempt
    assert plan.pending["x"].reason == "quota"


def test_a_job_stuck_on_one_model_does_not_hold_back_the_tenants_jobs_on_another() -> None:
    # The A100 is taken; a's A100 job waits, and its V100 job of the same size still starts.
    plan = admit(
        [job("p", "a", model="A100-80GB"), job("q", "a", submit=1, model=MODEL)],
        pool={MODEL: 2000, "A100-80GB": 1000},
        policy=NO_RANK_PREEMPTION,
        run=[running(job("b0", "b"), model="A100-80GB")],
    )
    assert admitted(plan) == ["q"] and plan.pending["p"].reason == "capacity"


def test_a_job_waiting_on_preemption_counts_as_its_tenants_use() -> None:
    # a (4 guaranteed, 4 at most) holds 2; x reclaims 2 GPUs from b. y would take a to 5 once x starts: it
    # waits on a's maximum instead of reclaiming a third GPU for nothing.
    b = book(quota("a", 4, 4), quota("b", 0, 8))
    run = [running(job("a0", "a", 2))] + [running(job(f"b{i}", "b"), start=i) for i in range(6)]
    plan = admit([job("x", "a", 2), job("y", "a", 1, submit=1)], quotas=b, policy=NO_RANK_PREEMPTION, run=run)
    assert sorted((p.job_id, p.for_job_id) for p in plan.preempt) == [("b4", "x"), ("b5", "x")]
    assert plan.pending["y"].reason == "quota" and set(plan.nominate) == {"x"}


def test_what_a_victim_frees_beyond_the_need_serves_the_next_job() -> None:
    # x needs 1 GPU; the victim (b's newest job) holds 3. z then waits on the other 2 instead of preempting more.
    b = book(quota("a", 2), quota("c", 2), quota("b", 0, 8))
    run = [running(job(f"b{i}", "b"), start=i) for i in range(5)] + [running(job("big", "b", 3), start=9)]
    plan = admit([job("x", "a", 1), job("z", "c", 2, submit=1)], quotas=b, policy=NO_RANK_PREEMPTION, run=run)
    assert [(p.job_id, p.for_job_id) for p in plan.preempt] == [("big", "x")]
    assert plan.pending["z"].reason == "preempting" and set(plan.nominate) == {"x", "z"}


def test_a_tenant_without_a_guarantee_cannot_reclaim_a_borrowers_gpus() -> None:
    # a is guaranteed 1 of 2 GPUs and borrows the other. n has an entry with no guarantee (as the server gives
    # every tenant, for its fair-share weight): it waits instead of taking a's borrowed GPU back as if it were
    # owed to it; a tenant guaranteed 1 GPU (g) does reclaim it.
    run = [running(job("a1", "a"), start=0.0), running(job("a2", "a"), start=1.0)]
    for claimant, preempts in (("n", []), ("g", ["a2"])):
        quotas = book(quota("a", 1), quota("g", 1), TenantQuota("n", weight=1.0))
        plan = admit([job("x", claimant, submit=2)], gpus=2, run=run, quotas=quotas, policy=NO_RANK_PREEMPTION)
        assert [p.job_id for p in plan.preempt] == preempts, claimant
