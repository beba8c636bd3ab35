"""ShimExitWatch: tells the agent the moment a job's shim ends, instead of leaving it to the next poll.

One thread blocks in epoll over a pidfd per shim. A pidfd is readable once its process has ended, whether that
process is this agent's child or a shim adopted from an earlier agent (which no waitpid could see), so every
running job is watched alike. Where pidfds are missing (not Linux, or a kernel before 5.3) the watch holds
nothing and the agent's poll alone notices exits, as before.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger("corral.executors")


class ShimExitWatch:
    """Calls `on_exit()` (from its own thread) soon after any watched process ends; it then forgets that process.
    The call says only that something ended: the caller reads what (exit files, reaping) itself. Thread-safe."""

    def __init__(self, on_exit: Callable[[], None]) -> None:
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}  # pidfd -> pid
        self._closed = False
        self._epoll: select.epoll | None = None
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    @staticmethod
    def supported() -> bool:
        return hasattr(os, "pidfd_open") and hasattr(select, "epoll")

    def watch(self, pid: int, still_ours: Callable[[], bool] = lambda: True) -> bool:
        """Watch `pid`; whether it is watched. `still_ours` is checked once the pidfd is open: a pid already
        reused by another process (the shim ended long ago) must not be watched in its place."""
        if not self.supported():
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already (the caller's next look finds its exit), or no pidfds on this kernel
            return False
        if not still_ours():
            os.close(fd)
            return False
        with self._lock:
            if self._closed:
                os.close(fd)
                return False
            epoll = self._start()
            self._fds[fd] = pid
            epoll.register(fd, select.EPOLLIN)  # thread-safe: the watch thread's epoll_wait sees it at once
        return True

    def close(self) -> None:
        """Stop the thread and drop every pidfd (the processes are not touched)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                os.write(self._wake_w, b"x")
        if thread is not None:
            thread.join(timeout=5)

    def _start(self) -> select.epoll:
        """The epoll and its thread, made when the first process is watched (under self._lock); the thread ends
        once it watches nothing (no thread lingers on an idle node, or behind an executor never closed)."""
        if self._epoll is None:
            self._epoll = select.epoll()
            self._wake_r, self._wake_w = os.pipe()
            self._epoll.register(self._wake_r, select.EPOLLIN)
            self._thread = threading.Thread(
                target=self._run, args=(self._epoll, self._wake_r, self._wake_w), name="corral-exit-watch", daemon=True
            )
            self._thread.start()
        return self._epoll

    def _run(self, epoll: select.epoll, wake_r: int, wake_w: int) -> None:
        done = False
        while not done:
            events = epoll.poll()
            with self._lock:
                ended = [fd for fd, _ in events if fd in self._fds]
                for fd in ended:
                    epoll.unregister(fd)
                    os.close(fd)
                    del self._fds[fd]
                closed = self._closed
                done = closed or not self._fds
                if done:  # a later watch() starts afresh
                    for fd in self._fds:
                        os.close(fd)
                    self._fds.clear()
                    self._epoll, self._thread = None, None
            if ended and not closed:
                try:
                    self._on_exit()
                except Exception:  # the watch must outlive a listener's bug; the poll still notices exits
                    log.exception("exit listener failed")
        epoll.close()
        os.close(wake_r)
        os.close(wake_w)
