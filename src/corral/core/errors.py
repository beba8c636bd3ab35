"""Domain errors. Each carries a code; server/errors.py is the one place that maps codes to HTTP."""

from __future__ import annotations


class CorralError(Exception):
    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationError(CorralError):
    """Bad input: names the field and what is wrong."""

    code = "invalid"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFoundError(CorralError):
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} not found")
        self.kind = kind
        self.ident = ident


class ConflictError(CorralError):
    code = "conflict"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class AuthError(CorralError):
    code = "unauthorized"


class ForbiddenError(CorralError):
    code = "forbidden"


class UnavailableError(CorralError):
    """A service Corral depends on (a directory, an identity provider) cannot be reached or answered wrongly."""

    code = "unavailable"


class TooManyRequestsError(CorralError):
    """Refused for now (a login back-off, a full queue): the caller may try again after `retry_after_s`."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)


class IdempotencyKeyReused(CorralError):
    """An Idempotency-Key sent again with a different request (HTTP 422, as the IETF draft asks)."""

    code = "idempotency_key_reused"
    field = "Idempotency-Key"

    def __init__(self, key: str) -> None:
        super().__init__(f"Idempotency-Key {key!r} was used for a different request; send a new key")
