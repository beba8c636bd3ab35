"""The passive half of the autoscaler (pure): reflect what was observed onto the pool nodes.

Observed, per pool node: whether its agent registered (and is READY or LOST), the provider's view of its
instance, how many jobs it holds and how busy its GPUs were. Out: each node's changes (joined, idle since,
failed, lost, released) and what must be terminated. Valid moves (model.py):

    launching -> running    its agent registered and is READY
    launching -> failed     not joined within the pool's join timeout, or its instance is gone
    running   -> released   its node was lost (no heartbeat) or its instance is gone
    running   -> draining   a spot interruption notice: its jobs are requeued keeping their place
    running   -> draining   (the policy released it: the loop does that, not here)
    draining  -> released   no job left on it (or its node was lost, or its instance is gone)

Failed launches back off per (pool, instance type): after n failures in a row, BACKOFF_BASE_S * 2^(n-1) seconds,
at most BACKOFF_MAX_S; a node that joins resets the count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from corral.autoscaler.model import DRAINING, FAILED, LAUNCHING, RELEASED, RUNNING, PoolNode
from corral.core.pools import INSTANCE_GONE, PoolSpec

BACKOFF_BASE_S = 30.0
BACKOFF_MAX_S = 1800.0
GONE_GRACE_S = 60.0  # a provider may not list an instance for this long after its launch (eventual consistency)
BUSY_UTIL_PCT = 5.0  # GPUs more busy than this (the highest over the node's GPUs) keep a node from being idle


@dataclass(frozen=True, slots=True)
class Observed:
    """What was seen of one pool node this pass. `registered`: its node's state ("READY", "LOST") or None when its
    agent never registered; `instance`: the provider's state of its instance (core/pools.py INSTANCE_*), None when
    the provider does not list it; `interruption_s`: seconds left of a spot interruption notice; `gpu_util`:
    the highest recent utilisation over its GPUs (percent; None when no sample yet)."""

    registered: str | None = None
    instance: str | None = None
    interruption_s: float | None = None
    jobs: int = 0
    gpu_util: float | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """The node as it is now, whether its instance must be terminated, and an event to record (kind, message)."""

    node: PoolNode
    terminate: bool = False
    event: tuple[str, str] | None = None
    interrupted: bool = False  # a spot interruption notice came: its jobs are requeued, it drains


def compute_changes(
    nodes: Sequence[PoolNode],
    observed: Mapping[str, Observed],
    pools: Mapping[str, PoolSpec],
    now_s: float,
) -> list[Change]:
    """One Change per live node whose record changes (nodes that did not change are left out)."""
    out: list[Change] = []
    for node in nodes:
        if not node.live:
            continue
        seen = observed.get(node.name, Observed())
        change = _change(node, seen, pools.get(node.pool), now_s)
        if change is not None:
            out.append(change)
    return out


def _gone(node: PoolNode, seen: Observed, now_s: float) -> bool:
    if seen.instance is not None:
        return seen.instance == INSTANCE_GONE
    return now_s - node.launched_s > GONE_GRACE_S and bool(node.provider_id)


def _change(node: PoolNode, seen: Observed, spec: PoolSpec | None, now_s: float) -> Change | None:
    n = replace(node, jobs=seen.jobs)
    if node.state == LAUNCHING:
        if seen.registered == "READY":
            n = replace(n, state=RUNNING, joined_s=now_s, idle_since_s=None if seen.jobs else now_s)
            return Change(n, event=("joined", f"joined {now_s - node.launched_s:.1f} s after its launch"))
        timeout = spec.join_timeout_s if spec is not None else 600.0
        if now_s - node.launched_s > timeout:
            why = f"did not join within {timeout:g} s of its launch"
            return Change(replace(n, state=FAILED, ended_s=now_s, reason=why), True, ("launch-failed", why))
        if _gone(node, seen, now_s) and seen.instance is not None:
            why = "its instance was gone before it joined"
            return Change(replace(n, state=FAILED, ended_s=now_s, reason=why), True, ("launch-failed", why))
        return None
    lost = seen.registered == "LOST"
    gone = _gone(node, seen, now_s)
    if lost or gone:
        why = "its node was lost (no heartbeat)" if lost else "its instance is gone"
        return Change(replace(n, state=RELEASED, ended_s=now_s, reason=why), True, ("lost", why))
    if seen.interruption_s is not None and node.notice_at_s is None:
        left = max(seen.interruption_s, 0.0)
        why = f"spot interruption notice: its provider takes it back in {left:.0f} s"
        n = replace(n, state=DRAINING, notice_at_s=now_s + left, reason=why, idle_since_s=None)
        return Change(n, event=("interrupted", why + "; its jobs are requeued keeping their place"), interrupted=True)
    if node.state == DRAINING:
        if seen.jobs == 0:
            return Change(replace(n, state=RELEASED, ended_s=now_s), True, ("released", node.reason or "released"))
        return Change(n) if n != node else None
    busy = seen.jobs > 0 or (seen.gpu_util is not None and seen.gpu_util > BUSY_UTIL_PCT)
    idle_since = None if busy else (node.idle_since_s if node.idle_since_s is not None else now_s)
    n = replace(n, idle_since_s=idle_since)
    return Change(n) if n != node else None


def compute_backoff(history: Sequence[PoolNode], now_s: float) -> dict[tuple[str, str], float]:
    """(pool, type) -> epoch seconds before which it is not launched again: failures in a row since the last
    node of that type that joined, newest last."""
    streak: dict[tuple[str, str], tuple[int, float]] = {}
    for node in sorted(history, key=lambda n: n.launched_s):
        key = (node.pool, node.instance_type)
        if node.state == FAILED:
            count, _ = streak.get(key, (0, 0.0))
            streak[key] = (count + 1, node.ended_s or node.launched_s)
        elif node.joined_s is not None:
            streak.pop(key, None)
    out: dict[tuple[str, str], float] = {}
    for key, (count, last) in streak.items():
        until = last + min(BACKOFF_BASE_S * 2 ** (count - 1), BACKOFF_MAX_S)
        if until > now_s:
            out[key] = until
    return out


__all__ = ["BUSY_UTIL_PCT", "Change", "Observed", "compute_backoff", "compute_changes"]
