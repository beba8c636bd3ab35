"""Monitoring modules import only in the allowed direction: core <- alerts <- {agent, server}."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "corral"

ALLOWED: dict[str, tuple[str, ...]] = {
    "core/telemetry.py": ("corral.core",),
    "core/rollup.py": ("corral.core",),
    "alerts": ("corral.core", "corral.alerts"),
    "server/prometheus.py": ("corral.core",),
    "core/health.py": ("corral.core",),
    "agent/metrics.py": ("corral.core", "corral.agent.gpu"),
    "agent/gpu": ("corral.core", "corral.agent.gpu"),
}


def _corral_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corral"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("corral")}
    return found


@pytest.mark.parametrize("where", sorted(ALLOWED))
def test_imports_point_one_way(where: str) -> None:
    target = SRC / where
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files
    for f in files:
        bad = {m for m in _corral_imports(f) if not m.startswith(ALLOWED[where])}
        assert not bad, f"{f.relative_to(SRC)} imports {sorted(bad)}"
