"""Password hashing for login (argon2id, via argon2-cffi), in a small pool of its own so that a flood of logins
cannot take the CPU and threads every other request needs."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from corral.core.errors import TooManyRequestsError, ValidationError

_hasher = PasswordHasher()
MIN_LENGTH = 8
WORKER_NICE = 10  # argon2 threads yield the CPU to request threads: a login flood takes what is left over
T = TypeVar("T")


def hash_password(password: str) -> str:
    """Blocks for one argon2 hash (~0.1 s); servers go through `PasswordPool.hash`."""
    if len(password) < MIN_LENGTH:
        raise ValidationError("password", f"must be at least {MIN_LENGTH} characters")
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """False for a wrong password or a malformed hash. Blocks for one argon2 verification."""
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def _lower_priority() -> None:
    """Runs on each worker thread as it starts: on Linux a thread has its own nice value (and threads it makes,
    such as argon2's lanes, inherit it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


class PasswordPool:
    """Runs argon2 on `workers` threads of its own, at a lower priority than request threads. At most `queue_limit` more calls wait; beyond that a call is
    refused at once with TooManyRequestsError (HTTP 429) instead of queueing behind a flood.

    Every verification costs the same whether the user exists or not: `verify(None, ...)` checks against a dummy
    hash made with the same parameters. `verifications` counts them (tests compare code paths, not wall time)."""

    def __init__(self, workers: int = 1, queue_limit: int = 8) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, workers), thread_name_prefix="corral-argon2", initializer=_lower_priority
        )
        self._slots = threading.BoundedSemaphore(max(1, workers) + max(0, queue_limit))
        self._lock = threading.Lock()
        self._dummy_hash = ""
        self.verifications = 0

    def _run(self, fn: Callable[..., T], *args: str) -> T:
        if not self._slots.acquire(blocking=False):
            raise TooManyRequestsError("too many password checks at once; try again in a moment", retry_after_s=1)
        try:
            return self._executor.submit(fn, *args).result()
        finally:
            self._slots.release()

    def _dummy(self) -> str:
        with self._lock:
            if not self._dummy_hash:
                self._dummy_hash = _hasher.hash(secrets.token_urlsafe(24))
            return self._dummy_hash

    def verify(self, password_hash: str | None, password: str, before: Callable[[], None] | None = None) -> bool:
        """True only for a real hash that matches. None or "" (no such user, no password, a disabled user) runs
        the same verification against a dummy hash and returns False. `before` runs on the worker just before
        the verification and may raise to skip it (a lockout that began while this call waited in the queue)."""
        real = bool(password_hash)
        target = password_hash if real and password_hash else self._dummy()

        def check() -> bool:
            if before is not None:
                before()
            with self._lock:
                self.verifications += 1
            return verify_password(target, password)

        return self._run(check) and real

    def hash(self, password: str) -> str:
        """A new argon2id hash (ValidationError when too short), on the pool."""
        if len(password) < MIN_LENGTH:
            raise ValidationError("password", f"must be at least {MIN_LENGTH} characters")
        return self._run(hash_password, password)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
