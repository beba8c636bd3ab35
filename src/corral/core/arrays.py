"""Job arrays, as Slurm's `--array` spells them: `0-999`, `1,3,5-7`, `0-15:4` (every 4th), and `%N` at the end to
run at most N tasks at once (`0-999%50`). An array is one submission of many tasks that differ only by their
index (the task's CORRAL_ARRAY_INDEX). Pure: parsing, bounds and the compact form shown by `corral jobs`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.core.errors import ValidationError

MAX_ARRAY_TASKS = 10_000  # tasks in one array (Slurm's MaxArraySize defaults to 1,001)
MAX_ARRAY_INDEX = 1_000_000
MAX_ARRAY_TEXT = 1024

_ITEM = re.compile(r"^(\d{1,7})(?:-(\d{1,7})(?::(\d{1,7}))?)?$")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The task indices (ascending, no repeats) and the most tasks running at once (None: no limit)."""

    indices: tuple[int, ...]
    limit: int | None = None


def parse_array(text: str, field: str = "array") -> ArraySpec:
    """`0-999%50` -> indices 0..999, limit 50; ValidationError naming `field` and what is wrong."""
    if len(text) > MAX_ARRAY_TEXT:
        raise ValidationError(field, f"at most {MAX_ARRAY_TEXT} characters")
    body, sep, cap = text.strip().partition("%")
    limit = None
    if sep:
        if not cap.isdigit() or len(cap) > 7 or int(cap) < 1:
            raise ValidationError(field, f"the limit after % must be a whole number >= 1, got {cap!r}")
        limit = int(cap)
    if not body:
        raise ValidationError(field, "no indices: write them as 0-999, 1,3,5-7 or 0-15:4 (with %N to run N at once)")
    seen: set[int] = set()
    for item in body.split(","):
        m = _ITEM.match(item.strip())
        if not m:
            raise ValidationError(field, f"{item.strip()!r} is not an index, a range N-M or a stepped range N-M:S")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first:
            raise ValidationError(field, f"{item.strip()!r}: a range goes from low to high")
        if step < 1:
            raise ValidationError(field, f"{item.strip()!r}: the step must be >= 1")
        if last > MAX_ARRAY_INDEX:
            raise ValidationError(field, f"indices go up to {MAX_ARRAY_INDEX}")
        if (last - first) // step + 1 + len(seen) > MAX_ARRAY_TASKS:
            raise ValidationError(field, f"at most {MAX_ARRAY_TASKS} tasks in one array")
        for i in range(first, last + 1, step):
            if i in seen:
                raise ValidationError(field, f"index {i} is given twice")
            seen.add(i)
    return ArraySpec(tuple(sorted(seen)), limit)


def format_indices(indices: Iterable[int]) -> str:
    """The compact form of a set of indices: `0-4,7,9-10` (runs of consecutive numbers folded)."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def compute_array_group(array_id: int | None, array_index: int | None) -> int | None:
    """Which array of one submission call a new job belongs to, as the store reads a spec before it is stored:
    its `array_id` is then a key shared by the tasks of one array (the API gives each array of a batch its own),
    a task without one belongs to the call's only array, and None is a job outside any array."""
    if array_id is not None:
        return array_id
    return 0 if array_index is not None else None


def assign_array_ids(groups: Sequence[int | None], ids: Sequence[int]) -> list[int | None]:
    """The stored `array_id` of each new job: the id of the first job of its group (compute_array_group)."""
    first: dict[int, int] = {}
    return [None if g is None else first.setdefault(g, job_id) for g, job_id in zip(groups, ids, strict=True)]
