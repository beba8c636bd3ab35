"""Room on whole nodes (node_room.py, admission._make_room): a job that asks several whole GPUs on one node
waits where GPUs are free by count but no node has enough; the cycle picks victims on the node closest to
holding it, moves lower-ranked jobs that fit elsewhere off it, and keeps that node for it."""

from __future__ import annotations

from node_builders import NOW, book, nodes_with, plan

from corral.core.requests import ResourceRequest
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueState, RunningJob
from corral.scheduler.queueing.admission import DEFRAG_SETTLE_S
from corral.scheduler.queueing.node_room import NodeIndex, is_node_bound
from corral.scheduler.queueing.policy import get_queueing_policy

A100 = "A100-80GB"


def small(id: str, tenant: str, node: str, gpu: int, start: float = 0.0) -> RunningJob:
    """A 1-GPU job on `node` that has run since `start` (long: it ranks low under least attained service)."""
    job = QueuedJob(id, tenant, gpus=1, submit_s=0.0, request=ResourceRequest(gpus=1))
    return RunningJob(job, start, A100, parts=((node, (gpu,)),))


def wide(id: str, tenant: str, gpus: int = 4, nodes: int = 1) -> QueuedJob:
    return QueuedJob(id, tenant, gpus=gpus, nodes=nodes, submit_s=NOW - 1, request=ResourceRequest(gpus=gpus))


def test_only_several_whole_gpus_on_a_node_are_node_bound() -> None:
    assert is_node_bound(wide("w", "t", gpus=2))
    assert is_node_bound(wide("g", "t", gpus=1, nodes=2))
    assert not is_node_bound(wide("one", "t", gpus=1))
    assert not is_node_bound(QueuedJob("share", "t", gpus=1, gpu_milli=500))


def test_rank_preemption_picks_victims_on_one_node_not_by_count() -> None:
    # 6 GPUs free by count, 3 per node: a 4-GPU job needs one node whole. Time-slicing (las) preempts one
    # low-ranked job, on one node, and keeps that node for it; counting GPUs would have preempted nothing.
    running = [small("a", "t", "n0", 0), small("b", "t", "n1", 0)]
    p = plan(running, [wide("w", "t")], "las")
    assert [(v.job_id, v.for_job_id, v.kind) for v in p.preempt] in ([("a", "w", "rank")], [("b", "w", "rank")])
    assert p.admit == () and p.nominate == ("w",)


def test_a_job_that_would_not_rank_below_is_moved_only_where_it_fits_elsewhere() -> None:
    # The running jobs started just now (nothing attained) and were submitted first: they rank above w, so
    # they are no rank victims. Where one of them fits elsewhere, it is moved (defrag); where none does,
    # nothing is preempted.
    running = [small("a", "t", "n0", 0, start=NOW), small("b", "t", "n1", 0, start=NOW)]
    p = plan(running, [wide("w", "t")], "las")
    assert [(v.job_id, v.kind) for v in p.preempt] in ([("a", "defrag")], [("b", "defrag")])
    full = [small(f"{n}{i}", "t", n, i, start=NOW) for n in ("n0", "n1") for i in range(1, 4)]
    p = plan(running + full, [wide("w", "t", gpus=2)], "las")
    assert p.preempt == () and p.nominate == ()


def test_defrag_moves_a_job_that_fits_elsewhere_when_no_victim_is_allowed() -> None:
    # Tenant x is within its guarantee (1 of 2), so its job on n0 may not be reclaimed, and y's own job on n1
    # is not reclaimed for y either; x's job can run on n1's free GPUs, so it is moved off n0 for y's job.
    running = [small("x1", "x", "n0", 0), small("y1", "y", "n1", 0)]
    p = plan(running, [wide("w", "y")], "corral", quotas=book(x=2, y=6))
    assert [(v.job_id, v.kind) for v in p.preempt] == [("x1", "defrag")]
    assert p.nominate == ("w",)


def test_defrag_needs_room_elsewhere() -> None:
    # n1 is full of z's work, within z's guarantee, as x's job on n0 is within x's: no victim is allowed,
    # and x's job has nowhere to go, so it stays (and nothing is preempted by count instead).
    running = [small("x1", "x", "n0", 0)] + [small(f"z{i}", "z", "n1", i) for i in range(4)]
    p = plan(running, [wide("w", "y")], "corral", quotas=book(x=2, y=2, z=4))
    assert p.preempt == ()


def test_the_node_kept_for_a_waiting_job_is_no_one_elses_this_cycle() -> None:
    # After w preempts on n0 (its 3 free GPUs are kept for it), a 1-GPU job goes to n1, not into w's node.
    running = [small("a", "t", "n0", 0), small("b", "t", "n1", 0), small("c", "t", "n1", 1)]
    later = QueuedJob("later", "t", gpus=1, submit_s=NOW, request=ResourceRequest(gpus=1))
    p = plan(running, [wide("w", "t"), later], "las")
    assert [v.job_id for v in p.preempt] == ["a"]
    assert [(a.job_id, a.placements[0].node) for a in p.admit] == [("later", "n1")]


def test_a_job_that_only_a_held_node_could_take_says_so_and_can_wait() -> None:
    running = [small("a", "t", "n0", 0)]
    later = QueuedJob("later", "t", gpus=2, submit_s=NOW, request=ResourceRequest(gpus=2))
    p = plan(running, [wide("w", "t"), later], "las", names=("n0",))
    assert p.pending["later"].detail == "1 node: kept for a job waiting for a whole node"
    assert p.pending["later"].reason == "capacity"  # not model-constraint: waiting helps


def test_gpus_freed_for_another_waiting_job_are_its_but_the_surplus() -> None:
    # x1 (3 GPUs) is exiting for w, which needs 2 of them per node: 1 is spare.
    job = QueuedJob("x1", "x", gpus=3, request=ResourceRequest(gpus=3))
    exiting = RunningJob(job, 0.0, A100, exit_s=NOW + 5, preempted_for="w", parts=(("n0", (0, 1, 2)),))
    index = NodeIndex([exiting], {"w": 2})
    assert index.exiting("n0", A100, "w") == 3
    assert index.exiting("n0", A100, "other") == 1
    assert index.exiting("n0", "H100-80GB", "other") == 0
    assert NodeIndex([exiting], {}).exiting("n0", A100, "other") == 3  # w is gone: all of them are free


def test_non_preemptive_policies_keep_nodes_only_when_asked_to_drain() -> None:
    running = [small("a", "t", "n0", 0), small("b", "t", "n1", 0)]
    later = QueuedJob("later", "t", gpus=1, submit_s=NOW, request=ResourceRequest(gpus=1))
    p = plan(running, [wide("w", "t"), later], "sjf")
    assert p.preempt == () and [a.job_id for a in p.admit] == ["later"]
    drain = get_queueing_policy("sjf").__class__("sjf-drain", "sjf", drain_nodes=True)
    state = QueueState([wide("w", "t"), later], running)
    p = compute_plan(Snapshot(nodes_with(running), state), NOW, "bestfit", drain, explain=True)
    assert "kept for it" in p.pending["w"].detail
    held = p.pending["w"].detail.split("; ")[1].split(" kept")[0]
    assert [a.placements[0].node for a in p.admit if a.job_id == "later"] != [held]


def test_a_tenant_cannot_keep_moving_other_tenants_work() -> None:
    # Tenant h (guarantee 1, so its 4-GPU job borrows: no reclaim) keeps submitting wide jobs. x's job on n0
    # fits on n2's free GPUs, so moving it would make room for h's job on n0.
    quotas = book(x=4, h=1)
    names = ("n0", "n1", "n2")
    others = [small("h0", "h", "n1", 0), small("z1", "z", "n2", 0)]

    def moved_for_h(x1: RunningJob) -> list[str]:
        return [v.job_id for v in plan([x1, *others], [wide("w", "h")], "corral", quotas, names).preempt]

    # Settled (run 10 minutes since it started): moved, once.
    assert moved_for_h(small("x1", "x", "n0", 0)) == ["x1"]
    # Moved (restarted) less than 10 minutes ago: not moved again, however many wide jobs h submits.
    assert moved_for_h(small("x1", "x", "n0", 0, start=NOW - DEFRAG_SETTLE_S + 1)) == ["h0"]  # h's own instead
    # h's own work may be moved for it once it has run min_run_s (30 s under corral), settled or not.
    fresh = [small("z0", "z", "n1", 0, start=NOW - 60), small("z1", "z", "n2", 0, start=NOW - 60)]
    p = plan([small("h1", "h", "n0", 0, start=NOW - 60), *fresh], [wide("w", "h")], "corral", quotas, names)
    assert [v.job_id for v in p.preempt] == ["h1"]
    # x's wide job is within x's guarantee: it may move another tenant's job that has not settled (none of
    # them may be reclaimed: each tenant is within its guarantee).
    unsettled = [small("h0", "h", "n0", 0, start=NOW - 60), *fresh]
    p = plan(unsettled, [wide("w", "x")], "corral", book(x=4, h=1, z=2), names)
    assert [v.kind for v in p.preempt] == ["defrag"] and p.nominate == ("w",)


def test_a_gang_job_is_never_moved_to_make_room() -> None:
    # g is a gang (one GPU on each of n0 and n1) that ranks above w (40 s, 80 GPU-s: LAS level 0); z's job on n2
    # has just started. Moving one part of a gang would restart the whole gang elsewhere: defrag moves only
    # single-node jobs, so nothing is moved and w waits.
    gang = QueuedJob("g", "t", gpus=1, nodes=2, submit_s=0.0, request=ResourceRequest(gpus=1))
    g = RunningJob(gang, NOW - 40, A100, parts=(("n0", (0,)), ("n1", (0,))))
    p = plan([g, small("z", "t", "n2", 0, start=NOW)], [wide("w", "t")], "corral", names=("n0", "n1", "n2"))
    assert p.preempt == ()
