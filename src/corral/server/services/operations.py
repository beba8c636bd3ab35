"""Operating the pool: cordon, drain and uncordon nodes; disable and enable GPUs. Admins only, audited."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from corral.core.errors import NotFoundError
from corral.core.tenancy import Action
from corral.server.auth import Principal
from corral.server.services.audit import record_audit
from corral.store.protocols import AuditStore, JobStore, NodeStore, OperationsStore
from corral.store.records import Node


class NodeAdminStore(NodeStore, OperationsStore, JobStore, AuditStore, Protocol):
    """Operating nodes: their records, admin state and events, the jobs on them, and the audit trail."""


def load_node(store: NodeStore, name: str) -> Node:
    node = store.get_node(name)
    if node is None:
        raise NotFoundError("node", name)
    return node


def cordon_node(store: NodeAdminStore, caller: Principal, name: str, cordoned: bool) -> Node:
    """Cordoned: running jobs stay, nothing new is placed."""
    caller.require(Action.MANAGE_CLUSTER)
    load_node(store, name)
    store.set_node_cordoned(name, cordoned)
    now = datetime.now(UTC)
    kind = "cordoned" if cordoned else "uncordoned"
    store.add_node_event(name, None, kind, f"by {_who(caller)}", now)
    record_audit(store, caller, f"node.{kind.removesuffix('ed')}", name)
    return load_node(store, name)


def drain_node(store: NodeAdminStore, caller: Principal, name: str) -> list[int]:
    """Cordon, then send the node's running jobs back to the queue (they restart elsewhere). Returns their ids."""
    cordon_node(store, caller, name, True)
    now = datetime.now(UTC)
    moved = [j.id for j in store.list_node_jobs(name) if store.requeue_job(j.id, f"node {name} drained", now)]
    store.add_node_event(name, None, "drained", f"{len(moved)} job(s) requeued", now)
    record_audit(store, caller, "node.drain", name, f"requeued jobs {moved}")
    return moved


def set_gpu_enabled(store: NodeAdminStore, caller: Principal, node: str, index: int, enabled: bool) -> Node:
    """Disable takes a GPU out until an admin enables it; enable also clears an UNHEALTHY verdict."""
    caller.require(Action.MANAGE_CLUSTER)
    found = load_node(store, node)
    if index not in {g.index for g in found.gpus}:
        raise NotFoundError("GPU", f"{node}/{index}")
    store.set_gpu_disabled(node, index, not enabled)
    now = datetime.now(UTC)
    if enabled:
        store.set_gpu_health(node, index, True, "")
    store.add_node_event(node, index, "enabled" if enabled else "disabled", f"by {_who(caller)}", now)
    record_audit(store, caller, "gpu.enable" if enabled else "gpu.disable", f"{node}/{index}")
    return load_node(store, node)


def _who(caller: Principal) -> str:
    return caller.user.name if caller.user else caller.token.name
