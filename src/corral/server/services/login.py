"""Logins with a password or a token: back-off per user name and per client address, the same work whether the
user exists or not, and the sessions they open (bound to the token they came from)."""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from corral.core.errors import AuthError, TooManyRequestsError
from corral.core.login_backoff import BackoffPolicy
from corral.server.passwords import PasswordPool
from corral.server.services.directory import (
    DirectoryUserStore,
    PasswordDirectory,
    is_directory_login,
    login_through_directory,
)
from corral.store.records import TokenRecord, User

ADDRESS_FACTOR = 4  # an address (maybe a NAT of many people) may fail 4 times as often as one user name
WRONG = "wrong user name or password"


def _now() -> datetime:
    return datetime.now(UTC)


def user_key(username: str) -> str:
    """The back-off key of a user name, known or not (hashed: a password typed as a name is not stored)."""
    return "user:" + hashlib.sha256(username.encode("utf-8", "replace")).hexdigest()[:40]


def address_key(address: str) -> str:
    return "addr:" + address[:64]


@dataclass(frozen=True, slots=True)
class LoginGuard:
    """What every login path shares: the store, the password pool and the back-off policy."""

    store: DirectoryUserStore  # users, tokens, login failures; directory users are provisioned through it
    passwords: PasswordPool
    policy: BackoffPolicy
    directory: PasswordDirectory | None = None  # LDAP, for users not local (services/directory.py)

    def check_not_locked(self, keys: list[str], now: datetime) -> None:
        """TooManyRequestsError (429 with Retry-After) while any key is locked; no password is checked then."""
        until = self.store.load_login_lock(keys, now)
        if until is not None:
            wait_s = max(1, math.ceil((until - now).total_seconds()))
            raise TooManyRequestsError(f"too many failed logins; try again in {wait_s} s", retry_after_s=wait_s)

    def record_failure(self, keys: list[str], now: datetime) -> None:
        for key in keys:
            policy = self.policy.scaled(ADDRESS_FACTOR) if key.startswith("addr:") else self.policy
            self.store.record_login_failure(key, now, policy)

    def check_password(self, username: str, password: str, address: str) -> User:
        """The user whose password this is. Unknown users, users without a password and disabled users cost one
        argon2 verification too (against a dummy hash) and get the same error, so neither the answer nor its
        time tells who exists. Failures count against the name and the address; a success clears the name's."""
        now = _now()
        keys = [user_key(username), address_key(address)]
        self.check_not_locked(keys, now)
        user = self.store.find_user(username)
        if is_directory_login(user, self.directory) and self.directory is not None:
            try:  # the directory checks the password; it counts against the back-off like a local one
                user = login_through_directory(self.store, self.directory, username, password)
                if user.disabled:  # an admin disabled it here: the directory does not override that
                    raise AuthError(WRONG)
            except AuthError:
                self.record_failure(keys, now)
                raise
            self.store.clear_login_failures(keys[0])
            return user
        usable = user is not None and not user.disabled and bool(user.password_hash)
        # checked again on the worker: a lock may have begun while this login waited in the queue
        recheck = functools.partial(self.check_not_locked, keys, now)
        if not self.passwords.verify(user.password_hash if usable and user else None, password, recheck) or not user:
            self.record_failure(keys, now)
            raise AuthError(WRONG)
        self.store.clear_login_failures(keys[0])
        return user

    def check_token(self, secret_hash: str, address: str) -> tuple[User, TokenRecord]:
        """The user of a valid, unexpired API token (to open a session with it). Failures count against the
        address only: a token names no user."""
        now = _now()
        keys = [address_key(address)]
        self.check_not_locked(keys, now)
        token = self.store.find_token(secret_hash)
        user = self.store.get_user(token.user_id) if token and token.kind == "user" and token.user_id else None
        if token is None or user is None or user.disabled:
            self.record_failure(keys, now)
            raise AuthError("invalid or revoked token")
        if token.expires_at is not None and token.expires_at <= now:
            raise AuthError("token expired")
        return user, token

    def purge(self, older_than_s: float) -> int:
        return self.store.purge_login_failures(_now() - timedelta(seconds=older_than_s))
