"""SQLite's one writer, queued in this process: a write transaction waits for the gate before its first write
statement, and opens it again when its connection goes back to the pool (after its commit or rollback).

SQLite lets one connection write at a time; the others wait in its busy handler, which polls with sleeps of up to
100 ms. With many request threads and the server's loops writing at once, a waiter slept on long after the lock
was free while it held what it had taken before (the read-modify-write lock, a request's thread), and a burst of
submissions queued behind those sleeps. The gate is a lock of this process's: the next writer wakes as soon as
the last one is done, in turn. SQLite's own locking still decides what is correct (another process, a write the
gate does not recognise, a second connection of one thread); the gate only orders this process's writers.

The driver (pysqlite) issues its BEGIN just before a transaction's first INSERT, UPDATE or DELETE, inside the
same execute call, so the gate is held before SQLite's write lock is asked for.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

log = logging.getLogger("corral.store")
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")  # REPLACE; what else writes goes through SQLite's busy handler
_HELD = "corral_write_gate"
WAIT_S = 10.0  # as the connections' busy_timeout: past it a writer goes on without the gate (SQLite decides)


class WriteGate:
    """Taken by a connection at its first write statement and opened at its check-in (or invalidation). Re-entrant
    per thread: a thread writing through a second connection while its first holds the gate is not stopped here
    (SQLite's busy handler decides, as before the gate). Opening it wakes the longest waiter."""

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._wait_s = wait_s

    def attach(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before_execute)
        event.listen(engine.pool, "checkin", self._on_done)
        event.listen(engine.pool, "invalidate", self._on_invalidate)

    def acquire(self) -> bool:
        """Whether this thread now holds the gate (False: waited `wait_s` in vain; the caller goes on without)."""
        me = threading.get_ident()
        deadline = time.monotonic() + self._wait_s
        with self._cond:
            while self._owner not in (None, me):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("SQLite write gate: waited %.0f s, writing without it", self._wait_s)
                    return False
                self._cond.wait(left)
            self._owner = me
            self._depth += 1
            return True

    def release(self, owner: int) -> None:
        with self._cond:
            if self._owner != owner:
                return
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify()

    @property
    def held(self) -> bool:
        return self._owner is not None

    def _before_execute(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        info = conn.info
        if _HELD in info or not statement.lstrip()[:6].upper().startswith(_WRITES):
            return
        if self.acquire():
            info[_HELD] = threading.get_ident()

    def _on_done(self, _dbapi_conn: Any, record: Any) -> None:
        owner = record.info.pop(_HELD, None) if record is not None else None
        if owner is not None:
            self.release(owner)

    def _on_invalidate(self, dbapi_conn: Any, record: Any, _exc: Any) -> None:
        self._on_done(dbapi_conn, record)
