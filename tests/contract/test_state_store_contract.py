"""StateStore's surface: every implementation has each protocol method with a compatible signature.

The behaviour behind the protocol is tested on SQLite and PostgreSQL in tests/integration/test_store.py; mypy
checks the same conformance statically (see the end of corral.store.sql).
"""

from __future__ import annotations

import inspect

import pytest

from corral.store.base import StateStore
from corral.store.memory import MemoryStore
from corral.store.protocols import ROLES, SchedulingStore
from corral.store.sql import SqlStore


def _methods(role: type) -> set[str]:
    return {n for n, v in vars(role).items() if inspect.isfunction(v) and not n.startswith("_")}


IMPLEMENTATIONS: dict[str, tuple[type, type]] = {
    "sql": (SqlStore, StateStore),
    "memory": (MemoryStore, SchedulingStore),
}
PROTOCOL_METHODS = sorted(set().union(*(_methods(r) for r in ROLES)))
CASES = [
    (impl, m)
    for impl, (_, proto) in sorted(IMPLEMENTATIONS.items())
    for m in PROTOCOL_METHODS
    if any(m in _methods(r) for r in proto.__mro__ if r in ROLES)
]


def _params(fn: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]  # type: ignore[arg-type]


def test_protocol_is_not_empty() -> None:
    assert {"assign_job_parts", "requeue_job", "list_quotas", "save_usage"} <= set(PROTOCOL_METHODS)


def test_every_public_sql_store_method_belongs_to_exactly_one_role() -> None:
    # (`make mutate` adds mutmut's copies of each method, named xǁSqlStoreǁ<method>__mutmut_<n>: not the API.)
    public = {n for n in dir(SqlStore) if not n.startswith("_") and "ǁ" not in n and callable(getattr(SqlStore, n))}
    owners = {n: [r.__name__ for r in ROLES if n in _methods(r)] for n in public}
    assert {n: o for n, o in owners.items() if len(o) != 1} == {}


@pytest.mark.parametrize(("impl", "method"), CASES)
def test_implementation_has_compatible_method(impl: str, method: str) -> None:
    cls = IMPLEMENTATIONS[impl][0]
    assert callable(getattr(cls, method, None)), f"{cls.__name__} lacks {method}"
    want, got = _params(getattr(StateStore, method)), _params(getattr(cls, method))
    got_by_name = {p.name: p for p in got}
    # the protocol's parameters, in order, with the same kinds and defaults
    assert [p.name for p in got[: len(want)]] == [p.name for p in want]
    for p in want:
        q = got_by_name[p.name]
        assert q.kind == p.kind, f"{method}({p.name}): {q.kind} != {p.kind}"
        assert q.default == p.default, f"{method}({p.name}): default {q.default!r} != {p.default!r}"
    # anything extra in the implementation must be optional, so protocol-typed callers still work
    extra = [p for p in got[len(want) :] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert all(p.default is not p.empty for p in extra), f"{method}: required extra parameters {extra}"
