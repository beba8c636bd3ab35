"""Image-aware placement (scheduler/cluster.py): among equally good placements a container job goes to a node that
has its image cached; a better placement without the image still wins; a request without an image is placed
exactly as before; and a node class (same hardware and load) whose members differ in images is looked at member
by member."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.node_class import compute_hardware_key
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState

IMAGE = "registry.example/train:1"
POLICIES = ["bestfit", "spread", "corral", "first-free", "fgd", "random"]


def _node(name: str, gpus: int = 8, *images: str) -> NodeInfo:
    return NodeInfo(
        name,
        tuple(GpuInfo(i, f"{name}-{i}", "A100-80GB", 81920) for i in range(gpus)),
        64_000,
        262_144,
        runtimes=("process", "docker"),
        images=frozenset(images),
    )


def _req(gpus: int = 1, image: str = IMAGE) -> ResourceRequest:
    return ResourceRequest(gpus=gpus, runtime="docker", image=image)


def _placed(cluster: Cluster, request: ResourceRequest) -> str:
    got = cluster.place(request)
    assert isinstance(got, Placement), got
    return got.node


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seeded", [None, 7])
def test_a_tie_goes_to_the_node_with_the_image(policy: str, seeded: int | None) -> None:
    nodes = [_node(f"n{i}") for i in range(6)] + [_node("cached", 8, IMAGE)] + [_node(f"m{i}") for i in range(3)]
    rng = random.Random(seeded) if seeded is not None else None
    assert _placed(Cluster(nodes, policy, rng=rng), _req()) == "cached"


@pytest.mark.parametrize(
    ("name", "policy", "loads", "expected"),
    [
        # bestfit packs: the half-used node scores higher than the idle one that has the image.
        ("bestfit packs onto the used node", "bestfit", {"used": 4}, "used"),
        # spread spreads: the idle node scores higher than the half-used one that has the image.
        ("spread avoids the used node", "spread", {"cached": 4}, "idle"),
    ],
)
def test_a_better_placement_without_the_image_still_wins(
    name: str, policy: str, loads: dict[str, int], expected: str
) -> None:
    other = "used" if policy == "bestfit" else "idle"
    cluster = Cluster([_node(other), _node("cached", 8, IMAGE)], policy)
    for node, gpus in loads.items():
        cluster.apply(Placement(node, tuple(range(gpus))))
    assert _placed(cluster, _req()) == expected, name


@pytest.mark.parametrize("policy", POLICIES)
def test_without_an_image_nothing_changes(policy: str) -> None:
    """The same sequence of requests lands on the same nodes whether or not nodes cache images, when the
    requests name no image (or an image no node has)."""
    plain = [_node(f"n{i}", 4 + i % 5) for i in range(40)]
    with_images = [replace(n, images=frozenset({IMAGE})) if i % 3 == 0 else n for i, n in enumerate(plain)]
    requests = [_req(1 + i % 3, image="") for i in range(60)]
    for image in ("", "not-cached-anywhere:1"):
        got = []
        for nodes in (plain, with_images):
            cluster = Cluster(nodes, policy, rng=random.Random(3))
            got.append([_node_of(cluster.place(replace(r, image=image))) for r in requests])
        assert got[0] == got[1], image


def _node_of(got: Placement | Unschedulable) -> str:
    return got.node if isinstance(got, Placement) else "-"


@pytest.mark.parametrize("policy", POLICIES)
def test_a_class_with_mixed_members_picks_the_member_with_the_image(policy: str) -> None:
    # Same hardware, same load: one node class of five; only the fourth has the image.
    nodes = [_node(f"n{i}", 8, *((IMAGE,) if i == 3 else ())) for i in range(5)]
    cluster = Cluster(nodes, policy, rng=random.Random(11))
    assert cluster.class_count == 1
    assert _placed(cluster, _req()) == "n3"


def test_images_are_not_hardware() -> None:
    assert compute_hardware_key(_node("a", 8, IMAGE)) == compute_hardware_key(_node("a", 8))


def test_the_image_keeps_landing_where_it_is_cached_until_those_nodes_are_full() -> None:
    nodes = [_node("a", 2), _node("b", 2, IMAGE), _node("c", 2, IMAGE), _node("d", 2)]
    cluster = Cluster(nodes, "bestfit", rng=random.Random(5))
    first = [_placed(cluster, _req()) for _ in range(4)]
    assert sorted(first) == ["b", "b", "c", "c"]  # ties between idle nodes go to a cached one, then bestfit packs
    assert {_placed(cluster, _req()) for _ in range(4)} == {"a", "d"}  # then anywhere that fits
    assert isinstance(cluster.place(_req()), Unschedulable)


def test_a_request_with_an_image_shares_verdicts_with_the_same_request_without() -> None:
    cluster = Cluster([_node(f"n{i}") for i in range(3)], "bestfit")
    plain = ResourceRequest(gpus=1, runtime="docker")
    cluster.find(plain)
    cluster.find(_req())
    cluster.find(_req(image="other:2"))
    assert len({cluster._request_id(r) for r in (plain, _req(), _req(image="other:2"))}) == 1


def test_a_gang_prefers_the_nodes_with_the_image() -> None:
    nodes = [_node(f"n{i}") for i in range(4)] + [_node("c1", 8, IMAGE), _node("c2", 8, IMAGE)]
    got = Cluster(nodes, "bestfit").place_gang(_req(8), 2)
    assert isinstance(got, list)
    assert sorted(p.node for p in got) == ["c1", "c2"]


# ---- what a user sees ---------------------------------------------------------------------------------------
def _qjob(id: str, gpus: int, image: str) -> QueuedJob:
    req = ResourceRequest(gpus=gpus, runtime="docker" if image else "process", image=image)
    return QueuedJob(id, "t", gpus=gpus, request=req)


def _pending_text(nodes: list[NodeInfo], job: QueuedJob) -> str:
    states = [NodeState(n, (1000, 1000) + (0,) * (n.gpu_count - 2)) for n in nodes]  # two GPUs of each in use
    plan = compute_plan(Snapshot(states, QueueState([job], [])), 0.0, "bestfit", QueueingPolicy("skip", "fifo"))
    assert job.id in plan.pending, plan
    return plan.pending[job.id].text


def test_a_pending_reason_never_tells_where_an_image_is_cached() -> None:
    """A hostile tenant must not learn, by submitting another tenant's private image name, whether some node
    holds it: the reason of its waiting job reads the same whether the image is cached somewhere or nowhere."""
    cached = _pending_text([_node("a", 4, IMAGE), _node("b", 4)], _qjob("big", 4, IMAGE))
    nowhere = _pending_text([_node("a", 4), _node("b", 4)], _qjob("big", 4, IMAGE))
    assert cached.startswith("waiting for 4 free GPUs") and cached == nowhere
    assert "image" not in cached and "cached" not in cached


def test_a_job_placed_at_once_is_placed_where_its_image_is() -> None:
    nodes = [_node("a", 2), _node("b", 2, IMAGE), _node("c", 2)]
    plan = compute_plan(
        Snapshot([NodeState(n) for n in nodes], QueueState([_qjob("j", 1, IMAGE)], [])), 0.0, "spread", "fifo"
    )
    assert [p.node for a in plan.admit for p in a.placements] == ["b"]
