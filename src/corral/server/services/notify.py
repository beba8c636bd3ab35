"""Wake-ups between threads: the scheduler tells long-polling agents that work is waiting."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class NodeNotifier:
    """Per-node wake-ups, set from any thread, awaited in any event loop. The agents' listener runs its own loop
    (server/runtime.py), so each waiter's event belongs to the loop it waits in, and a notification is handed to
    that loop with call_soon_threadsafe: setting an asyncio.Event from another loop's thread would not wake it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, asyncio.AbstractEventLoop], asyncio.Event] = {}
        # called with the node on every notify (the cluster bridge: its nodes have no agent to wake)
        self.listeners: list[Callable[[str], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Kept for callers that announce their loop; waiters register their own."""

    def notify(self, node: str) -> None:
        with self._lock:
            targets = [(loop, event) for (n, loop), event in self._events.items() if n == node]
        for loop, event in targets:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)
        for listener in self.listeners:
            listener(node)

    async def wait(self, node: str, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            event = self._events.setdefault((node, loop), asyncio.Event())
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
        # also wakes another process's scheduler: the loops' process of a server of several (server/workers.py)
        self.forward: Callable[[], None] | None = None

    def fire(self) -> None:
        self._event.set()
        if self.forward is not None:
            self.forward()

    def wait(self, timeout_s: float) -> bool:
        fired = self._event.wait(timeout_s)
        self._event.clear()
        return fired
