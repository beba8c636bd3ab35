"""The common shape of a background loop: its own daemon thread running one pass at a time, a wait between passes
that `trigger` cuts short, a failed pass logged and retried at the next one, and a clean stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from corral.server.services.notify import Trigger


class Loop:
    """Subclasses implement `run_pass`; the owner calls start() once and stop() once.

    Between passes the loop waits `interval_s`, or less when run_pass returns a shorter wait (the next due time),
    or until `trigger.fire()` (from any thread; level-triggered: fires during a pass are not lost). A pass that
    raises is logged with its traceback and the loop carries on; `failed_passes` counts them. With `delay_first`
    the first pass comes after one wait instead of at once.

    `rest_ratio` > 0: after a pass that took t seconds (wall), the next one starts no sooner than
    min(t * rest_ratio, max_rest_s) later, however often it is triggered. A loop whose passes are cheap (an idle
    server: milliseconds) is not slowed; one whose passes grew long (a busy server, where the wall time is also
    the time others waited for the interpreter) takes at most 1 / (1 + rest_ratio) of the time, and each pass
    then handles more of what came in.
    """

    def __init__(
        self,
        name: str,
        interval_s: float,
        *,
        trigger: Trigger | None = None,
        delay_first: bool = False,
        log: logging.Logger | None = None,
        rest_ratio: float = 0.0,
        max_rest_s: float = 1.0,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.trigger = trigger or Trigger()
        self.delay_first = delay_first
        self.rest_ratio = rest_ratio
        self.max_rest_s = max_rest_s
        self.log = log or logging.getLogger(f"corral.{name}")
        self.passes = 0
        self.failed_passes = 0
        # Loops that must run once in a cluster of server replicas run their passes only while this returns True
        # (the leader: server/background/leadership.py); the others wait, asking again each interval.
        self.gate: Callable[[], bool] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_pass(self) -> float | None:
        """One pass. Returns the seconds to wait before the next (None: `interval_s`). May raise: logged."""
        raise NotImplementedError

    def on_stop(self) -> None:
        """Runs once on stop(), after the thread ended (e.g. save what is held in memory). May raise: logged."""

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"loop {self.name} was started already")
        self._thread = threading.Thread(target=self._run, name=f"corral-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to end, wait up to `timeout_s` for the pass under way, then run on_stop. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.trigger.fire()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        try:
            self.on_stop()
        except Exception:  # stopping must finish; what on_stop could not do is lost, and said so
            self.log.exception("%s: stop failed", self.name)

    def wake(self) -> None:
        """A pass soon (same as trigger.fire())."""
        self.trigger.fire()

    def _run(self) -> None:
        if self.delay_first:
            self.trigger.wait(self.interval_s)
        while not self._stop.is_set():
            wait_s = self.interval_s
            if self.gate is not None and not self.gate():
                self.trigger.wait(wait_s)
                continue
            started = time.monotonic()
            try:
                next_s = self.run_pass()
                if next_s is not None:
                    wait_s = min(max(next_s, 0.0), self.interval_s)
            except Exception:  # a failed pass is logged and retried; the loop must survive
                self.failed_passes += 1
                self.log.exception("%s pass failed", self.name)
            self.passes += 1
            rest_s = min((time.monotonic() - started) * self.rest_ratio, self.max_rest_s, wait_s)
            if rest_s > 0 and self._stop.wait(rest_s):
                break
            if self._stop.is_set():
                break
            self.trigger.wait(wait_s - rest_s)
