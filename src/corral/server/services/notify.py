"""Wake-ups between threads: the scheduler tells long-polling agents that work is waiting."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict


class NodeNotifier:
    """Per-node asyncio events, set from any thread, awaited in the server's event loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, node: str) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._events[node].set)

    async def wait(self, node: str, timeout_s: float) -> None:
        event = self._events[node]
        if timeout_s > 0:
            try:
                await asyncio.wait_for(event.wait(), timeout_s)
            except TimeoutError:
                pass
        event.clear()


class Trigger:
    """A level-triggered wake-up for the scheduler thread."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def fire(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        fired = self._event.wait(timeout_s)
        self._event.clear()
        return fired
