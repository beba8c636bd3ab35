"""The fragmentation measure on hand-computed cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from corral.scheduler.fragmentation import compute_fragmentation
from corral.scheduler.workload import Shape, profile_from_counts

HALF_AND_WHOLE = profile_from_counts({Shape(1000, 500, 1): 1, Shape(1000, 1000, 1): 1})


@dataclass
class Case:
    name: str
    free: list[int]
    cpu_left: int
    expected: float
    models: tuple[str, ...] = ()


CASES = [
    Case("empty node strands nothing", [1000, 1000], 8000, 0.0),
    Case("full node has nothing to strand", [0, 0], 8000, 0.0),
    Case("300 free: too small for both shapes", [300, 1000], 8000, 300.0),
    Case("600 free: usable by halves, stranded for wholes", [600, 0], 8000, 0.5 * 0 + 0.5 * 600),
    Case("600 + 1000 free", [600, 1000], 8000, 0.5 * 0 + 0.5 * 600),
    Case("no CPU left strands every GPU", [1000, 1000], 0, 2000.0),
    Case("wrong model strands every GPU", [1000], 8000, 1000.0, ("T4",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fragmentation(case: Case) -> None:
    profile = HALF_AND_WHOLE
    if case.models:
        profile = profile_from_counts({Shape(1000, 1000, 1, ("V100",)): 1})
    models = list(case.models or ("A100",)) * len(case.free) if case.models else ["A100"] * len(case.free)
    assert compute_fragmentation(case.free, models[: len(case.free)], case.cpu_left, profile) == pytest.approx(case.expected)
