"""Tenants, roles and what each role may do (pure). The server checks every request against this."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol

from corral.core.errors import TooManyRequestsError, ValidationError


class Role(StrEnum):
    ADMIN = "admin"  # everything, every tenant
    TENANT_ADMIN = "tenant-admin"  # its tenant: users, tokens, every job of the tenant
    MEMBER = "member"  # submits and manages jobs in its tenant; sees the tenant's jobs
    VIEWER = "viewer"  # reads its tenant's jobs, logs and the inventory


class Action(StrEnum):
    READ = "read"  # jobs, logs, nodes, GPUs, quotas of the tenant
    SUBMIT = "submit"  # submit and cancel jobs
    MANAGE_TENANT = "manage-tenant"  # users and tokens of the tenant
    MANAGE_CLUSTER = "manage-cluster"  # tenants, quotas, queues, nodes, any tenant


ALLOWED: dict[Role, frozenset[Action]] = {
    Role.ADMIN: frozenset(Action),
    Role.TENANT_ADMIN: frozenset({Action.READ, Action.SUBMIT, Action.MANAGE_TENANT}),
    Role.MEMBER: frozenset({Action.READ, Action.SUBMIT}),
    Role.VIEWER: frozenset({Action.READ}),
}

DEFAULT_TENANT = "default"
QUEUE_MODES = ("best-effort", "strict")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")


def can(role: Role, action: Action) -> bool:
    return action in ALLOWED[role]


def parse_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ValidationError("role", f"unknown role {value!r}; one of {', '.join(r.value for r in Role)}") from None


def check_name(field: str, value: str) -> str:
    """Tenant, user and queue names: lower-case letters, digits, '.', '_' and '-', 1..64 characters."""
    if not _NAME.fullmatch(value):
        raise ValidationError(field, f"{value!r} is not a valid name (a-z, 0-9, '.', '_', '-'; 1-64 characters)")
    return value


def check_quota(guaranteed_gpus: int, max_gpus: int | None) -> None:
    if guaranteed_gpus < 0:
        raise ValidationError("guaranteed_gpus", "must be >= 0")
    if max_gpus is not None and max_gpus < guaranteed_gpus:
        raise ValidationError("max_gpus", f"must be >= guaranteed_gpus ({guaranteed_gpus}) or unset for no limit")


class _OfTenant(Protocol):
    @property
    def tenant_id(self) -> int | None: ...


def count_by_tenant(specs: Iterable[_OfTenant]) -> dict[int, int]:
    """How many of `specs` each tenant adds (specs of no tenant count for none): what check_active_limit is
    asked per tenant when one call submits several jobs."""
    return dict(Counter(spec.tenant_id for spec in specs if spec.tenant_id is not None))


def check_active_limit(active: int, adding: int, limit: int | None) -> None:
    """A tenant with `active` pending and running jobs may add `adding` more only within `limit`
    (CORRAL_MAX_ACTIVE_JOBS_PER_TENANT); TooManyRequestsError otherwise."""
    if limit is not None and active + adding > limit:
        raise TooManyRequestsError(
            f"the tenant has {active} jobs pending or running; {adding} more would pass its limit of {limit} "
            "(CORRAL_MAX_ACTIVE_JOBS_PER_TENANT): wait for some to end",
            30,
        )
