"""`core` and `scheduler` are pure: no I/O, no clock, no global randomness, no threads (STYLE.md); an AST scan.

Time comes in as a parameter (`now_s`, `now`) and randomness as a seeded `random.Random`: that is what lets the
simulators and the server run the same code. `import random` is fine for `random.Random(seed)` and for annotations;
the module-level functions (`random.random()`, `random.shuffle(...)`) draw from the global generator and are not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"
PURE_PACKAGES = ("core", "scheduler")

# Top-level modules that do I/O, read the clock, run threads or processes, or talk to a database or the network.
IMPURE_MODULES = frozenset(
    "os sys io socket select selectors signal subprocess shutil tempfile glob pathlib time threading multiprocessing "
    "concurrent asyncio logging secrets uuid urllib http ssl sqlite3 sqlalchemy alembic psycopg httpx requests "
    "fastapi starlette uvicorn websockets pynvml psutil docker typer rich".split()
)
# Names that read the clock or the global random generator when called: `datetime.now()`, `date.today()`...
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "fromtimestamp"})
RANDOM_ALLOWED = frozenset({"Random"})  # `random.Random(seed)`: a generator passed in, replayable
BUILTIN_IO = frozenset({"open", "print", "input", "breakpoint"})

# Today's offenders in files other tracks own, each with why it is still there: (path, what) -> why. The scan
# reports them apart; test_known_offenders_still_exist fails once one is fixed, so the entry is then removed.
KNOWN_OFFENDERS: dict[tuple[str, str], str] = {
    ("core/health.py", "import threading"): "issue 12 in progress: HealthChecker (a locked holder of one node's "
    "health state, used only by tests today) belongs with health in server/health/; the rules stay in core",
}


def find_impurities(source: str, rel_path: str) -> list[tuple[str, int, str]]:
    """(path, line, what) for each impure import or call in one file; `rel_path` is relative to src/corral."""
    found = []
    for node in ast.walk(ast.parse(source, rel_path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in IMPURE_MODULES:
                    found.append((rel_path, node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            top = node.module.split(".")[0]
            if top in IMPURE_MODULES:
                found.append((rel_path, node.lineno, f"from {node.module} import ..."))
            elif top == "random":
                for alias in node.names:
                    if alias.name not in RANDOM_ALLOWED:
                        found.append((rel_path, node.lineno, f"from random import {alias.name}"))
        elif isinstance(node, ast.Call):
            what = _impure_call(node.func)
            if what:
                found.append((rel_path, node.lineno, what))
    return found


def _impure_call(func: ast.expr) -> str | None:
    """What is impure about calling `func`, or None: open()/print(), x.now()/x.utcnow()/x.today(), random.f()."""
    if isinstance(func, ast.Name) and func.id in BUILTIN_IO:
        return f"{func.id}()"
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in CLOCK_CALLS and isinstance(func.value, ast.Name | ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else func.value.attr
        if owner in {"datetime", "date"}:
            return f"{owner}.{func.attr}()"
    if isinstance(func.value, ast.Name) and func.value.id == "random" and func.attr not in RANDOM_ALLOWED:
        return f"random.{func.attr}()"
    return None


def _scan() -> list[tuple[str, int, str]]:
    found = []
    for package in PURE_PACKAGES:
        for path in sorted((SRC / package).rglob("*.py")):
            found.extend(find_impurities(path.read_text(), path.relative_to(SRC).as_posix()))
    return found


def test_core_and_scheduler_do_no_io_and_read_no_clock() -> None:
    offenders = [f"{p}:{line}: {what}" for p, line, what in _scan() if (p, what) not in KNOWN_OFFENDERS]
    assert not offenders, (
        "core/ and scheduler/ are pure (STYLE.md): pass time and a seeded random.Random in, do I/O in the caller:\n"
        + "\n".join(offenders)
    )


def test_known_offenders_still_exist() -> None:
    """An entry of KNOWN_OFFENDERS that the code no longer has must go, so the list never hides a new offence."""
    found = {(p, what) for p, _, what in _scan()}
    assert set(KNOWN_OFFENDERS) <= found, f"fixed, remove from KNOWN_OFFENDERS: {set(KNOWN_OFFENDERS) - found}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\n", "import os"),
        ("import os.path\n", "import os.path"),
        ("from pathlib import Path\n", "from pathlib import ..."),
        ("def f():\n    import time\n    return time.monotonic()\n", "import time"),
        ("from datetime import datetime\nx = datetime.now()\n", "datetime.now()"),
        ("import datetime\nx = datetime.datetime.utcnow()\n", "datetime.utcnow()"),
        ("from datetime import date\nx = date.today()\n", "date.today()"),
        ("import random\nrandom.shuffle([1, 2])\n", "random.shuffle()"),
        ("from random import choice\n", "from random import choice"),
        ("with open('x') as f:\n    pass\n", "open()"),
        ("from sqlalchemy import select\n", "from sqlalchemy import ..."),
        ("import httpx\n", "import httpx"),
    ],
)
def test_scan_finds(source: str, expected: str) -> None:
    found = find_impurities(source, "core/x.py")
    assert [what for _, _, what in found if what == expected], found


def test_scan_allows_seeded_generators_and_time_as_data() -> None:
    source = (
        "import random\nfrom random import Random\nfrom datetime import UTC, datetime, timedelta\n"
        "from collections.abc import Sequence\nimport math\n"
        "def f(now: datetime, rng: random.Random) -> float:\n"
        "    r = random.Random(7)\n    return rng.random() + r.random() + (now + timedelta(seconds=1)).timestamp()\n"
    )
    assert find_impurities(source, "scheduler/x.py") == []
