"""Simulated GPU faults (`corral sim fault`): queued per node until its agent's next sync picks them up."""

from __future__ import annotations

import threading

from corral.api.schemas import SimFaultCommand
from corral.core.errors import NotFoundError, ValidationError
from corral.store.protocols import NodeStore


class FaultQueue:
    """Thread-safe. Faults go only to simulated GPUs that exist; each is handed out once."""

    def __init__(self, store: NodeStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._faults: dict[str, list[SimFaultCommand]] = {}

    def request(self, node_name: str, cmd: SimFaultCommand) -> None:
        """Queue a simulated fault for the node's agent. Refused for nodes with real GPUs."""
        node = self.store.get_node(node_name)
        if node is None:
            raise NotFoundError("node", node_name)
        if node.backend != "simulated":
            raise ValidationError(
                "node",
                f"node {node_name} has real GPUs ({node.backend}); faults can only be injected into simulated GPUs",
            )
        if cmd.gpu_index not in {g.index for g in node.gpus}:
            raise ValidationError("gpu_index", f"node {node_name} has no GPU {cmd.gpu_index}")
        with self._lock:
            self._faults.setdefault(node_name, []).append(cmd)

    def take(self, node_name: str) -> list[SimFaultCommand]:
        """The node's queued faults, oldest first; they are gone from the queue."""
        with self._lock:
            return self._faults.pop(node_name, [])
