"""NodeIndex and rank_nodes (node_room.py): which GPUs exiting jobs release on a node and for whom, how long a
node would take to drain, and which nodes are closest to holding a part of a waiting job."""

from __future__ import annotations

from corral.scheduler.queueing import QueuedJob, RunningJob
from corral.scheduler.queueing.node_room import NodeIndex, is_node_bound, rank_nodes

A100 = "A100-80GB"
H100 = "H100-80GB"


def on(id: str, parts: tuple[tuple[str, tuple[int, ...]], ...], start: float = 0.0, **kw: object) -> RunningJob:
    gpus = len(parts[0][1])
    return RunningJob(QueuedJob(id, "t", gpus=gpus, nodes=len(parts)), start, A100, parts=parts, **kw)  # type: ignore[arg-type]


def test_exiting_gpus_are_free_for_anyone_but_those_preempted_for_another_job() -> None:
    cancelled = on("c", (("n0", (0, 1)),), exit_s=5.0)
    for_w = on("v", (("n0", (2, 3, 4)),), exit_s=5.0, preempted_for="w")
    staying = on("s", (("n0", (5,)),))
    index = NodeIndex([cancelled, for_w, staying], {"w": 2})
    assert index.exiting("n0", A100, "w") == 5  # all of it: the cancelled job's and its own
    assert index.exiting("n0", A100, "x") == 3  # 2 cancelled + what w does not need of its 3
    assert index.exiting("n1", A100, "x") == 0
    assert index.exiting("n0", H100, "x") == 0
    assert NodeIndex([for_w], {"w": 5}).exiting("n0", A100, "x") == 0  # never below zero


def test_a_gang_exits_on_each_of_its_nodes() -> None:
    gang = on("g", (("n0", (0, 1)), ("n1", (0, 1))), exit_s=5.0)
    index = NodeIndex([gang])
    assert (index.exiting("n0", A100, "x"), index.exiting("n1", A100, "x")) == (2, 2)
    assert index.exiting_for("n0", "x") is False
    assert NodeIndex([on("v", (("n0", (0,)),), exit_s=5.0, preempted_for="w")]).exiting_for("n0", "w")
    assert not NodeIndex([on("v", (("n0", (0,)),), exit_s=5.0, preempted_for="w")]).exiting_for("n1", "w")


def test_drain_age_is_how_long_the_youngest_jobs_to_end_have_run() -> None:
    index = NodeIndex([on("old", (("n0", (0, 1)),), start=10.0), on("new", (("n0", (2,)),), start=70.0)])
    assert index.on_node("n0", A100) == [(70.0, 1), (10.0, 2)]  # youngest first
    assert index.on_node("n0", H100) == []
    assert index.drain_age("n0", A100, 1, 100.0) == 30.0  # the young job alone frees enough
    assert index.drain_age("n0", A100, 2, 100.0) == 90.0  # the old one must end too
    assert index.drain_age("n0", A100, 3, 100.0) == 90.0
    assert index.drain_age("n0", A100, 4, 100.0) == float("inf")


def test_candidates_on_a_node_keep_the_victim_order() -> None:
    a, b, c = on("a", (("n0", (0,)),)), on("b", (("n1", (0,)),)), on("c", (("n0", (1,)),))
    index = NodeIndex([a, b, c])
    assert [r.job.id for r in index.candidates(("rank", A100), "n0", lambda: [c, b, a])] == ["c", "a"]
    assert index.candidates(("rank", A100), "n2", lambda: [c, b, a]) == []


def test_rank_nodes_puts_the_closest_first_and_skips_nodes_where_free_gpus_alone_would_do() -> None:
    exiting = on("x", (("n2", (0, 1)),), exit_s=5.0)
    index = NodeIndex([exiting])
    job = QueuedJob("w", "t", gpus=4)
    free = [("n0", 4), ("n1", 3), ("n2", 2), ("n3", 1)]
    # n0 has 4 free: something else blocks the job there. n2 (2 free + 2 exiting) is closest.
    assert rank_nodes(free, index, A100, job, 4) == [("n2", 2, 4), ("n1", 3, 3), ("n3", 1, 1)]
    gang = QueuedJob("g", "t", gpus=4, nodes=2)
    assert rank_nodes(free, index, A100, gang, 4)[:2] == [("n0", 4, 4), ("n2", 2, 4)]


def test_node_bound_requests() -> None:
    assert is_node_bound(QueuedJob("w", "t", gpus=2))
    assert is_node_bound(QueuedJob("g", "t", gpus=1, nodes=2))
    assert not is_node_bound(QueuedJob("one", "t", gpus=1))
    assert not is_node_bound(QueuedJob("none", "t", gpus=0, nodes=2))
