"""The only place where errors become HTTP responses. Every error body is
{"error": {"code": ..., "message": ..., "field": ...}}."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral.core.errors import (
    AuthError,
    ConflictError,
    CorralError,
    ForbiddenError,
    IdempotencyKeyReused,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
    ValidationError,
)

STATUS_BY_ERROR: dict[type[CorralError], int] = {
    ValidationError: 400,
    NotFoundError: 404,
    ConflictError: 409,
    AuthError: 401,
    ForbiddenError: 403,
    TooManyRequestsError: 429,
    UnavailableError: 503,
    IdempotencyKeyReused: 422,
}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, dict[str, str | None]]:
    return {"error": {"code": code, "message": message, "field": field}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CorralError)
    async def _domain(_: Request, exc: CorralError) -> JSONResponse:
        status = next((s for t, s in STATUS_BY_ERROR.items() if isinstance(exc, t)), 500)
        field = getattr(exc, "field", None)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if isinstance(exc, TooManyRequestsError):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return JSONResponse(error_body(exc.code, exc.message, field), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header", "cookie")]
        field = ".".join(loc) or None
        msg = str(first.get("msg", "invalid"))
        message = f"{field}: {msg}" if field else msg
        return JSONResponse(error_body("invalid", message, field), status_code=422)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database(_: Request, exc: Exception) -> JSONResponse:
        # The database is down, restarting or (SQLite) busy: nothing was done, and the same request may be sent
        # again. A 503 tells clients so (the SDK retries, and fails over to another replica).
        return JSONResponse(
            error_body("database_unavailable", "the database could not be reached or is busy; try again shortly"),
            status_code=503,
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body("http_error", str(exc.detail)), status_code=exc.status_code)
