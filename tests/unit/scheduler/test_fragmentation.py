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
    assert compute_fragmentation(case.free, models[: len(case.free)], case.cpu_left, profile) == pytest.approx(
        case.expected
    )


THIRD = 1 / 3
MORE_CASES = [
    # (name, profile counts, free milli, models, expected milli)
    ("a 2-GPU shape needs two GPUs with room", {Shape(0, 1000, 2): 1}, [1000, 600], ["A100"] * 2, 1600.0),
    ("two GPUs with room: only the small one strands", {Shape(0, 1000, 2): 1}, [1000, 1000, 600], ["A100"] * 3, 600.0),
    ("every small GPU adds up", {Shape(0, 1000, 1): 1}, [300, 200, 1000], ["A100"] * 3, 500.0),
    ("one milli free is stranded", {Shape(0, 1000, 1): 1}, [1, 0], ["A100"] * 2, 1.0),
    (
        "shapes that cannot fit each add, whatever their order",
        {Shape(0, 1000, 2): 1, Shape(0, 1000, 3): 1, Shape(0, 500, 1): 1},
        [1000, 600],
        ["A100"] * 2,
        2 * THIRD * 1600,
    ),
    (
        "wrong-model shapes each add, whatever their order",
        {Shape(0, 1000, 1, ("V100",)): 1, Shape(0, 1000, 1, ("T4",)): 1, Shape(0, 500, 1): 1},
        [600, 300],
        ["A100"] * 2,
        THIRD * 300 + 2 * THIRD * 900,
    ),
    (
        "mixed models: only the allowed model's GPUs are usable",
        {Shape(0, 1000, 1, ("T4",)): 1},
        [1000, 1000],
        ["A100", "T4"],
        1000.0,
    ),
]


@pytest.mark.parametrize(("name", "counts", "free", "models", "expected"), MORE_CASES, ids=[c[0] for c in MORE_CASES])
def test_fragmentation_by_shape(
    name: str, counts: dict[Shape, int], free: list[int], models: list[str], expected: float
) -> None:
    assert compute_fragmentation(free, models, 8000, profile_from_counts(counts)) == pytest.approx(expected)
