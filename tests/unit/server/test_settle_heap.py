"""A server process settles its heap once started (server/runtime.settle_heap): what it made to start is frozen out
of the collector's reach and young collections are spaced further apart, so full collections no longer hold the
interpreter for tenths of a second under load. What is made afterwards is still collected, cycles included (a server
that runs for months must not leak them). Run in a fresh interpreter: freezing the test process's heap would change
the collector for every test after this one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, json
    from corral.server.runtime import GC_YOUNG_THRESHOLD, settle_heap

    started = [object() for _ in range(1000)]  # what a server made to start
    settle_heap()
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()

    class Node:
        pass

    def cycles(n):
        for _ in range(n):
            a, b = Node(), Node()
            a.peer, b.peer = b, a

    cycles(5000)
    collected = gc.collect()
    print(json.dumps({"frozen": frozen, "young": threshold[0], "expected": GC_YOUNG_THRESHOLD, "collected": collected,
                      "started_alive": len(started)}))
    """
)


def test_a_settled_heap_freezes_what_started_and_still_collects_what_came_after() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["frozen"] >= 1000  # the objects made before it (and the interpreter's own) left the collector's reach
    assert got["young"] == got["expected"] > 700  # young collections further apart than CPython's default
    assert got["collected"] >= 10_000  # 5,000 cycles of two made after it: still found and freed
    assert got["started_alive"] == 1000
