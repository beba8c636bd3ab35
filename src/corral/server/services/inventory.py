"""The inventory as the API shows it: a node's and its GPUs' wire shapes with what is in use on them (pure, but for
NodePages: the nodes' JSON kept between lists)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence

from pydantic import TypeAdapter

from corral.api.schemas import GpuOut, NodeOut
from corral.core.pools import POOL_LABEL, SOURCE_AGENT, SOURCE_LABEL, STATIC_POOL
from corral.store.records import Node

# (node, GPU index) -> (used milli, id of a job on it)
Usage = dict[tuple[str, int], tuple[int, int]]


def free_gpus(n: Node, usage: Usage) -> int:
    """The node's healthy GPUs nothing is placed on."""
    return sum(1 for g in n.gpus if g.healthy and (n.name, g.index) not in usage)


def node_out(n: Node, usage: Usage, show_images: bool = False) -> NodeOut:
    """`show_images`: list the images cached on the node (admins: an image's name may be a tenant's secret)."""
    free = free_gpus(n, usage)
    return NodeOut(
        name=n.name,
        hostname=n.hostname,
        backend=n.backend,
        state=n.state,
        cpu_milli=n.cpu_milli,
        memory_mib=n.memory_mib,
        gpus_total=len(n.gpus),
        gpus_free=free,
        gpu_models=sorted({g.model for g in n.gpus}),
        labels=n.labels,
        registered_at=n.registered_at,
        last_heartbeat_at=n.last_heartbeat_at,
        cordoned=n.cordoned,
        gpus_unhealthy=sum(1 for g in n.gpus if not g.healthy),
        isolation=n.isolation,
        runtimes=list(n.runtimes),
        images=list(n.images) if show_images else None,
        pool=n.labels.get(POOL_LABEL, STATIC_POOL),
        source=n.labels.get(SOURCE_LABEL, SOURCE_AGENT),
    )


def gpus_out(n: Node, usage: Usage, visible_jobs: Collection[int] | None = None) -> list[GpuOut]:
    """The node's GPUs. `visible_jobs`: the job ids the caller may know (its tenant's); a GPU held by another
    tenant's job shows as used without its job id (None: every id, for admins)."""
    status = {s.index: s for s in n.gpu_status}
    out = []
    for g in n.gpus:
        used, job_id = usage.get((n.name, g.index), (0, None))
        if job_id is not None and visible_jobs is not None and job_id not in visible_jobs:
            job_id = None
        st = status.get(g.index)
        health = "DISABLED" if st and st.disabled else ("UNHEALTHY" if st and not st.healthy else "HEALTHY")
        out.append(
            GpuOut(
                node=n.name,
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_mib=g.memory_mib,
                pci_bus_id=g.pci_bus_id,
                numa_node=g.numa_node,
                nvlink_peers=list(g.nvlink_peers),
                healthy=g.healthy,
                job_id=job_id,
                used_milli=used,
                health=health,
                health_reason=st.reason if st else "",
            )
        )
    return out


_NODE_JSON: TypeAdapter[NodeOut] = TypeAdapter(NodeOut)


class NodePages:
    """Each node's JSON in `GET /api/v1/nodes`, kept while the node is the same: the store hands back the very Node
    it keeps until that node's row or its state or heartbeat changes (SqlStore.list_nodes), and the rest of a node's
    shape is its free GPUs and whether the caller sees its images. 1,000 nodes made 1,000 `NodeOut` models a list,
    most of that request's time."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[Node, int, bool, bytes]] = {}
        self._lock = threading.Lock()

    def json(self, nodes: Sequence[Node], usage: Usage, show_images: bool) -> bytes:
        """The JSON array `[node_out(n, usage, show_images) for n in nodes]` serialises to (by alias, as FastAPI)."""
        kept = self._kept
        parts: list[bytes] = []
        made: list[tuple[Node, int, bool, bytes]] = []
        for n in nodes:
            free = free_gpus(n, usage)
            entry = kept.get(n.name)
            if entry is not None and entry[0] is n and entry[1] == free and entry[2] == show_images:
                parts.append(entry[3])
                continue
            data = _NODE_JSON.dump_json(node_out(n, usage, show_images), by_alias=True)
            parts.append(data)
            made.append((n, free, show_images, data))
        if made:
            with self._lock:
                for entry in made:
                    kept[entry[0].name] = entry
                if len(kept) > 2 * len(nodes) + 64:  # nodes that left: start again
                    names = {n.name for n in nodes}
                    self._kept = {k: v for k, v in kept.items() if k in names}
        return b"[" + b",".join(parts) + b"]"
