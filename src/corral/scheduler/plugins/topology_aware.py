"""`topology`: the node where the request's GPUs share the fastest interconnect, then the tightest
such group (best fit keeps whole NVLink islands free for the jobs that need them).

Source: Amaral et al., "Topology-aware GPU scheduling for learning workloads in cloud environments"
(SC'17), and the NVIDIA k8s-device-plugin's "packed" allocation over NVLink/PCIe/NUMA.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.topology import nvlink_islands


class TopologyAware:
    name = "topology"
    gpu_aware = False

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        gpus = node.info.gpus
        if not positions:
            return 0.0
        islands = nvlink_islands(node.info)
        chosen = [gpus[p] for p in positions]
        if len(positions) > 1 and len({islands[p] for p in positions}) == 1 and chosen[0].nvlink_peers:
            tier = 3.0
        elif len({g.pcie_switch for g in chosen}) == 1 and chosen[0].pcie_switch is not None:
            tier = 2.0
        elif len({g.numa_node for g in chosen}) == 1 and chosen[0].numa_node is not None:
            tier = 1.0
        else:
            tier = 0.0
        # Best fit inside the tier: the fewer free GPUs left in the chosen island, the better. Only the positions
        # in that island are taken from it (GPUs spread over islands left it at -2 and divided by zero).
        island = islands[positions[0]]
        free_here = sum(1 for p, u in enumerate(node.gpu_used_milli) if islands[p] == island and u == 0)
        left = free_here - sum(1 for p in positions if islands[p] == island)
        return 100.0 * (tier + 1.0 / (2.0 + left)) / 4.0
