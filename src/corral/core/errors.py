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
