"""Tenancy rules: what each role may do, role and name parsing, and quota consistency."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.tenancy import Action, Role, can, check_name, check_quota, parse_role

_EXPECTED = {
    Role.ADMIN: {Action.READ, Action.SUBMIT, Action.MANAGE_TENANT, Action.MANAGE_CLUSTER},
    Role.TENANT_ADMIN: {Action.READ, Action.SUBMIT, Action.MANAGE_TENANT},
    Role.MEMBER: {Action.READ, Action.SUBMIT},
    Role.VIEWER: {Action.READ},
}


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("action", list(Action))
def test_what_each_role_may_do(role: Role, action: Action) -> None:
    assert can(role, action) == (action in _EXPECTED[role])


@pytest.mark.parametrize("value", ["admin", "tenant-admin", "member", "viewer"])
def test_roles_parse_from_their_names(value: str) -> None:
    assert parse_role(value) == Role(value) and parse_role(value).value == value


@pytest.mark.parametrize("value", ["root", "Admin", "", "tenant_admin"])
def test_an_unknown_role_lists_the_known_ones(value: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_role(value)
    assert e.value.field == "role"
    assert e.value.problem == f"unknown role {value!r}; one of admin, tenant-admin, member, viewer"


@pytest.mark.parametrize("name", ["a", "team-a", "ml.research_1", "0", "a" * 64, "x1-y2.z3"])
def test_good_names_are_returned(name: str) -> None:
    assert check_name("tenant", name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Team", "-team", "team-", "team.", "_team", "a b", "é", "a" * 65, "team/a"],
)
def test_bad_names_name_the_field(name: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_name("queue", name)
    assert e.value.field == "queue"
    assert e.value.problem == f"{name!r} is not a valid name (a-z, 0-9, '.', '_', '-'; 1-64 characters)"


@pytest.mark.parametrize(
    ("guaranteed", "max_gpus"),
    [(0, None), (0, 0), (4, 4), (4, 8), (8, None), (0, 16)],
)
def test_consistent_quotas(guaranteed: int, max_gpus: int | None) -> None:
    check_quota(guaranteed, max_gpus)


def test_a_negative_guarantee_is_refused() -> None:
    with pytest.raises(ValidationError) as e:
        check_quota(-1, None)
    assert (e.value.field, e.value.problem) == ("guaranteed_gpus", "must be >= 0")


@pytest.mark.parametrize(("guaranteed", "max_gpus"), [(4, 3), (1, 0)])
def test_a_limit_below_the_guarantee_is_refused(guaranteed: int, max_gpus: int) -> None:
    with pytest.raises(ValidationError) as e:
        check_quota(guaranteed, max_gpus)
    assert e.value.field == "max_gpus"
    assert e.value.problem == f"must be >= guaranteed_gpus ({guaranteed}) or unset for no limit"
