"""The balancer: fewest outstanding requests, ties round-robin, a retry's exclusion."""

from __future__ import annotations

from collections import Counter

from corral.gateway.balancer import Balancer
from corral.gateway.model import Endpoint


def ep(job_id: int, attempt: int = 1) -> Endpoint:
    return Endpoint(job_id, attempt, "127.0.0.1", 9000 + job_id, revision=1)


def test_idle_replicas_share_evenly() -> None:
    b, ready = Balancer(), [ep(1), ep(2), ep(3)]
    chosen = Counter()
    for _ in range(300):
        e = b.select_endpoint(7, ready)
        assert e is not None
        b.acquire(e)
        b.release(e)
        chosen[e.job_id] += 1
    assert chosen == {1: 100, 2: 100, 3: 100}


def test_the_replica_with_fewest_outstanding_requests_is_chosen() -> None:
    b, ready = Balancer(), [ep(1), ep(2)]
    for _ in range(3):
        b.acquire(ep(1))
    b.acquire(ep(2))
    assert all(b.select_endpoint(7, ready) == ep(2) for _ in range(5))


def test_a_slow_replica_gets_fewer_requests() -> None:
    """Replica 1 answers after 4 ticks, replica 2 at once: with 4 requests in flight at any time, most go to 2."""
    b, ready = Balancer(), [ep(1), ep(2)]
    in_flight: list[tuple[int, Endpoint]] = []  # (tick it ends, endpoint)
    chosen = Counter()
    for tick in range(200):
        for item in [x for x in in_flight if x[0] <= tick]:
            in_flight.remove(item)
            b.release(item[1])
        while len(in_flight) < 4:
            e = b.select_endpoint(7, ready)
            assert e is not None
            b.acquire(e)
            chosen[e.job_id] += 1
            in_flight.append((tick + (4 if e.job_id == 1 else 1), e))
    assert chosen[2] > 2 * chosen[1]


def test_a_retry_excludes_the_replica_that_failed() -> None:
    b, ready = Balancer(), [ep(1), ep(2)]
    assert all(b.select_endpoint(7, ready, exclude=ep(1)) == ep(2) for _ in range(5))
    assert b.select_endpoint(7, [ep(1)], exclude=ep(1)) is None
    assert b.select_endpoint(7, []) is None


def test_attempts_are_counted_apart_and_released_counts_vanish() -> None:
    b = Balancer()
    b.acquire(ep(1, attempt=1))
    assert b.outstanding(ep(1, attempt=1)) == 1 and b.outstanding(ep(1, attempt=2)) == 0
    b.release(ep(1, attempt=1))
    b.release(ep(1, attempt=1))  # one too many does not go negative
    assert b.outstanding(ep(1, attempt=1)) == 0
