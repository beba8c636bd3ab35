"""Directory login (LDAP, OpenID Connect), the pure part: which tenant and role a user's groups map to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.core.tenancy import Role

# Highest first: when several mapped groups give roles, the highest one wins.
ROLE_RANK: dict[Role, int] = {Role.ADMIN: 3, Role.TENANT_ADMIN: 2, Role.MEMBER: 1, Role.VIEWER: 0}
DIRECTORY_SOURCES = ("ldap", "oidc")  # users.directory: "" is a local user, else where it logs in


@dataclass(frozen=True, slots=True)
class GroupMapping:
    """Members of the directory group `group` belong to `tenant` with `role` (an admin sets these)."""

    id: int
    group: str
    tenant_id: int
    tenant: str
    role: Role


@dataclass(frozen=True, slots=True)
class DirectoryIdentity:
    """Who the directory says logged in: a user name and the names of the groups it is a member of."""

    username: str
    groups: frozenset[str]
    source: str  # "ldap" | "oidc"
    email: str = ""


def normalize_group(name: str) -> str:
    """Group names compare without case (LDAP's cn and DNs are case-insensitive) and without outer spaces."""
    return name.strip().casefold()


def select_membership(groups: Iterable[str], mappings: Sequence[GroupMapping]) -> GroupMapping | None:
    """The mapping that decides a directory user's tenant and role, or None when no group of theirs is mapped.

    Rule: the highest role among the user's mapped groups wins; a user in mapped groups of several tenants
    belongs to the tenant where that highest role is held; ties go to the tenant whose name sorts first (a user
    belongs to exactly one tenant, and the choice must not depend on the order the directory lists groups in).
    """
    mine = {normalize_group(g) for g in groups}
    matching = [m for m in mappings if normalize_group(m.group) in mine]
    if not matching:
        return None
    return min(matching, key=lambda m: (-ROLE_RANK[m.role], m.tenant, m.id))
