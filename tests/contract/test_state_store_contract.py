"""StateStore's surface: every implementation has each protocol method with a compatible signature.

The behaviour behind the protocol is tested on SQLite and PostgreSQL in tests/integration/test_store.py; mypy
checks the same conformance statically (see the end of corral.store.sql).
"""

from __future__ import annotations

import inspect

import pytest

from corral.store.base import StateStore
from corral.store.sql import SqlStore

IMPLEMENTATIONS: dict[str, type] = {"sql": SqlStore}
PROTOCOL_METHODS = sorted(n for n, v in vars(StateStore).items() if inspect.isfunction(v) and not n.startswith("_"))


def _params(fn: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]  # type: ignore[arg-type]


def test_protocol_is_not_empty() -> None:
    assert {"assign_job_parts", "requeue_job", "list_quotas", "save_usage"} <= set(PROTOCOL_METHODS)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("method", PROTOCOL_METHODS)
def test_implementation_has_compatible_method(impl: str, method: str) -> None:
    cls = IMPLEMENTATIONS[impl]
    assert callable(getattr(cls, method, None)), f"{cls.__name__} lacks {method}"
    want, got = _params(getattr(StateStore, method)), _params(getattr(cls, method))
    got_by_name = {p.name: p for p in got}
    # the protocol's parameters, in order, with the same kinds and defaults
    assert [p.name for p in got[:len(want)]] == [p.name for p in want]
    for p in want:
        q = got_by_name[p.name]
        assert q.kind == p.kind, f"{method}({p.name}): {q.kind} != {p.kind}"
        assert q.default == p.default, f"{method}({p.name}): default {q.default!r} != {p.default!r}"
    # anything extra in the implementation must be optional, so protocol-typed callers still work
    extra = [p for p in got[len(want):] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert all(p.default is not p.empty for p in extra), f"{method}: required extra parameters {extra}"
