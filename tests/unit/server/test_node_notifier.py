"""The scheduler's wake-up reaches an agent's long poll waiting in another event loop (the agents' listener)."""

from __future__ import annotations

import asyncio
import threading

from corral.server.services.notify import NodeNotifier


def test_a_notification_from_another_thread_wakes_a_waiter_in_its_own_loop() -> None:
    notifier = NodeNotifier()
    api_loop = asyncio.new_event_loop()  # the API server's loop, as bound by the app's lifespan
    notifier.bind(api_loop)
    woke = threading.Event()
    waiting = threading.Event()

    def agent_listener() -> None:  # a long poll of 60 s on the agents' listener loop
        async def poll() -> None:
            waiting.set()
            await notifier.wait("n1", 60.0)
            woke.set()

        asyncio.run(poll())

    t = threading.Thread(target=agent_listener, daemon=True)
    t.start()
    assert waiting.wait(10)
    # notify until the waiter has registered and woken; a waiter that missed a cross-loop set would sleep 60 s
    for _ in range(200):
        notifier.notify("n1")
        if woke.wait(0.05):
            break
    assert woke.is_set(), "the long poll was not woken by a notification from another thread"
    notifier.notify("other-node")  # other nodes' waiters are untouched and nothing fails
    t.join(10)
    api_loop.close()
