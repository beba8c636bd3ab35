"""Domain errors carry what the API shows: a message, the field or thing concerned, a retry delay."""

from __future__ import annotations

import pytest

from corral.core.errors import (
    ConflictError,
    CorralError,
    IdempotencyKeyReused,
    NotFoundError,
    TooManyRequestsError,
    ValidationError,
)


def test_every_error_keeps_its_message() -> None:
    e = CorralError("something broke")
    assert (e.message, str(e), e.code) == ("something broke", "something broke", "error")


def test_a_validation_error_names_the_field_and_the_problem() -> None:
    e = ValidationError("gpus", "must be >= 0")
    assert (e.field, e.problem, e.message, str(e), e.code) == (
        "gpus",
        "must be >= 0",
        "gpus: must be >= 0",
        "gpus: must be >= 0",
        "invalid",
    )


def test_not_found_names_the_kind_and_the_ident() -> None:
    e = NotFoundError("job", "42")
    assert (e.kind, e.ident, e.message, str(e), e.code) == (
        "job",
        "42",
        "job '42' not found",
        "job '42' not found",
        "not_found",
    )


def test_a_conflict_keeps_its_message_and_field() -> None:
    e = ConflictError("name taken", field="name")
    assert (e.message, str(e), e.field, e.code) == ("name taken", "name taken", "name", "conflict")
    assert ConflictError("busy").field is None


@pytest.mark.parametrize(("given", "kept"), [(30, 30), (1, 1), (0, 1), (-5, 1)])
def test_too_many_requests_asks_to_wait_at_least_a_second(given: int, kept: int) -> None:
    e = TooManyRequestsError("slow down", given)
    assert (e.message, str(e), e.retry_after_s, e.code) == ("slow down", "slow down", kept, "rate_limited")


def test_a_reused_idempotency_key_says_to_send_a_new_one() -> None:
    e = IdempotencyKeyReused("k-1")
    expected = "Idempotency-Key 'k-1' was used for a different request; send a new key"
    assert (e.message, str(e), e.field, e.code) == (expected, expected, "Idempotency-Key", "idempotency_key_reused")
