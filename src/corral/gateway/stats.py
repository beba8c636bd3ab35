"""Per-service traffic counters that the controller (the autoscaler) reads, and pure helpers over their histograms.

The gateway's event loop writes them; `snapshot()` may be called from any thread. Counters are cumulative since
the gateway started: a reader keeps its previous snapshot and takes differences (`histogram_delta`)."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# Upper bounds (ms, inclusive) of the latency buckets; the last one catches everything.
BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, math.inf)
Histogram = tuple[int, ...]  # counts per bucket of BUCKETS_MS (not cumulative)


@dataclass(frozen=True, slots=True)
class TrafficStats:
    service_id: int
    requests: int  # every request for the service (WebSockets included), answered or not
    errors: int  # responses >= 500, the gateway's own (shed included) or a replica's, and failed responses
    shed: int  # 503s for the queue limit
    outstanding: int  # forwarded to a replica now, waiting for or reading its answer (WebSockets not counted)
    waiting: int  # buffered now for a replica to be ready (scale from zero)
    latency_ms: Histogram  # to the end of the body; for event streams, to the first byte
    last_request_at: float | None  # wall clock
    # `outstanding` by replica job (those with any): a draining replica is stopped once none is left at any gateway
    outstanding_by_job: Mapping[int, int] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        """What the queue limit counts."""
        return self.outstanding + self.waiting


class _Counters:
    __slots__ = ("requests", "errors", "shed", "outstanding", "by_job", "waiting", "latency", "last_request_at")

    def __init__(self) -> None:
        self.requests = self.errors = self.shed = self.outstanding = self.waiting = 0
        self.by_job: dict[int, int] = {}  # outstanding by replica job; absent = 0
        self.latency = [0] * len(BUCKETS_MS)
        self.last_request_at: float | None = None

    def in_flight(self) -> int:
        return self.outstanding + self.waiting


class TrafficCounters:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._by_service: dict[int, _Counters] = {}
        self._clock = clock

    def _of(self, service_id: int) -> _Counters:
        c = self._by_service.get(service_id)
        if c is None:
            c = self._by_service[service_id] = _Counters()
        return c

    def record_request(self, service_id: int) -> None:
        with self._lock:
            c = self._of(service_id)
            c.requests += 1
            c.last_request_at = self._clock()

    def in_flight(self, service_id: int) -> int:
        c = self._by_service.get(service_id)
        return 0 if c is None else c.outstanding + c.waiting

    def add_outstanding(self, service_id: int, delta: int, job_id: int | None = None) -> None:
        """`delta` requests forwarded (or answered: negative), to replica job `job_id` when given."""
        with self._lock:
            c = self._of(service_id)
            c.outstanding += delta
            if job_id is not None:
                left = c.by_job.get(job_id, 0) + delta
                if left > 0:
                    c.by_job[job_id] = left
                else:
                    c.by_job.pop(job_id, None)

    def add_waiting(self, service_id: int, delta: int) -> None:
        with self._lock:
            self._of(service_id).waiting += delta

    def record_shed(self, service_id: int) -> None:
        with self._lock:
            c = self._of(service_id)
            c.shed += 1
            c.errors += 1

    def record_error(self, service_id: int) -> None:
        with self._lock:
            self._of(service_id).errors += 1

    def record_latency(self, service_id: int, latency_ms: float) -> None:
        i = bisect.bisect_left(BUCKETS_MS, latency_ms)
        with self._lock:
            self._of(service_id).latency[min(i, len(BUCKETS_MS) - 1)] += 1

    def track(self, service_ids: set[int]) -> None:
        """Count for these services from now on (zeros in snapshots until their first request); drop the counters
        of others that have nothing in flight (deleted services)."""
        with self._lock:
            for sid in [s for s, c in self._by_service.items() if s not in service_ids and not c.in_flight()]:
                del self._by_service[sid]
            for sid in service_ids:
                self._of(sid)

    def snapshot(self) -> dict[int, TrafficStats]:
        with self._lock:
            return {
                sid: TrafficStats(
                    sid,
                    c.requests,
                    c.errors,
                    c.shed,
                    c.outstanding,
                    c.waiting,
                    tuple(c.latency),
                    c.last_request_at,
                    dict(c.by_job),
                )
                for sid, c in self._by_service.items()
            }


def merge_histograms(a: Sequence[int], b: Sequence[int]) -> Histogram:
    """Two histograms over BUCKETS_MS as one (e.g. the same service seen by two gateways)."""
    return tuple(x + y for x, y in zip(a, b, strict=True))


def histogram_delta(new: Sequence[int], old: Sequence[int]) -> Histogram:
    """What was observed between two cumulative snapshots (a counter that went back, a restart, counts from 0)."""
    if any(n < o for n, o in zip(new, old, strict=True)):
        return tuple(new)
    return tuple(n - o for n, o in zip(new, old, strict=True))


def compute_quantile_ms(histogram: Sequence[int], q: float) -> float | None:
    """The q-quantile (0..1) of the latencies in `histogram`, in ms, interpolated linearly inside its bucket (as
    Prometheus's histogram_quantile); in the last, unbounded bucket, the largest finite bound. None when empty."""
    total = sum(histogram)
    if total == 0:
        return None
    rank = min(max(q, 0.0), 1.0) * total
    seen = 0
    for i, count in enumerate(histogram):
        if count and seen + count >= rank:
            upper = BUCKETS_MS[i]
            lower = BUCKETS_MS[i - 1] if i > 0 else 0.0
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * max(rank - seen, 0.0) / count
        seen += count
    return BUCKETS_MS[-2]
