"""The provider protocol: what the autoscaler may assume of a cloud (after Ray autoscaler v2's contract).

- `launch` is idempotent by the node's name (the request id): launching a name that already has a live
  instance returns that instance's id and starts nothing more.
- What a provider says is eventually consistent: `list_instances` may not show an instance launched a moment
  ago, and may show one terminated a moment ago as still there; the autoscaler reconciles on every pass.
- `terminate` is idempotent: an id that is gone already is not an error.
- A failure to launch raises ProviderError (the autoscaler counts it as a failed launch of that instance type
  and backs off); a node that launched but never joins is caught by the join timeout instead.
- Calls may take seconds (a cloud's API): the autoscaler makes them outside any store transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from corral.core.pools import INSTANCE_GONE, INSTANCE_PENDING, INSTANCE_RUNNING, INSTANCE_STOPPING, InstanceType

# Instance states a provider reports (core/pools.py: each provider maps its own onto these).
PENDING = INSTANCE_PENDING
RUNNING = INSTANCE_RUNNING
STOPPING = INSTANCE_STOPPING
GONE = INSTANCE_GONE


class ProviderError(Exception):
    """A provider could not do what it was asked (bad settings, no capacity, an API error): one line why."""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One node to start. The machine runs `corral agent --join join_url --token-file ... --node-name node_name`
    with `join_token` (a one-time token bound to this node name, expiring with the join timeout)."""

    pool: str
    node_name: str
    instance_type: InstanceType
    join_url: str
    join_token: str
    tags: Mapping[str, str] = field(default_factory=dict)  # tags the instance carries (corral-pool, corral-node)


@dataclass(frozen=True, slots=True)
class Instance:
    """A machine as the provider sees it. `interruption_s`: seconds left before the provider takes a spot
    instance back (a notice was given), else None."""

    provider_id: str
    node_name: str
    state: str
    instance_type: str = ""
    spot: bool = False
    interruption_s: float | None = None


@runtime_checkable
class Provider(Protocol):
    """One pool's provider, made for that pool (its region and settings) by corral.cloud.registry."""

    name: str

    def launch(self, request: LaunchRequest) -> str:
        """Start one machine for `request.node_name` (idempotent by that name); returns its provider id."""
        ...

    def terminate(self, provider_id: str) -> None:
        """Stop and delete the machine (idempotent)."""
        ...

    def list_instances(self) -> list[Instance]:
        """Every machine of this pool the provider knows, terminated ones possibly included (state GONE)."""
        ...


TAG_POOL = "corral-pool"
TAG_NODE = "corral-node"
TAG_CLUSTER = "corral-cluster"


def compute_tags(pool: str, node_name: str, cluster: str = "corral") -> dict[str, str]:
    """The tags every provider puts on what it starts: a restarted server finds its machines by them."""
    return {TAG_CLUSTER: cluster, TAG_POOL: pool, TAG_NODE: node_name}


__all__ = [
    "GONE",
    "PENDING",
    "RUNNING",
    "STOPPING",
    "TAG_NODE",
    "TAG_POOL",
    "Instance",
    "LaunchRequest",
    "Provider",
    "ProviderError",
    "compute_tags",
]
