"""Which threads an agent's request's blocking work runs on. Each port's server runs its own event loop, and anyio
gives each loop a pool of 40 threads; every thread of the process takes turns on one Python interpreter.

- `on_node_thread`: a node's syncs and telemetry batches (CPU-bound database work, ~200 a second from 1,000 agents)
  run on a pool of CORRAL_AGENT_THREADS (8) threads of their own: queued for 8 threads they did more work a second
  than taking turns on 40. The loop's default pool is left to the rest (joins, identity checks, registration), so
  requests that have not shown a node's certificate, or that wait on a lock (a forged join reaching the SQLite write
  gate), can never take the agents' threads.
- With so few threads, nothing may wait on a lock while holding one: a node's work runs one piece at a time (its
  other requests wait on the event loop: a node sending many requests at once, hostile or confused, holds one
  thread; a node's reports are applied in order under a lock), and log uploads (appends take one lock for every
  job, and an fsync) run on a pool of their own, one upload per node at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from anyio.lowlevel import RunVar

T = TypeVar("T")

LOG_THREADS = 40  # anyio's default pool size: what log appends had before agents got a pool of their own

_node_gates: RunVar[dict[str, asyncio.Lock]] = RunVar("corral_node_gates")
_log_gates: RunVar[dict[str, asyncio.Lock]] = RunVar("corral_log_gates")  # apart: a sync never waits on an fsync
_agent_threads: RunVar[CapacityLimiter] = RunVar("corral_agent_threads")
_log_threads: RunVar[CapacityLimiter] = RunVar("corral_log_threads")


def _pool(var: RunVar[CapacityLimiter], size: int) -> CapacityLimiter:
    """The running loop's pool kept in `var`, of `size` threads."""
    try:
        limiter = var.get()
    except LookupError:
        limiter = CapacityLimiter(size)
        var.set(limiter)
    if limiter.total_tokens != size:
        limiter.total_tokens = size
    return limiter


async def _gated(
    gates_var: RunVar[dict[str, asyncio.Lock]], node: str, limiter: CapacityLimiter, fn: Callable[..., T], *args: Any
) -> T:
    """`fn(*args)` on `limiter`'s threads, after the node's earlier work there has finished (nodes are the
    certificates' names, checked before: one lock per real node)."""
    try:
        gates = gates_var.get()
    except LookupError:
        gates = {}
        gates_var.set(gates)
    gate = gates.get(node)
    if gate is None:
        gate = gates[node] = asyncio.Lock()
    async with gate:
        return await anyio.to_thread.run_sync(partial(fn, *args), limiter=limiter)


async def on_node_thread(node: str, threads: int, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the agents' pool of `threads` (CORRAL_AGENT_THREADS), one piece of the node's work at a time."""
    return await _gated(_node_gates, node, _pool(_agent_threads, threads), fn, *args)


async def on_log_thread(node: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the log uploads' pool (LOG_THREADS), one of the node's uploads at a time (apart from its syncs
    and telemetry, which never wait on an append)."""
    return await _gated(_log_gates, node, _pool(_log_threads, LOG_THREADS), fn, *args)
