"""The server sees the store through its role protocols and its components through typed dependencies: only the
app wiring (server/app.py) imports the SQL store, and only the wiring and server/context.py touch `app.state`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[3] / "src" / "corral" / "server"
WIRING = frozenset({"app.py"})  # opens the store and builds the ServerContext
STATE_READERS = frozenset({"app.py", "context.py"})  # store the context on app.state / read it back


def _modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted corral modules an import names (`from corral.store import sql` names corral.store.sql)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative imports inside the server never reach corral.store
        return []
    module = node.module or ""
    return [module] + [f"{module}.{a.name}" for a in node.names]


def find_sql_imports(source: str, rel_path: str) -> list[str]:
    """Imports of corral.store.sql in one file, as 'path:line: module' (every import: top level or in a function)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            m == "corral.store.sql" or m.startswith("corral.store.sql.") for m in _modules(node)
        ):
            found.append(f"{rel_path}:{node.lineno}: corral.store.sql")
    return found


def find_state_reads(source: str, rel_path: str) -> list[str]:
    """`<anything>.app.state` or `app.state` attribute chains, as 'path:line' (routes use server/deps.py)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "state":
            owner = node.value
            named_app = (isinstance(owner, ast.Name) and owner.id == "app") or (
                isinstance(owner, ast.Attribute) and owner.attr == "app"
            )
            if named_app:
                found.append(f"{rel_path}:{node.lineno}")
    return found


def _server_files() -> list[tuple[str, str]]:
    return [(str(p.relative_to(SERVER)), p.read_text()) for p in sorted(SERVER.rglob("*.py"))]


def test_only_the_wiring_imports_the_sql_store() -> None:
    bad = [v for rel, src in _server_files() if rel not in WIRING for v in find_sql_imports(src, rel)]
    assert bad == [], "type server code against corral.store.protocols roles; only server/app.py opens the store"


def test_routes_and_services_read_no_app_state() -> None:
    bad = [v for rel, src in _server_files() if rel not in STATE_READERS for v in find_state_reads(src, rel)]
    assert bad == [], "read components through server/deps.py (or context_of), not request.app.state"


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("from-import", "from corral.store.sql import SqlStore\n", ["x.py:1: corral.store.sql"]),
        ("package-import", "from corral.store import sql\n", ["x.py:1: corral.store.sql"]),
        ("plain-import", "import corral.store.sql as s\n", ["x.py:1: corral.store.sql"]),
        ("inside-a-function", "def f():\n    from corral.store.sql import open_store\n", ["x.py:2: corral.store.sql"]),
        ("a-role-is-fine", "from corral.store.protocols import JobStore\n", []),
        ("records-are-fine", "from corral.store.records import Job\n", []),
    ],
)
def test_the_import_scan(name: str, source: str, expected: list[str]) -> None:
    assert find_sql_imports(source, "x.py") == expected, name


@pytest.mark.parametrize(
    ("name", "source", "hits"),
    [
        ("request", "def f(request):\n    return request.app.state.store\n", 1),
        ("websocket", "def f(websocket):\n    return websocket.app.state.settings\n", 1),
        ("app", "def f(app):\n    return app.state.ca\n", 1),
        ("a-dependency", "def f(store: StoreDep):\n    return store.list_nodes()\n", 0),
        ("job-state", "def f(job):\n    return job.state\n", 0),
    ],
)
def test_the_state_scan(name: str, source: str, hits: int) -> None:
    assert len(find_state_reads(source, "x.py")) == hits, name
