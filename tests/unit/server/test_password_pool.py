"""Password hashing on a pool of its own: bounded at once, refused beyond its queue, a dummy hash for no user."""

from __future__ import annotations

import threading

import pytest

from corral.core.errors import TooManyRequestsError, ValidationError
from corral.server.passwords import PasswordPool


def test_verification_runs_on_the_pools_own_threads() -> None:
    pool = PasswordPool(workers=1, queue_limit=0)
    try:
        names: list[str] = []
        pool._run(lambda: names.append(threading.current_thread().name))
        assert names[0].startswith("corral-argon2")
    finally:
        pool.close()


def test_beyond_workers_and_queue_a_check_is_refused_at_once() -> None:
    pool = PasswordPool(workers=1, queue_limit=1)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait()

    busy = threading.Thread(target=pool._run, args=(hold,))
    queued = threading.Thread(target=pool._run, args=(lambda: None,))
    try:
        busy.start()
        assert started.wait(10)
        queued.start()  # waits for the worker: holds the one queue slot
        for _ in range(1000):  # until the queued call holds its slot (it acquires before it waits)
            if pool._slots._value == 0:  # type: ignore[attr-defined]
                break
            threading.Event().wait(0.01)
        with pytest.raises(TooManyRequestsError) as e:
            pool.verify(None, "anything")
        assert e.value.retry_after_s == 1
    finally:
        release.set()
        busy.join()
        queued.join()
        pool.close()


def test_no_user_costs_a_verification_and_never_matches() -> None:
    pool = PasswordPool()
    try:
        real = pool.hash("correct horse")
        assert pool.verify(real, "correct horse") and not pool.verify(real, "wrong")
        assert not pool.verify(None, "correct horse") and not pool.verify("", "")
        assert pool.verifications == 4
        with pytest.raises(ValidationError):
            pool.hash("short")
    finally:
        pool.close()


def test_a_check_that_raises_on_the_worker_skips_the_verification() -> None:
    """A login that waited in the queue while its name got locked is refused there, without argon2."""
    pool = PasswordPool()

    def locked() -> None:
        raise TooManyRequestsError("too many failed logins; try again in 5 s", retry_after_s=5)

    try:
        with pytest.raises(TooManyRequestsError):
            pool.verify(None, "anything", before=locked)
        assert pool.verifications == 0
        assert not pool.verify(None, "anything", before=lambda: None) and pool.verifications == 1
    finally:
        pool.close()
