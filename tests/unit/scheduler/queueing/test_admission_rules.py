"""Admission rules (admission.py) a user relies on: which job starts, which running job is preempted for which
waiting job and why, and the pending reason and detail a waiting job shows."""

from __future__ import annotations

from queue_builders import MODEL, admit, admitted, job, running
from test_node_room import A100, NOW, book, nodes_with, plan, small, wide

from corral.core.requests import ResourceRequest
from corral.scheduler.plan import Plan, Snapshot, compute_plan
from corral.scheduler.queueing import (
    TOTAL,
    CountLedger,
    QueueConfig,
    QueuedJob,
    QueueingPolicy,
    QueueState,
    QuotaBook,
    RunningJob,
    TenantQuota,
    compute_admission,
    get_queueing_policy,
)
from corral.scheduler.queueing.admission import running_attained, with_attained

NO_RANK_PREEMPTION = QueueingPolicy("quota-only", "fifo")
T4 = "T4-16GB"


def preempted(plan: object) -> list[tuple[str, str, str]]:
    return [(p.job_id, p.for_job_id, p.kind) for p in plan.preempt]  # type: ignore[attr-defined]


# --- attained service ---------------------------------------------------------------------------------------


def test_a_running_job_attains_gpu_seconds_for_every_gpu_it_holds() -> None:
    r = running(job("r", "t", 2, attained_gpu_s=10.0), start=100.0)
    assert running_attained(r, 200.0) == 210.0  # 10 before + 2 GPUs x 100 s
    assert running_attained(r, 50.0) == 10.0  # never negative before its start
    share = running(job("s", "t", gpu_milli=250), start=0.0)
    assert running_attained(share, 40.0) == 10.0


def test_a_requeued_job_keeps_its_service_and_loses_its_nomination() -> None:
    j = job("r", "t", 2, attained_gpu_s=10.0, nominated_s=5.0)
    back = with_attained(j, running(j, start=100.0), 150.0)
    assert back.attained_gpu_s == 110.0
    assert back.nominated_s is None
    assert back.submit_s == j.submit_s  # it keeps its place in line
    assert with_attained(j, None, 150.0) is j  # not running: unchanged


# --- the fast path (no explanations) -------------------------------------------------------------------------


def test_the_fast_path_admits_everything_that_fits_until_the_pool_is_full() -> None:
    pool = {MODEL: 1000}
    pending = [job("big", "t", gpu_milli=999, submit=1), job("tiny", "t", gpu_milli=1, submit=2)]
    pending += [job("late", "t", gpu_milli=1, submit=3)]
    sjf = get_queueing_policy("sjf")
    state = QueueState(pending, [], {}, QuotaBook(), {}, pool)
    plan = compute_admission(state, CountLedger(pool, []), sjf, 0.0, explain=False)
    assert admitted(plan) == ["big", "tiny"] and plan.pending == {}
    explained = compute_admission(state, CountLedger(pool, []), sjf, 0.0)
    assert admitted(explained) == ["big", "tiny"] and explained.pending["late"].reason == "capacity"


# --- quotas within the cycle ---------------------------------------------------------------------------------


def test_a_job_admitted_this_cycle_counts_against_its_per_model_guarantee() -> None:
    # a is guaranteed 2 V100s. a1 (1 GPU) starts on the last free GPU; a2 (2 GPUs) would take a to 3, above its
    # guarantee: it is borrowing, so it may not reclaim b's borrowed GPUs.
    quotas = QuotaBook({"a": TenantQuota("a", {MODEL: 2000}), "b": TenantQuota("b", {MODEL: 1000})})
    run = [running(job("b0", "b", 2))]
    plan = admit(
        [job("a1", "a", 1, submit=1), job("a2", "a", 2, submit=2)], gpus=3, run=run, quotas=quotas,
        policy=NO_RANK_PREEMPTION,
    )  # fmt: skip
    assert admitted(plan) == ["a1"]
    assert plan.preempt == () and plan.pending["a2"].reason == "capacity"


def test_per_model_borrowing_does_not_reclaim() -> None:
    # a already holds its 1 guaranteed V100: another GPU would be borrowed, so b's borrowed work stays.
    quotas = QuotaBook({"a": TenantQuota("a", {MODEL: 1000}), "b": TenantQuota("b", {MODEL: 1000})})
    run = [running(job("a0", "a")), running(job("b0", "b", 3))]
    plan = admit([job("a1", "a", submit=1)], gpus=4, run=run, quotas=quotas, policy=NO_RANK_PREEMPTION)
    assert plan.preempt == () and plan.pending["a1"].reason == "capacity"
    # Within its guarantee (a holds nothing), the same job reclaims one of b's.
    plan = admit([job("a1", "a", submit=1)], gpus=4, run=run[1:] + [running(job("z", "b"))], quotas=quotas,
                 policy=NO_RANK_PREEMPTION)  # fmt: skip
    assert [(f, k) for _, f, k in preempted(plan)] == [("a1", "reclaim")]


def test_a_job_waiting_on_a_reclaim_counts_against_its_maximum_per_model() -> None:
    # a (guarantee = maximum = 1 V100) reclaims one of b's GPUs for a1; a2 would take a above its maximum.
    quotas = QuotaBook({"a": TenantQuota("a", {MODEL: 1000}, {MODEL: 1000}), "b": TenantQuota("b", {MODEL: 0})})
    run = [running(job(f"b{i}", "b"), start=float(i)) for i in range(4)]
    plan = admit(
        [job("a1", "a", submit=1), job("a2", "a", submit=2)], gpus=4, run=run, quotas=quotas,
        policy=NO_RANK_PREEMPTION, now=10.0,
    )  # fmt: skip
    assert preempted(plan) == [("b3", "a1", "reclaim")]
    assert plan.pending["a1"].reason == "preempting" and plan.pending["a1"].detail == "preempting 1 job(s) (reclaim)"
    assert plan.pending["a2"].reason == "quota"
    assert plan.pending["a2"].detail == f"{MODEL}: 2 GPUs > maximum 1"
    assert plan.nominate == ("a1",)


def test_a_job_waiting_on_a_reclaim_uses_up_the_guarantee_for_later_jobs() -> None:
    # a is guaranteed 1 GPU (no maximum): a1 reclaims it; a2 would be borrowed work, so it reclaims nothing.
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 1000}), "b": TenantQuota("b", {TOTAL: 0})})
    run = [running(job(f"b{i}", "b"), start=float(i)) for i in range(4)]
    plan = admit(
        [job("a1", "a", submit=1), job("a2", "a", submit=2)], gpus=4, run=run, quotas=quotas,
        policy=NO_RANK_PREEMPTION, now=10.0,
    )  # fmt: skip
    assert preempted(plan) == [("b3", "a1", "reclaim")]
    assert plan.pending["a2"].reason == "capacity" and plan.nominate == ("a1",)


def test_a_maximum_that_blocks_never_preempts_for_the_job() -> None:
    # a is at its maximum (1 GPU); b borrows the other 3 and has run long (it ranks below a's new job under
    # least attained service). a's job waits for its quota, it does not preempt b.
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 1000}, {TOTAL: 1000}), "b": TenantQuota("b", {TOTAL: 1000})})
    run = [running(job("a0", "a")), *(running(job(f"b{i}", "b")) for i in range(3))]
    plan = admit([job("a1", "a", submit=9000)], gpus=4, run=run, quotas=quotas, policy="las", now=10_000.0)
    assert plan.preempt == ()
    assert plan.pending["a1"].reason == "quota" and plan.pending["a1"].detail == "*: 2 GPUs > maximum 1"
    # Without the maximum, the same job rank-preempts one of b's borrowed jobs.
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 1000}), "b": TenantQuota("b", {TOTAL: 1000})})
    plan = admit([job("a1", "a", submit=9000)], gpus=4, run=run, quotas=quotas, policy="las", now=10_000.0)
    assert [(f, k) for _, f, k in preempted(plan)] == [("a1", "rank")]


def test_a_strict_queue_is_blocked_by_a_head_its_maximum_holds_back() -> None:
    # x fits nowhere (2 free of 4) and its tenant's maximum (3) says no anyway: it waits on its quota, and as
    # the head of a strict queue it blocks the job behind it.
    quotas = QuotaBook({"a": TenantQuota("a", {}, {TOTAL: 3000})})
    queues = {"q": QueueConfig("q", strict=True)}
    plan = admit(
        [job("x", "a", 4, submit=1, queue="q"), job("y", "b", 1, submit=2, queue="q")], gpus=4,
        run=[running(job("z", "z", 2))], quotas=quotas, queues=queues, policy="sjf",
    )  # fmt: skip
    assert admitted(plan) == []
    assert plan.pending["x"].reason == "quota" and plan.pending["x"].detail == "*: 4 GPUs > maximum 3"
    assert plan.pending["y"].reason == "behind-head"
    # Best effort (not strict): y goes.
    plan = admit(
        [job("x", "a", 4, submit=1, queue="q"), job("y", "b", 1, submit=2, queue="q")], gpus=4,
        run=[running(job("z", "z", 2))], quotas=quotas, policy="sjf",
    )  # fmt: skip
    assert admitted(plan) == ["y"]


# --- any model -----------------------------------------------------------------------------------------------


def test_a_job_of_any_model_held_back_on_one_model_waits_for_the_model_its_quota_allows() -> None:
    # 2 GPUs fit on V100 only, where a's maximum is 1; T4 (no maximum) is full: it waits for T4 capacity.
    quotas = QuotaBook({"a": TenantQuota("a", {}, {MODEL: 1000})})
    pool = {MODEL: 8000, T4: 2000}
    plan = admit([job("x", "a", 2)], run=[running(job("z", "z", 2), model=T4)], quotas=quotas, pool=pool,
                 policy=NO_RANK_PREEMPTION)  # fmt: skip
    assert plan.pending["x"].reason == "capacity"
    assert plan.pending["x"].detail == f"2 GPUs needed on {T4} (quota: {MODEL}: 2 GPUs > maximum 1)"
    # T4 free: it starts there.
    plan = admit([job("x", "a", 2)], quotas=quotas, pool=pool, policy=NO_RANK_PREEMPTION)
    assert [(a.job_id, a.model) for a in plan.admit] == [("x", T4)]


# --- cohorts -------------------------------------------------------------------------------------------------


def cohort_book(key: str) -> QuotaBook:
    return QuotaBook({"a": TenantQuota("a", {key: 2000}, cohort="c"), "b": TenantQuota("b", {key: 2000}, cohort="c")})


def test_a_job_within_its_guarantee_reclaims_from_its_cohort_even_with_gpus_free_outside_it() -> None:
    # Cohort c is guaranteed 4 of 8 GPUs; b borrowed a's 2 (it holds 4). 4 GPUs are free, but they are no
    # one's guarantee in c: a's 2-GPU job reclaims b's two most recent jobs.
    for key in (TOTAL, MODEL):
        run = [running(job(f"b{i}", "b"), start=float(i)) for i in range(4)]
        plan = admit([job("a1", "a", 2, submit=5)], gpus=8, run=run, quotas=cohort_book(key),
                     policy=NO_RANK_PREEMPTION, now=10.0)  # fmt: skip
        assert admitted(plan) == [], key
        assert preempted(plan) == [("b3", "a1", "reclaim"), ("b2", "a1", "reclaim")], key
        assert plan.pending["a1"].reason == "preempting"
        assert plan.pending["a1"].detail == "preempting 2 job(s) (reclaim)"


def test_a_borrower_in_a_cohort_waits_for_idle_guarantees() -> None:
    for key in (TOTAL, MODEL):
        run = [running(job("a0", "a", 2)), running(job("b0", "b", 2))]
        plan = admit([job("a1", "a", 1, submit=5)], gpus=8, run=run, quotas=cohort_book(key), policy="las",
                     now=10.0)  # fmt: skip
        assert plan.preempt == () and admitted(plan) == []
        assert plan.pending["a1"].reason == "borrow-limit"
        assert plan.pending["a1"].detail == "cohort 'c' lacks 1 idle guaranteed GPUs"


# --- rank preemption -----------------------------------------------------------------------------------------


def test_rank_preemption_spares_jobs_that_ran_less_than_the_policys_minimum() -> None:
    # corral: a job runs at least 30 s before rank preemption may pick it.
    urgent = job("x", "a", priority=1, submit=990.0)
    young = [running(job("r", "b"), start=990.0)]
    plan = admit([urgent], gpus=1, run=young, policy="corral", now=1000.0)
    assert plan.preempt == () and plan.pending["x"].reason == "capacity"
    settled = [running(job("r", "b"), start=960.0)]
    plan = admit([urgent], gpus=1, run=settled, policy="corral", now=1000.0)
    assert preempted(plan) == [("r", "x", "rank")]


# --- room on whole nodes -------------------------------------------------------------------------------------


def young(id: str, tenant: str, node: str, gpu: int) -> RunningJob:
    """A 1-GPU job that started just now: it ranks above a newer waiting job, and another tenant's is not
    settled enough to be moved."""
    return small(id, tenant, node, gpu, start=NOW)


def kinds(p: Plan) -> list[tuple[str, str, str]]:
    return sorted((v.job_id, v.for_job_id, v.kind) for v in p.preempt)


def test_a_fragmented_job_does_not_preempt_by_count_when_no_node_can_be_freed() -> None:
    # Each node has 2 long-running (low-ranked) jobs and 2 young ones of another tenant: by count 4 victims
    # would do, but no node can be emptied for the 4-GPU job, so nothing is preempted.
    running = [small(f"old-{n}{i}", "o", n, i) for n in ("n0", "n1") for i in (0, 1)]
    running += [young(f"new-{n}{i}", "y", n, i) for n in ("n0", "n1") for i in (2, 3)]
    p = plan(running, [wide("w", "t")], "las")
    assert p.preempt == () and p.nominate == () and p.admit == ()
    assert p.pending["w"].reason == "capacity"


def test_victims_are_looked_for_on_at_most_8_nodes() -> None:
    # Nodes with 2 free GPUs and 2 young jobs (no victims) come first; the one node where long-running jobs
    # could make room comes last. As the 8th node it is tried; as the 9th it is not.
    def nodes_then_victims(before: int) -> Plan:
        names = tuple(f"n{i}" for i in range(before + 1))
        running = [young(f"y-{n}{i}", "y", n, i) for n in names[:-1] for i in (0, 1)]
        running += [small(f"old{i}", "o", names[-1], i) for i in range(3)]
        return plan(running, [wide("w", "t")], "las", names=names)

    p = nodes_then_victims(7)
    assert [v.kind for v in p.preempt] == ["rank"] * 3 and p.nominate == ("w",)  # 1 free + 3 victims
    assert p.pending["w"].detail == "preempting 3 job(s) (rank) on n7"
    p = nodes_then_victims(8)
    assert p.preempt == () and p.nominate == ()


def test_rank_preemption_on_a_node_never_takes_a_job_ranked_above() -> None:
    # n0 and n1 hold young jobs of another tenant (ranked above w, not settled): nothing is preempted, and
    # nothing can be moved.
    running = [young("y0", "y", "n0", 0), young("y1", "y", "n1", 0)]
    running += [young(f"f{i}", "y", "n1", i) for i in (1, 2, 3)]
    p = plan(running, [wide("w", "t")], "las")
    assert p.preempt == () and p.pending["w"].reason == "gang-incomplete"  # 3 free GPUs, on no one node


def test_a_gang_collects_rank_victims_and_moves_across_its_nodes() -> None:
    # w is a gang of 2 x 4 GPUs. n0 holds a long-running job of o (a rank victim); n1 a young job of w's own
    # tenant (ranked above, but it may be moved, to n2). Both are preempted for w, each of its kind.
    running = [small("old", "o", "n0", 0), young("mine", "t", "n1", 0)]
    running += [young(f"z{i}", "z", "n2", i) for i in (0, 1)]
    p = plan(running, [wide("w", "t", gpus=4, nodes=2)], "las", names=("n0", "n1", "n2"))
    assert kinds(p) == [("mine", "w", "defrag"), ("old", "w", "rank")]
    assert p.pending["w"].reason == "preempting"
    assert p.pending["w"].detail.startswith("preempting 2 job(s) (defrag, rank) on ")
    assert sorted(p.pending["w"].detail.split(" on ")[1].split(", ")) == ["n0", "n1"]
    assert p.nominate == ("w",)


def test_a_gang_that_cannot_get_all_its_nodes_preempts_nothing_and_leaves_them_open() -> None:
    # n0 could be freed (a rank victim), n1 not (a young job of another tenant): the gang takes nothing, and
    # a later gang of 2 x 3 GPUs starts on the free GPUs of n0 and n1.
    running = [small("old", "o", "n0", 0), young("y1", "y", "n1", 0)]
    later = QueuedJob("later", "t", gpus=3, nodes=2, submit_s=NOW, request=ResourceRequest(gpus=3))
    p = plan(running, [wide("w", "t", gpus=4, nodes=2), later], "las")
    assert p.preempt == () and p.nominate == ()
    assert [a.job_id for a in p.admit] == ["later"]
    assert sorted(pl.node for pl in p.admit[0].placements) == ["n0", "n1"]


def test_after_a_move_the_other_nodes_free_gpus_stay_open() -> None:
    # x1 (within x's guarantee) is moved off n0 for y's 4-GPU job; n1 still has room for a 1-GPU job after
    # x1's new spot there.
    running = [small("x1", "x", "n0", 0), small("y1", "y", "n1", 0)]
    later = QueuedJob("later", "y", gpus=1, submit_s=NOW, request=ResourceRequest(gpus=1))
    p = plan(running, [wide("w", "y"), later], "corral", quotas=book(x=2, y=6))
    assert kinds(p) == [("x1", "w", "defrag")]
    assert p.pending["w"].detail == "preempting 1 job(s) (defrag) on n0"
    assert [(a.job_id, a.placements[0].node) for a in p.admit] == [("later", "n1")]


def test_a_job_whose_victims_are_already_leaving_waits_for_them() -> None:
    # x1 was preempted for w in an earlier cycle and is still exiting on n0: w waits for n0, nothing more is
    # preempted, and it stays nominated.
    job = QueuedJob("x1", "x", gpus=1, request=ResourceRequest(gpus=1))
    exiting = RunningJob(job, 0.0, A100, exit_s=NOW + 5, preempted_for="w", parts=(("n0", (0,)),))
    others = [small(f"z{i}", "z", "n1", i) for i in range(4)]
    p = plan([exiting, *others], [wide("w", "t")], "las")
    assert p.preempt == () and p.nominate == ("w",)
    assert p.pending["w"].reason == "preempting"
    assert p.pending["w"].detail == "waiting for preempted jobs to release n0"
    assert p.pending["w"].eta_s == NOW + 5


def test_a_reclaim_on_a_node_uses_up_the_guarantee_for_the_tenants_later_jobs() -> None:
    # a is guaranteed 4 A100s: its 4-GPU job reclaims b's borrowed jobs on n0. Its next job would be
    # borrowed work: it reclaims nothing more.
    quotas = QuotaBook({"a": TenantQuota("a", {A100: 4000}), "b": TenantQuota("b", {A100: 0})})
    running = [small(f"b{i}", "b", n, i % 4) for i, n in enumerate(["n0"] * 4 + ["n1"] * 4)]
    w = QueuedJob("w", "a", gpus=4, model=A100, submit_s=NOW - 2, request=ResourceRequest(gpus=4))
    a2 = QueuedJob("a2", "a", gpus=1, model=A100, submit_s=NOW - 1, request=ResourceRequest(gpus=1))
    p = plan(running, [w, a2], NO_RANK_PREEMPTION, quotas=quotas)
    assert len(p.preempt) == 4 and {v.for_job_id for v in p.preempt} == {"w"}
    assert {v.kind for v in p.preempt} == {"reclaim"}
    assert p.pending["w"].detail.startswith("preempting 4 job(s) (reclaim) on n")
    assert p.nominate == ("w",)
    assert p.pending["a2"].reason == "capacity"


def test_a_job_short_on_its_cohorts_guarantee_reclaims_on_a_node() -> None:
    # Cohort c: a and b guaranteed 2 A100s each; b holds 4 (2 of them a's). a's 2-GPU job cannot borrow (the
    # cohort has no idle guarantee) but it is within its own guarantee: it reclaims on one node.
    for key in (TOTAL, A100):
        quotas = QuotaBook(
            {"a": TenantQuota("a", {key: 2000}, cohort="c"), "b": TenantQuota("b", {key: 2000}, cohort="c")}
        )
        running = [small(f"b{i}", "b", "n0", i) for i in range(3)] + [small("b3", "b", "n1", 0)]
        running += [small(f"z{i}", "z", "n1", i) for i in (1, 2, 3)]
        p = plan(running, [wide("w", "a", gpus=2)], NO_RANK_PREEMPTION, quotas=quotas)
        assert {(v.for_job_id, v.kind) for v in p.preempt} == {("w", "reclaim")}, key
        assert p.pending["w"].detail.startswith("preempting "), key
        assert p.pending["w"].detail.endswith(" (reclaim) on n0"), key


def cohort_of_two(key: str, guarantee: int) -> QuotaBook:
    return QuotaBook(
        {
            "a": TenantQuota("a", {key: guarantee * 1000}, cohort="c"),
            "b": TenantQuota("b", {key: guarantee * 1000}, cohort="c"),
        }
    )


def test_a_job_its_cohort_cannot_lend_to_takes_no_victims_on_a_node() -> None:
    # Cohort c is guaranteed 2 A100s (1 each) and b holds 3: a's 4-GPU job needs borrowed GPUs the cohort does
    # not have. b's long-running jobs on n0 are borrowed work, but rank preemption would not give the cohort
    # room: nothing is preempted (and nothing can be moved: 2 GPUs are free in all).
    for key in (TOTAL, A100):
        running = [small("b0", "b", "n0", 0), small("b1", "b", "n0", 1), small("b2", "b", "n1", 0)]
        running += [young(f"y{i}", "y", "n1", i) for i in (1, 2, 3)]
        p = plan(running, [wide("w", "a")], "las", quotas=cohort_of_two(key, 1))
        assert p.preempt == () and p.nominate == (), key
        assert p.pending["w"].reason == "gang-incomplete", key


def test_a_job_its_cohort_can_never_lend_to_moves_no_one() -> None:
    # Cohort c is guaranteed 2 GPUs in all: a's 4-GPU job can never start within it, yet z's job (settled, on
    # n0) would be moved off n0 for it.
    running = [small("z0", "z", "n0", 0), small("b0", "b", "n1", 0)]
    p = plan(running, [wide("w", "a")], "corral", quotas=cohort_of_two(TOTAL, 1))
    assert p.preempt == () and p.nominate == ()


# --- why pending and when ------------------------------------------------------------------------------------


def test_a_job_waiting_on_an_earlier_reclaim_holds_the_released_gpus_until_the_victim_is_gone() -> None:
    # b0 is being preempted for a1 (gone by t=50): a1 waits for it and is nominated; b's next job does not
    # take those GPUs (and, borrowing, reclaims nothing).
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 2000}), "b": TenantQuota("b", {TOTAL: 0})})
    leaving = running(job("b0", "b"), exit_s=50.0)
    plan = admit(
        [job("a1", "a", submit=1), job("b2", "b", submit=2)], gpus=2, run=[leaving, running(job("b1", "b"))],
        quotas=quotas, policy=NO_RANK_PREEMPTION, now=10.0,
    )  # fmt: skip
    assert plan.preempt == () and plan.nominate == ("a1",)
    assert plan.pending["a1"].reason == "preempting"
    assert plan.pending["a1"].detail == f"waiting for preempted jobs to release {MODEL} GPUs"
    assert plan.pending["a1"].eta_s == 50.0
    assert plan.pending["b2"].reason == "capacity"


def test_a_job_skipped_like_an_earlier_one_shows_the_reasons_description() -> None:
    plan = admit([job("x", "t", submit=1), job("y", "t", submit=2)], gpus=2, run=[running(job("z", "z", 2))],
                 policy="sjf")  # fmt: skip
    assert plan.pending["x"].detail == "1 GPUs needed, 0 free"
    assert (plan.pending["y"].reason, plan.pending["y"].detail) == (
        "capacity",
        "not enough free GPUs of an allowed model",
    )
    assert [plan.pending[j].position for j in ("x", "y")] == [0, 1]


# --- the walk: guarantees first, nominated jobs first, strict queues -----------------------------------------


def test_a_job_within_its_tenants_guarantee_goes_before_a_borrowers_higher_priority_job() -> None:
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 1000}), "b": TenantQuota("b", {TOTAL: 1000})})
    pending = [job("b-big", "b", 2, priority=9, submit=1), job("a-small", "a", 1, submit=2)]
    plan = admit(pending, gpus=2, quotas=quotas, policy=NO_RANK_PREEMPTION)
    assert admitted(plan) == ["a-small"]
    assert plan.pending["b-big"].reason == "gang-incomplete" and plan.pending["b-big"].position == 0
    plan = admit(pending, gpus=2, policy=NO_RANK_PREEMPTION)  # no quotas: priority decides
    assert admitted(plan) == ["b-big"]


def test_a_nominated_job_claims_its_tenants_guarantee_before_a_newer_higher_priority_one() -> None:
    quotas = QuotaBook({"a": TenantQuota("a", {TOTAL: 1000})})
    pending = [job("new", "a", priority=5, submit=9), job("nominated", "a", submit=1, nominated_s=3.0)]
    plan = admit(pending, gpus=1, quotas=quotas, policy=NO_RANK_PREEMPTION)
    assert admitted(plan) == ["nominated"]
    # Of two nominated jobs, the earlier nomination first.
    pending = [job("n2", "a", submit=1, nominated_s=7.0), job("n1", "a", submit=2, nominated_s=3.0)]
    assert admitted(admit(pending, gpus=1, quotas=quotas, policy=NO_RANK_PREEMPTION)) == ["n1"]


def test_fifo_blocks_every_job_behind_its_first_blocked_job() -> None:
    pending = [job("big", "a", 4, submit=1), job("small", "b", 1, submit=2, queue="other")]
    plan = admit(pending, gpus=4, run=[running(job("r", "z", 2))], policy="fifo")
    assert admitted(plan) == []
    assert plan.pending["big"].reason == "gang-incomplete" and plan.pending["big"].detail == "2 of 4 GPUs free"
    assert plan.pending["small"].reason == "behind-head"
    assert plan.pending["small"].detail == "a job ahead in a strict queue is blocked"
    plan = admit(pending, gpus=4, run=[running(job("r", "z", 2))], policy="sjf")  # no head blocking
    assert admitted(plan) == ["small"]


def test_no_move_is_tried_where_the_pool_lacks_the_room_to_take_the_moved_jobs() -> None:
    # n0 is full of w's own tenant's young jobs, n1 has 2 free GPUs: moving 4 jobs off n0 needs 4 GPUs
    # elsewhere, so no move is tried (a partial one would keep n1's GPUs for jobs that never move), and a
    # later 1-GPU job starts on n1.
    running = [young(f"t{i}", "t", "n0", i) for i in range(4)] + [young(f"y{i}", "y", "n1", i) for i in (0, 1)]
    later = QueuedJob("later", "t", gpus=1, submit_s=NOW, request=ResourceRequest(gpus=1))
    p = plan(running, [wide("w", "t"), later], "las")
    assert p.preempt == () and p.nominate == ()
    assert [(a.job_id, a.placements[0].node) for a in p.admit] == [("later", "n1")]


def test_a_borrower_whose_cohort_lacks_even_a_thousandth_of_a_gpu_preempts_no_one() -> None:
    # Cohort c is guaranteed 2 GPUs (1 each); a holds 1 and b a 0.999 share: a's 0.002 share would take the
    # cohort 0.001 above its guarantees. z's long-running work is borrowed, but rank preemption would not
    # give the cohort that room: nothing is preempted.
    quotas = QuotaBook(
        {
            "a": TenantQuota("a", {TOTAL: 1000}, cohort="c"),
            "b": TenantQuota("b", {TOTAL: 1000}, cohort="c"),
            "z": TenantQuota("z", {TOTAL: 0}),
        }
    )
    run = [running(job("a0", "a")), running(job("b0", "b", gpu_milli=999)), running(job("z0", "z", 2))]
    plan = admit([job("a1", "a", gpu_milli=2, submit=9000.0)], gpus=4, run=run, quotas=quotas, policy="las",
                 now=10_000.0)  # fmt: skip
    assert plan.preempt == () and admitted(plan) == []
    # With the cohort's guarantee idle enough (b holds less), the same share rank-preempts z's job.
    run[1] = running(job("b0", "b", gpu_milli=990))
    plan = admit([job("a1", "a", gpu_milli=2, submit=9000.0)], gpus=4, run=run + [running(job("f", "z", gpu_milli=10))],
                 quotas=quotas, policy="las", now=10_000.0)  # fmt: skip
    assert [(f, k) for _, f, k in preempted(plan)] == [("a1", "rank")]


def test_a_job_preempting_on_a_node_blocks_its_strict_queue() -> None:
    # w rank-preempts on one node; the job behind it in the same strict queue waits behind it, though a GPU
    # is free; in a best-effort queue it starts.
    running = [small("a", "t", "n0", 0), small("b", "t", "n1", 0)]
    w = QueuedJob("w", "t", gpus=4, submit_s=NOW - 1, queue="q", request=ResourceRequest(gpus=4))
    later = QueuedJob("later", "t", gpus=1, submit_s=NOW, queue="q", request=ResourceRequest(gpus=1))
    for strict, expected in ((True, []), (False, ["later"])):
        state = QueueState([w, later], running, queues={"q": QueueConfig("q", strict=strict)})
        p = compute_plan(Snapshot(nodes_with(running), state), NOW, "bestfit", "las")
        assert p.pending["w"].reason == "preempting" and len(p.preempt) == 1
        assert [a.job_id for a in p.admit] == expected, strict
    assert p.pending.get("later") is None
    state = QueueState([w, later], running, queues={"q": QueueConfig("q", strict=True)})
    p = compute_plan(Snapshot(nodes_with(running), state), NOW, "bestfit", "las")
    assert p.pending["later"].reason == "behind-head"


def test_a_job_of_any_model_finds_victims_on_the_nodes_of_each_model() -> None:
    # One node per model, 2 GPUs free on each. On one, young jobs ranked above w; on the other, long-running
    # jobs ranked below it: w preempts those, whichever model is looked at first.
    from sched_builders import make_node

    h100 = "H100-80GB"
    for old_model, young_model in ((h100, A100), (A100, h100)):
        names = {A100: "na", h100: "nh"}

        def on(id: str, model: str, gpu: int, start: float) -> RunningJob:
            j = QueuedJob(id, "o" if start < NOW else "y", gpus=1, request=ResourceRequest(gpus=1))
            return RunningJob(j, start, model, parts=((names[model], (gpu,)),))

        running = [on("old0", old_model, 0, 0.0), on("old1", old_model, 1, 0.0)]
        running += [on("new0", young_model, 0, NOW), on("new1", young_model, 1, NOW)]
        nodes = [make_node(names[m]).gpus(4, m).used(1000, 1000, 0, 0).build() for m in (A100, h100)]
        state = QueueState([wide("w", "t")], running)
        p = compute_plan(Snapshot(nodes, state), NOW, "bestfit", "las")
        assert kinds(p) == [("old0", "w", "rank"), ("old1", "w", "rank")], old_model
        assert p.pending["w"].detail == f"preempting 2 job(s) (rank) on {names[old_model]}"


def test_a_running_jobs_service_so_far_decides_whether_it_is_within_its_tenants_share() -> None:
    # 2 GPUs; a runs r (for 10,000 s: its service so far puts it at a deep LAS level) and waits with p; b waits
    # with b1. a's share is 1 GPU: taking a's jobs by level, p is within it and r is borrowed. So p starts,
    # and b1 (within b's share) preempts r.
    r = running(job("r", "a", submit=0.0), start=0.0)
    plan = admit([job("p", "a", submit=5.0), job("b1", "b", submit=6.0)], gpus=2, run=[r], policy="corral",
                 now=10_000.0)  # fmt: skip
    assert admitted(plan) == ["p"]
    assert preempted(plan) == [("r", "b1", "rank")]


def test_a_head_asking_for_one_model_reserves_its_start_on_that_model() -> None:
    # T4 comes first in the pool but the head asks for V100: its reservation is on V100 (start at t=100, when
    # r ends), and a V100 job without a time limit would delay it.
    strict_backfill = QueueingPolicy("test", "fifo", head_blocks=True, backfill=True)
    pool = {T4: 2000, MODEL: 4000}
    run = [running(job("r", "z", 2, time_limit_s=100.0), start=0.0)]
    pending = [job("head", "a", 4, model=MODEL, submit=1), job("y", "b", 1, model=MODEL, submit=2)]
    plan = admit(pending, run=run, pool=pool, policy=strict_backfill, now=10.0)
    assert admitted(plan) == []
    assert plan.pending["y"].reason == "backfill-reserved"
    assert plan.pending["y"].detail == "would delay the reserved start of a blocked head"
    short = [pending[0], job("y", "b", 1, model=MODEL, submit=2, time_limit_s=50.0)]
    assert admitted(admit(short, run=run, pool=pool, policy=strict_backfill, now=10.0)) == ["y"]  # ends by 100


def test_a_single_gpu_reclaim_on_nodes_holds_the_gpus_its_victim_releases() -> None:
    # a is guaranteed 1 GPU; b (guaranteed none) holds all 8. a's 1-GPU job reclaims b's most recent job.
    running = [small(f"b{i}", "b", n, i % 4, start=float(i)) for i, n in enumerate(["n0"] * 4 + ["n1"] * 4)]
    p = plan(running, [QueuedJob("a1", "a", gpus=1, submit_s=NOW, request=ResourceRequest(gpus=1))], "corral",
             quotas=book(a=1, b=0))  # fmt: skip
    assert kinds(p) == [("b7", "a1", "reclaim")]
    assert p.pending["a1"].reason == "preempting" and p.pending["a1"].detail == "preempting 1 job(s) (reclaim)"
    assert p.nominate == ("a1",)


def test_rank_preemption_takes_another_tenants_job_only_when_that_leaves_it_nearer_its_guarantee() -> None:
    # a, b and c are guaranteed 4 of 16 GPUs each; a holds its 4, so its new job is borrowed work (no reclaim).
    # b's 4-GPU job has run long and ranks below a's new job. When b holds 5, taking it would put b 3 under its
    # guarantee where it is 1 over: a's job waits. When b holds 7, taking it leaves b 1 under, nearer than 3
    # over: a's job preempts it.
    quotas = book(a=4, b=4, c=4)
    for held, preempts in ((1, False), (3, True)):
        run = [running(job(f"a{i}", "a", submit=9000), start=9000.0) for i in range(4)]
        run += [running(job("big", "b", gpus=4), start=0.0)]
        run += [running(job(f"b{i}", "b", submit=9000), start=9000.0) for i in range(held)]
        run += [running(job(f"c{i}", "c", submit=9000), start=9000.0) for i in range(16 - 8 - held)]
        plan = admit([job("x", "a", submit=9990)], gpus=16, run=run, quotas=quotas, policy="corral", now=10_000.0)
        assert ("big" in {victim for victim, _, _ in preempted(plan)}) is preempts, (held, preempted(plan))


def test_borrowed_work_is_taken_by_rank_whatever_its_size() -> None:
    # The margin covers jobs within (or rounded into) their tenant's share only. Pool 48, guarantees 16 each, c
    # idle, weights a=3 and b=1: shares a=36, b=12. b's 32-GPU job lies beyond b's share (borrowed): a, at its
    # guarantee and 20 under its share, takes it by rank. (With the margin on borrowed work, a tenant could keep
    # one job of up to twice its guarantee out of every other tenant's reach: a hostile review found it.)
    quotas = QuotaBook({t: TenantQuota(t, {TOTAL: 16_000}, {}, weight=w) for t, w in (("a", 3), ("b", 1), ("c", 1))})
    run = [running(job(f"a{i}", "a", submit=9000), start=9000.0) for i in range(16)]
    run += [running(job("gang", "b", gpus=32), start=0.0)]
    pending = [job(f"x{i}", "a", submit=9990 + i) for i in range(20)]
    plan = admit(pending, gpus=48, run=run, quotas=quotas, policy="corral", now=10_000.0)
    assert ("gang", "rank") in {(victim, kind) for victim, _, kind in preempted(plan)}


def test_running_jobs_keep_their_place_in_a_share_against_pending_twins() -> None:
    # Array tasks share a submit time: on a tie a running task stays within its tenant's share and a pending twin
    # is not ranked ahead of it (they swapped every min_run_s before: 6,864 preemptions for 48 one-hour tasks on 16
    # GPUs in a hostile review's simulation, against 64 after).
    tasks = [job(f"t{i}", "a", submit=9900.0) for i in range(4)]
    run = [running(t, start=9960.0) for t in tasks[:2]]  # past min_run_s, in the same service level as their twins
    plan = admit(tasks[2:], gpus=2, run=run, policy="corral", now=10_000.0)
    assert plan.preempt == ()
