"""Runtime dependencies are only what runs: each one in pyproject is imported by src/corral, plotting is an extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "corral"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Distribution name -> the top-level module it is imported as, where the two differ.
IMPORT_NAME = {
    "nvidia-ml-py": "pynvml",
    "argon2-cffi": "argon2",
    "prometheus-client": "prometheus_client",
    "pydantic-settings": "pydantic_settings",
    "psycopg": "psycopg",
}
# Dependencies nothing imports by name but that still run: distribution -> the text in src/corral that loads it.
LOADED_BY_NAME = {
    "psycopg": "postgresql+psycopg://",  # SQLAlchemy's driver for PostgreSQL URLs (store/sql.py)
}


def _distribution(requirement: str) -> str:
    """`psycopg[binary]==3.3.9` -> `psycopg`."""
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def _imported_top_level_modules() -> set[str]:
    """Every top-level module imported anywhere in src/corral (top level or inside a function)."""
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def unused_dependencies(requirements: list[str], imported: set[str], source_text: str) -> list[str]:
    """The distributions among `requirements` that nothing in the source imports or loads by name."""
    unused = []
    for requirement in requirements:
        dist = _distribution(requirement)
        module = IMPORT_NAME.get(dist, dist.replace("-", "_"))
        loaded = dist in LOADED_BY_NAME and LOADED_BY_NAME[dist] in source_text
        if module not in imported and not loaded:
            unused.append(dist)
    return unused


def test_every_runtime_dependency_is_used_by_src() -> None:
    source_text = "\n".join(p.read_text() for p in SRC.rglob("*.py"))
    unused = unused_dependencies(PYPROJECT["project"]["dependencies"], _imported_top_level_modules(), source_text)
    assert unused == [], (
        f"runtime dependencies nothing in src/corral imports (drop them, or make them extras): {unused}"
    )


def test_the_check_reports_a_dependency_nothing_imports() -> None:
    assert unused_dependencies(["numpy==2.4.6", "httpx==0.28.1"], {"httpx"}, "") == ["numpy"]
    assert unused_dependencies(["nvidia-ml-py==1"], {"pynvml"}, "") == []
    assert unused_dependencies(["psycopg[binary]==3"], set(), "url = 'postgresql+psycopg://'") == []


def test_plotting_is_an_extra_not_a_runtime_dependency() -> None:
    runtime = {_distribution(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "matplotlib" not in runtime
    assert any(_distribution(r) == "matplotlib" for r in extras["plot"])
    assert any(_distribution(r) == "matplotlib" for r in extras["dev"])  # `make test` runs the plotting tests


@pytest.mark.parametrize("module", ["corral.cli.simulate", "corral.cli.simulate_jobs"])
def test_plot_without_matplotlib_says_how_to_install_it(
    module: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    cli = __import__(module, fromlist=["_plot"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(typer.Exit) as exit_info:
        cli._plot([], tmp_path / "out.png", "title")
    assert exit_info.value.exit_code == 1
    err = capsys.readouterr().err
    assert "--plot" in err and "pip install 'corral[plot]'" in err
    assert not (tmp_path / "out.png").exists()
