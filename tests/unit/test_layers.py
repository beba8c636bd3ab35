"""Imports between Corral's packages point one way: each package imports only its own or lower layers.

The layers are those of STYLE.md ("A layout that shows the architecture"), plus `api`, the wire schemas and
default paths that the server shares with the SDK, the agent and the CLI. Every import counts: top-level and
inside functions, `import x` and `from x import y`, relative imports resolved against the file's package.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"

# Lowest first. `src/corral/__init__.py` (and `import corral`) counts as core.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"core"}),
    frozenset({"scheduler"}),
    frozenset({"api", "sim", "store", "executors", "alerts", "cloud", "clusters", "autoscaler", "gateway"}),
    frozenset({"sdk", "server", "agent"}),
    frozenset({"cli"}),
)
# Packages in one layer do not import each other, except these: (importer, imported) -> why.
SIBLING_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("agent", "sdk"): "the agent talks to the server through the SDK's AgentClient (STYLE.md: the sdk is the typed "
    "client used by the CLI, the agent, the web tests and users); the sdk never imports the agent",
    ("sim", "store"): "the simulators drive the server's cycle: load_snapshot -> compute_plan -> apply_plan against "
    "the in-memory store (issue 12); the store never imports sim, and sim never imports store.sql "
    "(a rule inside packages, below)",
    ("sim", "autoscaler"): "the what-if simulator runs the autoscaler's own decide (issue 19); the autoscaler never "
    "imports sim",
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


@pytest.mark.parametrize(
    ("rel_path", "source", "expected"),
    [
        (
            "sdk/client.py",
            "from corral.server.schemas import JobOut\n",
            "sdk/client.py:1: sdk imports corral.server.schemas (server is in the same layer)",
        ),
        (
            "agent/main.py",
            "import os\n\ndef f():\n    import corral.server.settings\n",
            "agent/main.py:4: agent imports corral.server.settings (server is in the same layer)",
        ),
        (
            "core/x.py",
            "from corral import server\n",
            "core/x.py:1: core imports corral.server (server is in a higher layer)",
        ),
        ("store/sql/x.py", "from ...alerts import rules\n", "store/sql/x.py:1: store imports corral.alerts"),
        ("scheduler/__init__.py", "from ..sim import jobs\n", "scheduler/__init__.py:1: scheduler imports corral.sim"),
        ("__init__.py", "from corral.scheduler import cycle\n", "__init__.py:1: core imports corral.scheduler"),
        (
            "sdk/client.py",
            "from corral.agent.runner import Agent\n",
            "sdk/client.py:1: sdk imports corral.agent.runner",
        ),
        ("widgets/x.py", "", "widgets/x.py:1: package 'widgets' is not in LAYERS"),
    ],
)
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


# ---------------------------------------------------------------------------------------------------------------
# Rules inside packages: which modules of a package may import which. A rule names the importers (a dotted prefix
# under corral), then either the modules they must not import or the only corral modules they may import.


@dataclass(frozen=True)
class Rule:
    name: str
    importers: str  # dotted prefix, e.g. "server.routers" (a module and everything under it)
    forbidden: tuple[str, ...] = ()  # dotted prefixes the importers must not import
    only: tuple[str, ...] | None = None  # when set: the only corral prefixes they may import (own module aside)
    siblings: bool = False  # True: modules under `importers` must not import one another
    why: str = ""


RULES: tuple[Rule, ...] = (
    Rule(
        "routers are independent",
        "server.routers",
        forbidden=("server.background",),
        siblings=True,
        why="a router is a thin HTTP face over services; what two routers share belongs in a service",
    ),
    Rule(
        "services never reach up to routers",
        "server.services",
        forbidden=("server.routers",),
        why="routers call services, not the other way round (a service may own and start its background loop)",
    ),
    Rule(
        "health never reaches up to routers",
        "server.health",
        forbidden=("server.routers",),
        why="telemetry ingest and GPU health rules are called by the agents router and the loops",
    ),
    Rule(
        "background loops never import routers",
        "server.background",
        forbidden=("server.routers",),
        why="the leader-run loops call services; request handlers are not theirs to call",
    ),
    Rule(
        "placement plugins stay small",
        "scheduler.plugins",
        only=(
            "core",
            "scheduler.framework",
            "scheduler.filters",
            "scheduler.topology",
            "scheduler.workload",
            "scheduler.fragmentation",
            "scheduler.plugins",
        ),
        why="one policy per file over the framework's stage protocols (CONTRIBUTING.md: adding a placement policy)",
    ),
    Rule(
        "store protocols name no implementation",
        "store.protocols",
        forbidden=("store.sql", "store.memory"),
        why="services are typed against the role protocols; an implementation depends on them, never the reverse",
    ),
    Rule(
        "the memory store is not built on SQL",
        "store.memory",
        forbidden=("store.sql",),
        why="MemoryStore is a second implementation of the same contract, not a wrapper",
    ),
    Rule(
        "the simulators use no SQL",
        "sim",
        forbidden=("store.sql", "store.migrations"),
        why="the simulators run the cycle against the in-memory store",
    ),
    Rule(
        "GPU backends know nothing of running jobs",
        "agent.gpu",
        forbidden=("agent.runner", "agent.main"),
        why="agent/gpu is the GpuBackend protocol and its implementations; the runner uses it",
    ),
    Rule(
        "the sdk is a client only",
        "sdk",
        forbidden=("store", "scheduler"),
        why="the sdk speaks HTTP with api/ schemas; users install it without the server's insides",
    ),
)
# Rules that today's code breaks in files other tracks of issue 12 are reshaping: (rule name) -> why. The test
# of each such rule is xfail(strict=True): when the code is fixed, the test passes and the marker must go.
PENDING_RULES: dict[str, str] = {}


def _module_name(rel_path: str) -> str:
    """`server/routers/jobs.py` -> `server.routers.jobs`; `server/routers/__init__.py` -> `server.routers`."""
    parts = Path(rel_path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _resolved_imports(source: str, rel_path: str, src: Path) -> list[tuple[int, str]]:
    """(line, module under corral) for every corral import; `from corral.x import y` names x.y when y is a module."""
    here = ".".join(("corral", *Path(rel_path).with_suffix("").parts[:-1]))
    found = []
    for node in ast.walk(ast.parse(source, rel_path)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for module in _imported_modules(node, here):
            inner = module.removeprefix("corral").lstrip(".")
            if isinstance(node, ast.ImportFrom) and module not in {f"corral.{a.name}" for a in node.names}:
                for alias in node.names:
                    sub = f"{inner}.{alias.name}" if inner else alias.name
                    path = src.joinpath(*sub.split("."))
                    found.append((node.lineno, sub if path.with_suffix(".py").exists() or path.is_dir() else inner))
            else:
                found.append((node.lineno, inner))
    return found


def find_rule_violations(rule: Rule, source: str, rel_path: str, src: Path = SRC) -> list[str]:
    """Imports in one file that break one rule inside a package, as 'path:line: ...'."""
    importer = _module_name(rel_path)
    if not _under(importer, rule.importers):
        return []
    found = []
    for line, module in _resolved_imports(source, rel_path, src):
        if not module or _under(module, importer) or _under(importer, module):
            continue  # itself, or a parent package (an __init__ that re-exports)
        bad = any(_under(module, f) for f in rule.forbidden)
        if rule.only is not None and not any(_under(module, p) for p in rule.only):
            bad = True
        if rule.siblings and _under(module, rule.importers) and module != rule.importers:
            bad = True
        if bad and not any(f.startswith(f"{rel_path}:{line}: {importer} imports {module} ") for f in found):
            found.append(f"{rel_path}:{line}: {importer} imports {module} (rule {rule.name!r}: {rule.why})")
    return found


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(
            r,
            id=r.name,
            marks=[pytest.mark.xfail(reason=PENDING_RULES[r.name], strict=True)] if r.name in PENDING_RULES else [],
        )
        for r in RULES
    ],
)
def test_rules_inside_packages(rule: Rule) -> None:
    files = sorted(SRC.rglob("*.py"))
    violations = [v for f in files for v in find_rule_violations(rule, f.read_text(), f.relative_to(SRC).as_posix())]
    assert not violations, "imports against a rule inside a package:\n" + "\n".join(violations)


def test_every_pending_rule_exists() -> None:
    assert set(PENDING_RULES) <= {r.name for r in RULES}


RULE = {r.name: r for r in RULES}


@pytest.mark.parametrize(
    ("rule", "rel_path", "source", "expected"),
    [
        (
            "routers are independent",
            "server/routers/jobs.py",
            "from corral.server.routers.proxy import job_ui_base\n",
            "server/routers/jobs.py:1: server.routers.jobs imports server.routers.proxy",
        ),
        (
            "routers are independent",
            "server/routers/jobs.py",
            "from corral.server.routers import proxy\n",
            "server/routers/jobs.py:1: server.routers.jobs imports server.routers.proxy",
        ),
        (
            "routers are independent",
            "server/routers/jobs.py",
            "from .proxy import job_ui_base\n",
            "server/routers/jobs.py:1: server.routers.jobs imports server.routers.proxy",
        ),
        (
            "routers are independent",
            "server/routers/nodes.py",
            "def f():\n    from corral.server.background import x\n",
            "server/routers/nodes.py:2: server.routers.nodes imports server.background",
        ),
        (
            "placement plugins stay small",
            "scheduler/plugins/fgd.py",
            "from corral.scheduler.queueing import admission\n",
            "scheduler/plugins/fgd.py:1: scheduler.plugins.fgd imports scheduler.queueing.admission",
        ),
        (
            "GPU backends know nothing of running jobs",
            "agent/gpu/nvml.py",
            "from ..runner import Runner\n",
            "agent/gpu/nvml.py:1: agent.gpu.nvml imports agent.runner",
        ),
        (
            "the simulators use no SQL",
            "sim/jobs.py",
            "from corral.store.sql import SqlStore\n",
            "sim/jobs.py:1: sim.jobs imports store.sql",
        ),
    ],
)
def test_rule_checker_reports(rule: str, rel_path: str, source: str, expected: str) -> None:
    found = find_rule_violations(RULE[rule], source, rel_path)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_rule_checker_allows() -> None:
    plugins = RULE["placement plugins stay small"]
    ok = (
        "from corral.scheduler.framework import Status\nfrom corral.core.resources import GpuModel\n"
        "from corral.scheduler.plugins.measures import m\nfrom . import measures\nimport math\n"
    )
    assert find_rule_violations(plugins, ok, "scheduler/plugins/fgd.py") == []
    routers = RULE["routers are independent"]
    assert find_rule_violations(routers, "from corral.server.routers import jobs\n", "server/routers/__init__.py") == []
    assert find_rule_violations(routers, "from corral.server.services.jobs import x\n", "server/routers/jobs.py") == []
    assert find_rule_violations(routers, "from corral.server.routers.proxy import x\n", "server/app.py") == []
