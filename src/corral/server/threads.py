"""Which threads a request's blocking work runs on. Each port's server runs its own event loop, and anyio gives
each loop a pool of 40 threads by default; all of them take turns on one Python interpreter.

- `ThreadBudget`: the agent port's pool is CORRAL_AGENT_THREADS (8): a thousand agents' syncs and telemetry batches,
  CPU-bound in one interpreter, did more work a second queued for 8 threads than taking turns on 40.
- With so few threads, nothing may wait for a lock while holding one: `on_node_thread` runs one node's work one
  piece at a time, the others waiting on the event loop (a node's reports are applied in order under a lock; a node
  sending many requests at once would otherwise fill the pool with threads waiting on it, and every other agent
  would wait behind them), and `on_log_thread` runs log appends (a lock shared by every job, and an fsync) on a pool
  of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from anyio.lowlevel import RunVar

from corral.server.inputs import ASGIApp, Receive, Scope, Send

T = TypeVar("T")

LOG_THREADS = 40  # anyio's default pool size: what log appends had before the agent port's budget

_node_gates: RunVar[dict[str, asyncio.Lock]] = RunVar("corral_node_gates")
_log_threads: RunVar[CapacityLimiter] = RunVar("corral_log_threads")


class ThreadBudget:
    """Caps the threads the requests of one listener (its own event loop) run their blocking work on at once."""

    def __init__(self, app: ASGIApp, threads: int) -> None:
        self.app = app
        self.threads = threads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        if limiter.total_tokens != self.threads:  # once per loop (a test client's loop, the port's)
            limiter.total_tokens = self.threads
        await self.app(scope, receive, send)


async def on_node_thread(node: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the loop's thread pool, after the node's earlier work there has finished: a node holds at
    most one thread of the pool at a time (nodes are the certificates' names: one lock per real node)."""
    try:
        gates = _node_gates.get()
    except LookupError:
        gates = {}
        _node_gates.set(gates)
    gate = gates.get(node)
    if gate is None:
        gate = gates[node] = asyncio.Lock()
    async with gate:
        return await anyio.to_thread.run_sync(partial(fn, *args))


async def on_log_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the loop's pool for log appends (LOG_THREADS), not on the port's budget."""
    try:
        limiter = _log_threads.get()
    except LookupError:
        limiter = CapacityLimiter(LOG_THREADS)
        _log_threads.set(limiter)
    return await anyio.to_thread.run_sync(partial(fn, *args), limiter=limiter)
