"""core/ and scheduler/ stay pure: no I/O modules, no clock, no global randomness, no upward imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "corral"
FORBIDDEN_MODULES = {"time", "datetime", "os", "pathlib", "socket", "subprocess", "io", "sqlalchemy", "httpx"}
FORBIDDEN_PACKAGES = ("corral.sim", "corral.server", "corral.store", "corral.cli", "corral.agent", "corral.sdk")
FILES = sorted((SRC / "scheduler").rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_scheduler_module_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
                assert node.attr == "Random", f"{path}: global random.{node.attr}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"open", "print", "input"}, f"{path}: {node.func.id}()"
            continue
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path} imports {name}"
            assert not name.startswith(FORBIDDEN_PACKAGES), f"{path} imports {name}"
