"""Traffic counters and the pure helpers over their latency histograms."""

from __future__ import annotations

import threading

import pytest

from corral.gateway.stats import (
    BUCKETS_MS,
    TrafficCounters,
    compute_quantile_ms,
    histogram_delta,
    merge_histograms,
)


def hist(**counts: int) -> tuple[int, ...]:
    """hist(b2=3): 3 in the bucket whose upper bound is 2 ms ("binf": the last)."""
    out = [0] * len(BUCKETS_MS)
    for key, n in counts.items():
        bound = float(key[1:].replace("_", ".")) if key != "binf" else float("inf")
        out[BUCKETS_MS.index(bound)] = n
    return tuple(out)


def test_counters_snapshot() -> None:
    c = TrafficCounters(clock=lambda: 1234.5)
    c.record_request(1)
    c.record_request(1)
    c.record_latency(1, 0.7)
    c.record_latency(1, 30)
    c.record_latency(1, 99999)
    c.record_error(1)
    c.record_shed(1)
    c.add_outstanding(1, 2)
    c.add_waiting(1, 1)
    s = c.snapshot()[1]
    assert (s.requests, s.errors, s.shed, s.outstanding, s.waiting, s.in_flight) == (2, 2, 1, 2, 1, 3)
    assert s.latency_ms == hist(b1=1, b50=1, binf=1)
    assert s.last_request_at == 1234.5


def test_outstanding_requests_are_also_counted_by_replica_job() -> None:
    c = TrafficCounters()
    c.add_outstanding(1, 2, job_id=7)
    c.add_outstanding(1, 1, job_id=8)
    c.add_outstanding(1, 1)  # no job given: the service's count only
    assert c.snapshot()[1].outstanding_by_job == {7: 2, 8: 1}
    c.add_outstanding(1, -2, job_id=7)
    s = c.snapshot()[1]
    assert s.outstanding == 2 and s.outstanding_by_job == {8: 1}  # a job with none left is not listed


def test_a_bound_belongs_to_its_own_bucket() -> None:
    c = TrafficCounters()
    c.record_latency(1, 2.0)
    assert c.snapshot()[1].latency_ms == hist(b2=1)


def test_tracked_services_show_zeros_and_untracked_ones_go_once_idle() -> None:
    c = TrafficCounters()
    c.track({1, 2})
    assert c.snapshot()[1].requests == 0 and c.snapshot()[1].latency_ms == hist()
    c.add_outstanding(2, 1)
    c.track({3})
    assert set(c.snapshot()) == {2, 3}


def test_snapshot_from_another_thread_while_counting() -> None:
    c = TrafficCounters()
    done = threading.Event()

    def count() -> None:
        for _ in range(20000):
            c.record_request(1)
        done.set()

    t = threading.Thread(target=count)
    t.start()
    seen = [c.snapshot().get(1) for _ in range(100)]
    t.join()
    assert c.snapshot()[1].requests == 20000
    counts = [s.requests for s in seen if s is not None]
    assert counts == sorted(counts)


@pytest.mark.parametrize(
    ("name", "histogram", "q", "expected"),
    [
        ("empty", hist(), 0.5, None),
        ("all in one bucket: the middle of it", hist(b10=10), 0.5, 7.5),
        ("p99 in the upper bucket", hist(b1=98, b100=2), 0.99, 75.0),
        ("p50 in the lower bucket", hist(b1=98, b100=2), 0.5, 0.5 + 0.5 * (50 / 98)),
        ("first bucket starts at 0", hist(b0_5=4), 0.5, 0.25),
        ("the unbounded bucket: its lower bound", hist(binf=3), 0.99, 10000.0),
    ],
)
def test_quantiles(name: str, histogram: tuple[int, ...], q: float, expected: float | None) -> None:
    got = compute_quantile_ms(histogram, q)
    assert got == pytest.approx(expected) if expected is not None else got is None, name


def test_merge_and_delta() -> None:
    a, b = hist(b1=1, b10=2), hist(b10=3, binf=1)
    assert merge_histograms(a, b) == hist(b1=1, b10=5, binf=1)
    assert histogram_delta(merge_histograms(a, b), a) == b
    assert histogram_delta(a, merge_histograms(a, b)) == a  # counters went back (a restart): all of `new`
    assert compute_quantile_ms(histogram_delta(hist(b1=100, b100=10), hist(b1=100)), 0.5) == pytest.approx(75.0)
