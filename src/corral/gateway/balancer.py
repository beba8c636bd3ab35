"""Which ready replica takes a request: the one with the fewest outstanding requests at this gateway, ties broken
round-robin (so idle replicas share evenly). Pure: no I/O, no clock; the gateway's event loop owns it."""

from __future__ import annotations

from collections.abc import Sequence

from corral.gateway.model import Endpoint


class Balancer:
    def __init__(self) -> None:
        self._outstanding: dict[tuple[int, int], int] = {}  # by Endpoint.key; absent = 0
        self._turn: dict[int, int] = {}  # by service id: where the next tie-break starts

    def select_endpoint(
        self, service_id: int, ready: Sequence[Endpoint], exclude: Endpoint | None = None
    ) -> Endpoint | None:
        """The endpoint among `ready` (all of one service) with the fewest outstanding requests, `exclude` left
        out (the one a retry failed on); None when there is none. Ties go round-robin from the service's turn."""
        n = len(ready)
        if n == 0:
            return None
        start = self._turn.get(service_id, 0) % n
        self._turn[service_id] = start + 1
        best: Endpoint | None = None
        best_load = 0
        for i in range(n):
            candidate = ready[(start + i) % n]
            if exclude is not None and candidate.key == exclude.key:
                continue
            load = self._outstanding.get(candidate.key, 0)
            if best is None or load < best_load:
                best, best_load = candidate, load
                if load == 0:
                    break  # nothing beats an idle replica
        return best

    def acquire(self, endpoint: Endpoint) -> None:
        key = endpoint.key
        self._outstanding[key] = self._outstanding.get(key, 0) + 1

    def release(self, endpoint: Endpoint) -> None:
        key = endpoint.key
        left = self._outstanding.get(key, 0) - 1
        if left > 0:
            self._outstanding[key] = left
        else:
            self._outstanding.pop(key, None)  # an endpoint that left the routes leaves nothing behind

    def outstanding(self, endpoint: Endpoint) -> int:
        return self._outstanding.get(endpoint.key, 0)
