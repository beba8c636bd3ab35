"""The OpenAPI document says what the routes really answer: every error status Corral's error mapping
(server/errors.py) and input guard (server/inputs.py) can send, each with the one error body they all share."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {
                    "type": "string",
                    "description": "a stable code: invalid, not_found, conflict, unauthorized...",
                },
                "message": {
                    "type": "string",
                    "description": "one line for humans, starting with the field when there is one",
                },
                "field": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "description": "the request field, query parameter or header at fault",
                },
            },
        }
    },
}

ERRORS: dict[str, str] = {
    "400": "The request is well-formed but cannot be done (names the field)",
    "401": "No valid token or session",
    "403": "The caller's role does not allow it",
    "404": "Not found, or not visible to the caller's tenant",
    "409": "Conflicts with the current state (a duplicate name, a job already finished)",
    "422": "Invalid input: a bound, a pattern, a NUL byte; names the field",
    "429": "Too many requests (login back-off); see Retry-After",
    "503": "A service Corral depends on (a directory, an identity provider) is unavailable",
}
BODY_ERRORS: dict[str, str] = {"413": "The request body is too large"}


def with_error_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the error responses to every operation of an OpenAPI document (in place; returned for chaining)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for methods in schema.get("paths", {}).values():
        for method, operation in methods.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            errors = {
                **ERRORS,
                **(BODY_ERRORS if "requestBody" in operation or method in ("post", "put", "patch") else {}),
            }
            for status, description in errors.items():
                existing = operation["responses"].get(status, {})
                # FastAPI's own 422 describes its HTTPValidationError; Corral's handler answers with Error instead
                operation["responses"][status] = {
                    **existing,
                    "description": existing.get("description") or description,
                    "content": ref,
                }
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    return schema


def document_error_responses(app: FastAPI) -> None:
    """Make app.openapi() return the document with the error responses (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_error_responses(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
