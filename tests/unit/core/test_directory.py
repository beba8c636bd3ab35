"""Which tenant and role a directory user's groups give (pure): a table of named cases."""

from __future__ import annotations

import pytest

from corral.core.directory import GroupMapping, select_membership
from corral.core.tenancy import Role

M = [
    GroupMapping(1, "vision", 10, "vision", Role.MEMBER),
    GroupMapping(2, "nlp", 20, "nlp", Role.MEMBER),
    GroupMapping(3, "nlp-leads", 20, "nlp", Role.TENANT_ADMIN),
    GroupMapping(4, "cn=ops,ou=groups,dc=corral,dc=test", 30, "ops", Role.ADMIN),
    GroupMapping(5, "auditors", 10, "vision", Role.VIEWER),
    GroupMapping(6, "apple", 40, "apple", Role.MEMBER),
]

CASES = {
    "no group mapped": ([], None),
    "unmapped groups only": (["interns", "staff"], None),
    "one group": (["vision"], (10, Role.MEMBER)),
    "case and spaces do not matter": ([" VISION "], (10, Role.MEMBER)),
    "highest role wins within a tenant": (["nlp", "nlp-leads"], (20, Role.TENANT_ADMIN)),
    "a viewer group does not lower a member": (["auditors", "vision"], (10, Role.MEMBER)),
    "several tenants: the highest role's tenant": (["vision", "nlp-leads"], (20, Role.TENANT_ADMIN)),
    "a DN maps, without case": (["CN=Ops,OU=Groups,DC=corral,DC=test", "vision"], (30, Role.ADMIN)),
    "equal roles in two tenants: the first tenant name": (["vision", "apple"], (40, Role.MEMBER)),
}


@pytest.mark.parametrize(("groups", "want"), list(CASES.values()), ids=list(CASES))
def test_select_membership(groups: list[str], want: tuple[int, Role] | None) -> None:
    got = select_membership(groups, M)
    assert (None if got is None else (got.tenant_id, got.role)) == want


def test_the_choice_does_not_depend_on_the_order_of_groups_or_mappings() -> None:
    groups = ["vision", "apple", "nlp"]
    first = select_membership(groups, M)
    assert select_membership(list(reversed(groups)), list(reversed(M))) == first
