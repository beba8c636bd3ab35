"""Job array indices as Slurm's --array spells them, and the compact form `corral jobs` shows."""

from __future__ import annotations

import pytest

from corral.core.arrays import MAX_ARRAY_TASKS, ArraySpec, format_indices, parse_array
from corral.core.errors import ValidationError


@pytest.mark.parametrize(
    ("text", "indices", "limit"),
    [
        ("0-3", (0, 1, 2, 3), None),
        ("7", (7,), None),
        ("1,3,5-7", (1, 3, 5, 6, 7), None),
        ("0-15:4", (0, 4, 8, 12), None),
        ("0-999%50", tuple(range(1000)), 50),
        (" 9,2 %1", (2, 9), 1),
        (f"0-{MAX_ARRAY_TASKS - 1}", tuple(range(MAX_ARRAY_TASKS)), None),
    ],
)
def test_slurm_spellings_parse(text: str, indices: tuple[int, ...], limit: int | None) -> None:
    assert parse_array(text) == ArraySpec(indices, limit)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no indices"),
        ("%5", "no indices"),
        ("3-1", "low to high"),
        ("0-9:0", "step must be >= 1"),
        ("1,2,1", "index 1 is given twice"),
        ("0-3,2-5", "index 2 is given twice"),
        (f"0-{MAX_ARRAY_TASKS}", f"at most {MAX_ARRAY_TASKS} tasks"),
        ("0-9%0", "limit after %"),
        ("0-9%x", "limit after %"),
        ("0-9%-1", "limit after %"),
        ("-1", "not an index"),
        ("a-b", "not an index"),
        ("1.5", "not an index"),
        ("2000000", "indices go up to 1000000"),
        ("1" * 1025, "at most 1024 characters"),
    ],
)
def test_what_is_not_an_array_is_refused_naming_the_field(text: str, words: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_array(text, "--array")
    assert e.value.field == "--array" and words in e.value.problem


def test_many_ranges_cannot_add_up_past_the_limit() -> None:
    half = MAX_ARRAY_TASKS // 2
    assert len(parse_array(f"0-{half - 1},{half}-{2 * half - 1}").indices) == MAX_ARRAY_TASKS
    with pytest.raises(ValidationError, match="at most"):
        parse_array(f"0-{half - 1},{half}-{2 * half}")


@pytest.mark.parametrize(
    ("indices", "text"),
    [((0, 1, 2, 3), "0-3"), ((7,), "7"), ((1, 3, 5, 6, 7), "1,3,5-7"), ((9, 2, 3, 3), "2-3,9"), ((), "")],
)
def test_indices_fold_into_ranges(indices: tuple[int, ...], text: str) -> None:
    assert format_indices(indices) == text
