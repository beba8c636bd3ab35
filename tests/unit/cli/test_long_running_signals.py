"""Ctrl-C stops `corral up`, `corral server` and `corral agent` whenever it lands. Python's own KeyboardInterrupt is
lost when it is raised inside a weakref callback or a garbage collection: `corral up` once ignored a Ctrl-C sent
while `settle_heap` ran its full collection and never stopped (CI, 2026-11-29). The long-running commands take the
signal as an event instead, set before they start anything."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A SIGINT that lands inside a weakref callback, as it does when it comes during a collection.
_PROBE = textwrap.dedent(
    """
    import os, signal, sys, weakref

    class Thing:
        pass

    def send_ctrl_c(_ref):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here, inside the callback
            pass

    stop = None
    if sys.argv[1] == "event":
        from corral.cli.run import _stop_on_signal
        stop = _stop_on_signal()
    thing = Thing()
    ref = weakref.ref(thing, send_ctrl_c)
    try:
        del thing
        for _ in range(1000):
            pass
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(0)
    print("stop set" if stop is not None and stop.is_set() else "lost")
    """
)


def _run(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_commands_signal_event_keeps_a_ctrl_c_that_lands_in_a_weakref_callback() -> None:
    assert _run("event") == "stop set"


def test_every_long_running_command_takes_signals_before_it_starts_anything() -> None:
    """`_stop_on_signal` comes before the first start in `up`, `server` and `agent`."""
    import inspect

    from corral.cli import run

    for command, first_start in (
        (run.up, "server.start("),
        (run.server, "srv.start("),
        (run.agent, "thread.start("),
    ):
        source = inspect.getsource(command)
        assert "_stop_on_signal()" in source, command.__name__
        assert source.index("_stop_on_signal()") < source.index(first_start), command.__name__


def test_a_signal_while_a_listener_starts_ends_the_wait_at_once() -> None:
    """A Ctrl-C while a port is still coming up (its start can take up to 30 s) stops the start now, not then."""
    import threading
    import time
    from types import SimpleNamespace

    from corral.server.runtime import ServerThread

    never = threading.Event()
    thread = threading.Thread(target=never.wait, daemon=True)
    thread.start()
    listener = SimpleNamespace(server=SimpleNamespace(started=False), thread=thread, failure="")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    began = time.monotonic()
    try:
        ServerThread._wait(listener, 30.0, stop)  # type: ignore[arg-type]
    except RuntimeError as e:
        assert "stopped while starting" in str(e)
    else:
        raise AssertionError("the wait ended without the signal's error")
    finally:
        never.set()
    assert time.monotonic() - began < 10  # not the 30 s start timeout
