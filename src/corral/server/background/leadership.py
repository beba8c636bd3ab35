"""Which server replica leads (issue 17): several `corral server` processes share one database; the loops that
must run once in the cluster (the scheduler's plan applied, repeating jobs fired, alert rules evaluated) run on the
replica holding the leader lease (store/replicas.py), and another takes over within the lease's time to live when
the leader dies. Every replica heartbeats its row so `corral status` can list them.

A replica leads only while its last renewal is younger than the lease's time to live less a margin (`leading`):
a leader paused longer than that (a stopped VM, a long GC) stops acting before another replica may take over,
and a plan it computed before the pause meets the store's capacity re-check when it applies (the last guard).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from corral import __version__
from corral.server.background.loop import Loop
from corral.store.migrate import code_head
from corral.store.protocols import ReplicaStore
from corral.store.records import Lease, Replica

log = logging.getLogger("corral.leadership")
LEASE_TTL_S = 6.0  # another replica takes over at most this long after the leader's last renewal
RENEW_EVERY_S = 1.0
FORGET_REPLICAS_AFTER_S = 86400.0


def new_replica_id() -> str:
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Leadership(Loop):
    """Claims or renews the leader lease each `renew_s`, and heartbeats this replica. `on_change(leading)` runs on
    the loop's thread when this replica starts or stops leading."""

    def __init__(
        self,
        store: ReplicaStore,
        url: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        renew_s: float = RENEW_EVERY_S,
        on_change: Callable[[bool], None] | None = None,
        replica_id: str | None = None,
        solo: bool = False,
        candidate: bool = True,
    ) -> None:
        super().__init__("leadership", renew_s, log=log)
        self.store = store
        self.id = replica_id or new_replica_id()
        self.ttl_s = ttl_s
        self.on_change = on_change
        # One server by construction (SQLite: a file on one machine): it leads whatever the lease says, so that a
        # renewal held up by a busy database never pauses its scheduler; the lease and heartbeat only inform status.
        self.solo = solo
        # A replica that never claims the lease (it heartbeats, and reads who leads from the replicas): the
        # people's and agents' processes of a server of several, whose loops' process leads (server/workers.py).
        self.candidate = candidate
        now = datetime.now(UTC)
        self.replica = Replica(self.id, socket.gethostname(), url, __version__, now, now, code_head())
        self.lease: Lease | None = None
        self._renewed_at = float("-inf")  # monotonic time of our last successful renewal
        self._was_leading = False
        self._forgot_at = 0.0

    @property
    def leading(self) -> bool:
        """This replica holds the lease and renewed it recently enough to be sure no other has taken it."""
        if self.solo:
            return True
        lease = self.lease
        fresh = time.monotonic() - self._renewed_at < self.ttl_s * 0.8
        return lease is not None and lease.holder == self.id and fresh

    def claim(self) -> bool:
        """One claim or renewal now (also the first, before the loops start): whether this replica leads."""
        if not self.candidate:
            return False
        now = datetime.now(UTC)
        started = time.monotonic()
        self.lease = self.store.claim_lease(self.id, now, self.ttl_s)
        if self.lease.holder == self.id:
            self._renewed_at = started
        leading = self.leading
        if leading != self._was_leading:
            self._was_leading = leading
            if leading:
                log.warning("this replica (%s) leads now (lease epoch %d)", self.id, self.lease.epoch)
            else:
                log.warning("this replica (%s) no longer leads; %s does", self.id, self.lease.holder or "nobody")
            if self.on_change is not None:
                self.on_change(leading)
        return leading

    def run_pass(self) -> None:
        try:
            self.claim()
        finally:
            now = datetime.now(UTC)
            self.store.touch_replica(replace(self.replica, last_seen_at=now))
            if self.leading and time.monotonic() - self._forgot_at > 3600:
                self._forgot_at = time.monotonic()
                self.store.forget_replicas(now - timedelta(seconds=FORGET_REPLICAS_AFTER_S))

    def on_stop(self) -> None:
        """A clean stop gives the lease up at once: another replica leads at its next renewal, not after the TTL."""
        if self.lease is not None and self.lease.holder == self.id:
            self.store.release_lease(self.id, datetime.now(UTC))
            self._was_leading = False
