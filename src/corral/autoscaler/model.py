"""What the autoscaler reads and decides (pure values): the nodes cloud pools started, the pending demand as the
scheduler's own code sees it, and the actions a policy returns (Launch, Release).

A policy module is any importable module with `decide(state: AutoscaleState) -> list[Launch | Release]`
(docs/elastic.md has an example); corral.autoscaler.policy.decide is the built-in one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from corral.core.pools import (
    DRAINING,
    FAILED,
    LAUNCHING,
    LIVE_STATES,
    RELEASED,
    RUNNING,
    STATES,
    InstanceType,
    PoolNode,
    PoolSpec,
)
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState


@dataclass(frozen=True, slots=True)
class Demand:
    """A pending job that no existing node can take now, and the instance types one of its parts would fit on
    (`fits`: (pool, type name), judged by the scheduler's placement engine on an empty node of that type)."""

    job_id: str
    tenant: str
    request: ResourceRequest
    parts: int = 1  # a gang: this many nodes at once
    position: int = 0  # its rank in the queue (lower goes first)
    fits: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        return self.request.gpus * self.parts


@dataclass(frozen=True, slots=True)
class AutoscaleState:
    """Everything a policy decides from. `free`: the existing nodes with what is left on them after this
    cycle's plan (and after the demand that fits them); `wanted`: the nodes a waiting job fits; `backoff`: (pool, type) -> epoch seconds before which
    that type is not launched again (failed launches); `no_burst`: tenants whose jobs start no new node."""

    now_s: float
    pools: tuple[PoolSpec, ...]
    nodes: tuple[PoolNode, ...]
    demand: tuple[Demand, ...]
    free: tuple[NodeState, ...] = ()
    backoff: Mapping[tuple[str, str], float] = field(default_factory=dict)
    no_burst: frozenset[str] = frozenset()
    wanted: frozenset[str] = frozenset()  # existing nodes a waiting job fits (or was just placed on): not idle

    @property
    def now(self) -> datetime:
        """The decision's time as an aware UTC datetime (for policies that look at the weekday or hour)."""
        return datetime.fromtimestamp(self.now_s, UTC)

    def pool(self, name: str) -> PoolSpec | None:
        return next((p for p in self.pools if p.name == name), None)

    def live_nodes(self, pool: str) -> list[PoolNode]:
        return [n for n in self.nodes if n.pool == pool and n.live]

    def only_tenants(self, tenants: Sequence[str]) -> AutoscaleState:
        """The same state with only these tenants' demand (a policy that bursts for some tenants only)."""
        keep = set(tenants)
        return replace(self, demand=tuple(d for d in self.demand if d.tenant in keep))

    def only_pools(self, pools: Sequence[str]) -> AutoscaleState:
        keep = set(pools)
        return replace(
            self,
            pools=tuple(p for p in self.pools if p.name in keep),
            demand=tuple(replace(d, fits=tuple(f for f in d.fits if f[0] in keep)) for d in self.demand),
        )


@dataclass(frozen=True, slots=True)
class Launch:
    """Start one node of `instance_type` in `pool`, for these jobs (`reason`: one sentence for the events)."""

    pool: str
    instance_type: str
    reason: str
    job_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Release:
    """Drain `node` of `pool` and give it back (`reason`: one sentence)."""

    pool: str
    node: str
    reason: str


Action = Launch | Release


def find_type(pools: Sequence[PoolSpec], pool: str, name: str) -> InstanceType | None:
    spec = next((p for p in pools if p.name == pool), None)
    return spec.instance_type(name) if spec is not None else None


__all__ = [
    "DRAINING",
    "FAILED",
    "LAUNCHING",
    "LIVE_STATES",
    "RELEASED",
    "RUNNING",
    "STATES",
    "Action",
    "AutoscaleState",
    "Demand",
    "Launch",
    "PoolNode",
    "Release",
    "find_type",
]
