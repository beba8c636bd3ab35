"""The README lists every benchmark under bench/ (a user finds each figure's command there)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_lists_every_benchmark() -> None:
    readme = (ROOT / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name != "benchlib.py")
    assert scripts, "no benchmark found: the test would pass over nothing"
    missing = [name for name in scripts if f"bench/{name}" not in readme]
    assert not missing, f"README does not list: {missing}"
