"""A job with an image only goes to a node whose agent has the docker runtime (filters.check_node_constraints):
never to a process-only node, however well it would fit there, and the reason a user sees says why."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sched_builders import make_node

from corral.core.containers import ContainerSpec
from corral.core.models import JobSpec
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeInfo, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.filters import check_fit
from corral.scheduler.framework import REASON_RUNTIME, Code

IMAGE = ResourceRequest(gpus=1, runtime="docker")


def _info(name: str, *runtimes: str) -> NodeInfo:
    return replace(make_node(name).gpus(8).info(), runtimes=runtimes)


@pytest.mark.parametrize(
    ("name", "runtimes", "request_", "code"),
    [
        ("image job, process-only node: never", ("process",), IMAGE, Code.UNRESOLVABLE),
        ("image job, node with docker: fits", ("process", "docker"), IMAGE, Code.SUCCESS),
        ("process job, node with docker: fits", ("process", "docker"), ResourceRequest(gpus=1), Code.SUCCESS),
        ("process job, process-only node: fits", ("process",), ResourceRequest(gpus=1), Code.SUCCESS),
    ],
)
def test_runtime_filter(name: str, runtimes: tuple[str, ...], request_: ResourceRequest, code: Code) -> None:
    node = make_node("n").gpus(8).build()
    node = replace(node, info=replace(node.info, runtimes=runtimes))
    status = check_fit(node, request_)
    assert status.code is code, name
    if code is Code.UNRESOLVABLE:
        assert status.reason == REASON_RUNTIME and "docker" in status.reason


@pytest.mark.parametrize("policy", ["bestfit", "spread", "corral", "first-free"])
def test_an_image_job_skips_process_only_nodes_that_come_first(policy: str) -> None:
    nodes = [_info(f"p{i}", "process") for i in range(5)] + [_info("d0", "process", "docker")]
    cluster = Cluster(nodes, policy)
    for _ in range(8):  # all of d0's GPUs, then nothing: the process-only nodes never take one
        placed = cluster.place(IMAGE)
        assert isinstance(placed, Placement) and placed.node == "d0"
    assert isinstance(cluster.place(IMAGE), Unschedulable)
    assert isinstance(cluster.place(ResourceRequest(gpus=1)), Placement)  # a process job still fits elsewhere


def test_no_docker_node_explains_the_runtime() -> None:
    cluster = Cluster([_info("p0", "process"), _info("p1", "process")], "bestfit")
    got = cluster.place(IMAGE)
    assert isinstance(got, Unschedulable)
    assert REASON_RUNTIME in str(cluster.explain(IMAGE).reasons)


def test_a_spec_with_an_image_asks_for_the_docker_runtime() -> None:
    assert JobSpec(command=("true",)).request.runtime == "process"
    assert JobSpec(command=("true",), container=ContainerSpec("busybox:1")).request.runtime == "docker"
