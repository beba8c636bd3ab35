"""check_fit at its boundaries, as a table: each case names the code (whether waiting can help) and the reason a
user sees. Written from the mutants `make mutate` left alive in scheduler/filters.py."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.filters import check_fit
from corral.scheduler.framework import (
    REASON_CPU,
    REASON_ECC,
    REASON_GPUS_BUSY,
    REASON_LABELS,
    REASON_MEM_HOST,
    REASON_MEMORY,
    REASON_MODEL,
    REASON_NVLINK,
    REASON_TAINT,
    REASON_TOO_FEW_GPUS,
    REASON_UNSCHEDULABLE_NODE,
    Code,
)

OK = (Code.SUCCESS, "")
WAIT, NEVER = Code.UNSCHEDULABLE, Code.UNRESOLVABLE


def _host(cpu_used: int = 0, mem_used: int = 0) -> NodeState:
    """2 A100s, 8 cores, 8 GiB, with that much CPU (milli) and memory (MiB) in use."""
    node = make_node("n").gpus(2).host(8000, 8192).build()
    return replace(node, cpu_used_milli=cpu_used, memory_used_mib=mem_used)


def _unhealthy_second() -> NodeState:
    node = make_node("n").gpus(2).build()
    gpus = (node.info.gpus[0], replace(node.info.gpus[1], healthy=False))
    return replace(node, info=replace(node.info, gpus=gpus))


@dataclass
class Case:
    name: str
    node: NodeState
    request: ResourceRequest
    expected: tuple[Code, str]


CASES = [
    Case("CPU: exactly what is free fits", _host(cpu_used=2000), ResourceRequest(cpu_milli=6000), OK),
    Case("CPU: one milli more waits", _host(cpu_used=2000), ResourceRequest(cpu_milli=6001), (WAIT, REASON_CPU)),
    Case("CPU: the whole node fits when idle", _host(), ResourceRequest(cpu_milli=8000), OK),
    Case("CPU: more than the node has never fits", _host(), ResourceRequest(cpu_milli=8001), (NEVER, REASON_CPU)),
    Case(
        "CPU: the whole node, while busy, waits", _host(cpu_used=1), ResourceRequest(cpu_milli=8000), (WAIT, REASON_CPU)
    ),
    Case("memory: exactly what is free fits", _host(mem_used=192), ResourceRequest(memory_mib=8000), OK),
    Case("memory: one MiB more waits", _host(mem_used=192), ResourceRequest(memory_mib=8001), (WAIT, REASON_MEM_HOST)),
    Case("memory: the whole node fits when idle", _host(), ResourceRequest(memory_mib=8192), OK),
    Case(
        "memory: more than the node has never fits", _host(), ResourceRequest(memory_mib=8193), (NEVER, REASON_MEM_HOST)
    ),
    Case(
        "memory: the whole node, while busy, waits",
        _host(mem_used=1),
        ResourceRequest(memory_mib=8192),
        (WAIT, REASON_MEM_HOST),
    ),
    Case("too few GPUs", _host(), ResourceRequest(gpus=3), (NEVER, REASON_TOO_FEW_GPUS)),
    Case("model nowhere on the node", _host(), ResourceRequest(gpus=1, gpu_models=("T4",)), (NEVER, REASON_MODEL)),
    Case("an unhealthy GPU does not count", _unhealthy_second(), ResourceRequest(gpus=2), (NEVER, REASON_TOO_FEW_GPUS)),
    Case(
        "too few of the model, before memory",
        make_node("n").gpus(2, "A100-80GB").gpus(2, "T4-16GB", 16384).build(),
        ResourceRequest(gpus=3, gpu_models=("A100",), min_gpu_memory_mib=20000),
        (NEVER, REASON_TOO_FEW_GPUS),
    ),
    Case("GPU memory: exactly the minimum fits", _host(), ResourceRequest(gpus=2, min_gpu_memory_mib=81920), OK),
    Case(
        "GPU memory: one MiB more never fits",
        _host(),
        ResourceRequest(gpus=2, min_gpu_memory_mib=81921),
        (NEVER, REASON_MEMORY),
    ),
    Case(
        "ECC asked, none on, memory exactly enough",
        _host(),
        ResourceRequest(gpus=2, ecc=True, min_gpu_memory_mib=81920),
        (NEVER, REASON_ECC),
    ),
    Case(
        "busy GPUs: waiting helps",
        make_node("n").gpus(2).used(1000).build(),
        ResourceRequest(gpus=2),
        (WAIT, REASON_GPUS_BUSY),
    ),
    Case("NVLink required for one GPU: any GPU", _host(), ResourceRequest(gpus=1, nvlink="required"), OK),
    Case(
        "NVLink required for two, no NVLink",
        _host(),
        ResourceRequest(gpus=2, nvlink="required"),
        (NEVER, REASON_NVLINK),
    ),
    Case(
        "NVLink required, the island busy",
        make_node("n").gpus(4).nvlink_islands(2).used(1000, 0, 0, 1000).build(),
        ResourceRequest(gpus=2, nvlink="required"),
        (WAIT, REASON_NVLINK),
    ),
    Case(
        "NVLink required, an island free",
        make_node("n").gpus(4).nvlink_islands(2).used(1000, 1000).build(),
        ResourceRequest(gpus=2, nvlink="required"),
        OK,
    ),
    Case("cordoned node", replace(_host(), schedulable=False), ResourceRequest(), (NEVER, REASON_UNSCHEDULABLE_NODE)),
    Case(
        "labels do not match",
        make_node("n").gpus(1).labels(zone="a").build(),
        ResourceRequest(node_selector=(("zone", "b"),)),
        (NEVER, REASON_LABELS),
    ),
    Case(
        "labels match",
        make_node("n").gpus(1).labels(zone="a").build(),
        ResourceRequest(node_selector=(("zone", "a"),)),
        OK,
    ),
    Case(
        "one of a set of values (a staged gang's nodes)",
        make_node("n").gpus(1).labels(zone="b").build(),
        ResourceRequest(node_selector=(("zone", "a|b"),)),
        OK,
    ),
    Case(
        "none of a set of values",
        make_node("n").gpus(1).labels(zone="c").build(),
        ResourceRequest(node_selector=(("zone", "a|b"),)),
        (NEVER, REASON_LABELS),
    ),
    Case(
        "a set of values is no prefix match",
        make_node("n").gpus(1).labels(zone="a").build(),
        ResourceRequest(node_selector=(("zone", "ab|b"),)),
        (NEVER, REASON_LABELS),
    ),
    Case(
        "a taint not tolerated",
        make_node("n").gpus(1).taints("gpu-maint").build(),
        ResourceRequest(),
        (NEVER, REASON_TAINT),
    ),
    Case(
        "a taint tolerated",
        make_node("n").gpus(1).taints("gpu-maint").build(),
        ResourceRequest(tolerations=("gpu-maint",)),
        OK,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_check_fit(case: Case) -> None:
    status = check_fit(case.node, case.request)
    assert (status.code, status.reason) == case.expected
