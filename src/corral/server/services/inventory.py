"""The inventory as the API shows it: a node's and its GPUs' wire shapes with what is in use on them (pure)."""

from __future__ import annotations

from collections.abc import Collection

from corral.api.schemas import GpuOut, NodeOut
from corral.core.pools import POOL_LABEL, SOURCE_AGENT, SOURCE_LABEL, STATIC_POOL
from corral.store.records import Node

# (node, GPU index) -> (used milli, id of a job on it)
Usage = dict[tuple[str, int], tuple[int, int]]


def node_out(n: Node, usage: Usage, show_images: bool = False) -> NodeOut:
    """`show_images`: list the images cached on the node (admins: an image's name may be a tenant's secret)."""
    free = sum(1 for g in n.gpus if g.healthy and (n.name, g.index) not in usage)
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
