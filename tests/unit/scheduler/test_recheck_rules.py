"""The applier's re-check of a plan's parts (recheck.py): stale parts are rejected with the reason a user reads."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.models import GpuStatus, Node
from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo
from corral.scheduler.recheck import NodeUse, compute_node_use, compute_recheck

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _node(
    name: str,
    gpus: int = 2,
    *,
    state: str = "READY",
    cordoned: bool = False,
    cpu_milli: int = 8000,
    memory_mib: int = 16384,
    unhealthy: tuple[int, ...] = (),
    disabled: tuple[int, ...] = (),
) -> Node:
    infos = tuple(GpuInfo(i, f"{name}-{i}", "A100-80GB", 81920, healthy=i not in unhealthy) for i in range(gpus))
    status = tuple(GpuStatus(i, disabled=True) for i in disabled)
    return Node(
        name, name, "fake", cpu_milli, memory_mib, state, T0, T0, gpus=infos, cordoned=cordoned, gpu_status=status
    )


def test_node_use_sums_gpu_cpu_and_memory_of_running_jobs() -> None:
    held = [
        ((("a", (0,)), ("b", (1,))), 500, 1000, 2048),
        ((("a", (0, 1)),), 250, 500, 1024),
    ]
    use = compute_node_use(held)
    assert use["a"] == NodeUse({0: 750, 1: 250}, 1500, 3072)
    assert use["b"] == NodeUse({1: 500}, 1000, 2048)


def test_node_use_only_counts_the_named_nodes() -> None:
    held = [((("a", (0,)), ("b", (1,))), 500, 1000, 2048)]
    only_b = compute_node_use(held, only=["b"])
    assert set(only_b) == {"b"}  # a part on another node earlier in the job does not hide b's part
    assert only_b["b"] == NodeUse({1: 500}, 1000, 2048)
    only_a = compute_node_use(held, only=["a"])
    assert set(only_a) == {"a"}
    assert compute_node_use(held, only=[]) == {}


def test_recheck_accepts_a_part_that_still_fits() -> None:
    nodes = {"a": _node("a")}
    request = ResourceRequest(gpus=1, gpu_milli=500, cpu_milli=4000, memory_mib=8192)
    use = {"a": NodeUse({0: 500}, 4000, 8192)}
    assert compute_recheck([("a", (0,))], request, nodes, use) is None  # exactly full GPU, CPU and memory


def test_recheck_rejects_malformed_parts() -> None:
    nodes = {"a": _node("a"), "b": _node("b")}
    request = ResourceRequest(gpus=1)
    assert compute_recheck([], request, nodes, {}) == "no parts"
    assert compute_recheck([("a", (0,)), ("a", (1,))], request, nodes, {}) == "two parts on one node"
    assert compute_recheck([("c", (0,))], request, nodes, {}) == "node c: unknown"
    two = ResourceRequest(gpus=2)
    assert compute_recheck([("a", (1, 1))], two, nodes, {}) == "node a: a GPU listed twice"
    assert compute_recheck([("a", (0,)), ("b", (5,))], request, nodes, {}) == "node b: no GPU 5"


def test_recheck_names_why_a_node_is_closed() -> None:
    request = ResourceRequest(gpus=1)
    cordoned = {"a": _node("a", cordoned=True)}
    assert compute_recheck([("a", (0,))], request, cordoned, {}) == "node a: cordoned"
    lost = {"a": _node("a", state="LOST")}
    assert compute_recheck([("a", (0,))], request, lost, {}) == "node a: LOST"
    lost_and_cordoned = {"a": _node("a", state="LOST", cordoned=True)}
    assert compute_recheck([("a", (0,))], request, lost_and_cordoned, {}) == "node a: cordoned"


def test_recheck_names_an_unhealthy_or_disabled_gpu() -> None:
    request = ResourceRequest(gpus=1)
    sick = {"a": _node("a", unhealthy=(1,))}
    assert compute_recheck([("a", (0,))], request, sick, {}) is None
    assert compute_recheck([("a", (1,))], request, sick, {}) == "node a: GPU 1 is unhealthy"
    off = {"a": _node("a", disabled=(1,))}
    assert compute_recheck([("a", (1,))], request, off, {}) == "node a: GPU 1 is disabled"
    both = {"a": _node("a", unhealthy=(1,), disabled=(1,))}
    assert compute_recheck([("a", (1,))], request, both, {}) == "node a: GPU 1 is disabled"


def test_recheck_rejects_a_gpu_share_that_no_longer_fits() -> None:
    nodes = {"a": _node("a")}
    request = ResourceRequest(gpus=1, gpu_milli=500)
    use = {"a": NodeUse({0: 700})}
    assert compute_recheck([("a", (0,))], request, nodes, use) == "node a: GPU 0 has 300 milli free"
    assert compute_recheck([("a", (1,))], request, nodes, use) is None
    both = {"a": NodeUse({0: 100, 1: 800})}
    assert compute_recheck([("a", (1,))], request, nodes, both) == "node a: GPU 1 has 200 milli free"


def test_recheck_rejects_host_cpu_and_memory_only_when_asked_for() -> None:
    nodes = {"a": _node("a", cpu_milli=8000, memory_mib=16384)}
    use = {"a": NodeUse({}, 6000, 10000)}
    cpu = ResourceRequest(gpus=1, cpu_milli=2001)
    assert compute_recheck([("a", (0,))], cpu, nodes, use) == "node a: 2000 CPU milli free"
    mem = ResourceRequest(gpus=1, memory_mib=6385)
    assert compute_recheck([("a", (0,))], mem, nodes, use) == "node a: 6384 MiB host memory free"
    over = {"a": NodeUse({}, 9000, 20000)}  # already over: a request that asks for neither still passes
    assert compute_recheck([("a", (0,))], ResourceRequest(gpus=1), nodes, over) is None


def test_recheck_reports_the_first_stale_part_of_a_gang() -> None:
    nodes = {"a": _node("a"), "b": _node("b", cordoned=True)}
    request = ResourceRequest(gpus=1)
    use = {"a": NodeUse({0: 1000})}
    assert compute_recheck([("a", (1,)), ("b", (0,))], request, nodes, use) == "node b: cordoned"
    assert compute_recheck([("a", (0,)), ("b", (0,))], request, nodes, use) == "node a: GPU 0 has 0 milli free"
