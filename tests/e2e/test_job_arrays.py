"""Job arrays from the shell (issue 13), with real `corral up` and CLI processes: one `corral submit --array`
makes the tasks, each reads its index, the `%N` limit holds, and `corral jobs` folds them into one line."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from .conftest import Corral, wait_for

pytestmark = pytest.mark.e2e


def test_an_array_from_the_cli_runs_every_index_at_most_two_at_once(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    r = c.cli(
        "submit",
        "--array",
        "0-4%2",
        "--gpus",
        "1",
        "--name",
        "sweep",
        "--",
        "sh",
        "-c",
        "echo task=$CORRAL_ARRAY_INDEX; sleep 2",
    )
    assert r.returncode == 0, r.stderr
    array_id = int(r.stdout.strip())  # the array's id: its first task's
    tasks = [j for j in c.cli_json("jobs", "--all") if j.get("array_id") == array_id]
    assert sorted(t["array_index"] for t in tasks) == [0, 1, 2, 3, 4] and min(t["id"] for t in tasks) == array_id

    # The folded view: one line for the array's pending tasks, squeue's spelling of its id.
    pending = wait_for(
        lambda: re.search(rf"^{array_id}_\[[\d,-]+%2\]\s+sweep\s+\S+\s+PENDING", c.cli("jobs").stdout, re.M),
        30,
        "a folded line",
    )
    assert pending is not None
    expanded = c.cli("jobs", "--all", "-r").stdout.splitlines()  # one line per task, by its own id
    assert "_[" not in "".join(expanded) and len(expanded) == 1 + 5, expanded

    most = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        states = [j["state"] for j in c.api_jobs() if j.get("array_id") == array_id]
        most = max(most, states.count("RUNNING"))
        if states.count("SUCCEEDED") == 5:
            break
        time.sleep(0.2)
    assert most == 2  # eight GPUs free, yet never more than the limit
    for t in tasks:
        assert c.cli("logs", str(t["id"])).stdout.strip() == f"task={t['array_index']}"
    done = c.cli("jobs", "--all").stdout
    assert re.search(rf"^{array_id}_\[0-4%2\]\s+sweep\s+\S+\s+SUCCEEDED", done, re.M), done


def test_a_bad_array_is_one_line_naming_the_flag(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    for spec, words in (("5-1", "low to high"), ("0-3%0", "limit after %")):
        r = c.cli("submit", "--array", spec, "--", "true")
        assert r.returncode == 1 and r.stderr.startswith("error: --array: ") and words in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
    assert c.api_jobs() == []
