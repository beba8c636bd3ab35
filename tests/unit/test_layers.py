"""Imports between Corral's packages point one way: each package imports only its own or lower layers.

The layers are those of STYLE.md ("A layout that shows the architecture"), plus `api`, the wire schemas and
default paths that the server shares with the SDK, the agent and the CLI. Every import counts: top-level and
inside functions, `import x` and `from x import y`, relative imports resolved against the file's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"

# Lowest first. `src/corral/__init__.py` (and `import corral`) counts as core.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"core"}),
    frozenset({"scheduler"}),
    frozenset({"api", "sim", "store", "executors", "alerts", "cloud", "autoscaler"}),
    frozenset({"sdk", "server", "agent"}),
    frozenset({"cli"}),
)
# Packages in one layer do not import each other, except these: (importer, imported) -> why.
SIBLING_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("agent", "sdk"): "the agent talks to the server through the SDK's AgentClient (STYLE.md: the sdk is the typed "
                      "client used by the CLI, the agent, the web tests and users); the sdk never imports the agent",
}

LAYER_OF = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


def _package(module: str) -> str:
    """The top-level package under corral of a dotted module name ("corral" alone is core)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "core"


def _imported_modules(node: ast.Import | ast.ImportFrom, here: str) -> list[str]:
    """The corral modules one import statement names; `here` is the dotted package the file is in."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "corral"]
    if node.level:  # relative: `from . import x` in corral.server.routers -> corral.server.routers.x
        base = here.split(".")[: len(here.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != "corral":
        return []
    if module == "corral":  # `from corral import server` names a package; `from corral import __version__` core
        return [f"corral.{a.name}" if a.name in LAYER_OF else "corral" for a in node.names]
    return [module]


def find_violations(source: str, rel_path: str) -> list[str]:
    """Forbidden imports in one file, as 'path:line: ...'; `rel_path` is relative to src/corral."""
    parts = Path(rel_path).with_suffix("").parts
    importer = parts[0] if len(parts) > 1 else "core"  # top-level modules of corral count as core
    here = ".".join(("corral", *parts[:-1]))  # __init__.py: its own package; a module: its parent package
    if importer not in LAYER_OF:
        return [f"{rel_path}:1: package {importer!r} is not in LAYERS of tests/unit/test_layers.py; give it a layer"]
    found = []
    for node in ast.walk(ast.parse(source, rel_path)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for module in _imported_modules(node, here):
            target = _package(module)
            if target == importer or (importer, target) in SIBLING_IMPORTS_ALLOWED:
                continue
            if target not in LAYER_OF:
                found.append(f"{rel_path}:{node.lineno}: imports {module}, in unknown package {target!r}")
            elif LAYER_OF[target] >= LAYER_OF[importer]:
                where = "the same layer" if LAYER_OF[target] == LAYER_OF[importer] else "a higher layer"
                found.append(f"{rel_path}:{node.lineno}: {importer} imports {module} ({target} is in {where})")
    return found


def test_every_package_imports_only_lower_layers() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50
    violations = [v for f in files for v in find_violations(f.read_text(), f.relative_to(SRC).as_posix())]
    assert not violations, "imports against the layering (see STYLE.md):\n" + "\n".join(violations)


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - set(LAYER_OF) == set()


@pytest.mark.parametrize(("rel_path", "source", "expected"), [
    ("sdk/client.py", "from corral.server.schemas import JobOut\n",
     "sdk/client.py:1: sdk imports corral.server.schemas (server is in the same layer)"),
    ("agent/main.py", "import os\n\ndef f():\n    import corral.server.settings\n",
     "agent/main.py:4: agent imports corral.server.settings (server is in the same layer)"),
    ("core/x.py", "from corral import server\n",
     "core/x.py:1: core imports corral.server (server is in a higher layer)"),
    ("store/sql/x.py", "from ...alerts import rules\n", "store/sql/x.py:1: store imports corral.alerts"),
    ("scheduler/__init__.py", "from ..sim import jobs\n", "scheduler/__init__.py:1: scheduler imports corral.sim"),
    ("__init__.py", "from corral.scheduler import cycle\n", "__init__.py:1: core imports corral.scheduler"),
    ("sdk/client.py", "from corral.agent.runner import Agent\n", "sdk/client.py:1: sdk imports corral.agent.runner"),
    ("widgets/x.py", "", "widgets/x.py:1: package 'widgets' is not in LAYERS"),
])
def test_checker_reports_forbidden_imports(rel_path: str, source: str, expected: str) -> None:
    found = find_violations(source, rel_path)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_checker_allows_own_and_lower_layers() -> None:
    source = (
        "from corral import __version__\nimport corral.core.errors\nfrom corral.scheduler import cycle\n"
        "from corral.api.schemas import JobOut\nfrom . import deps\nfrom .. import schemas\nimport os\n"
        "def f():\n    from corral.store.sql import SqlStore\n    from corral.server.settings import Settings\n"
    )
    assert find_violations(source, "server/routers/jobs.py") == []
    assert find_violations("from corral.sdk.client import AgentClient\n", "agent/runner.py") == []  # the exception
