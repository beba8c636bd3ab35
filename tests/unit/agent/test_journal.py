"""The agent's journal: what ran on which GPU and when, as the node itself saw it (issue 17's chaos checks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from corral.agent.journal import JOURNAL_FILE, Journal, overlaps, read_intervals


def test_starts_and_exits_make_intervals_and_a_gpu_held_twice_is_found(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.started(1, 1, 0, (0, 1))
    j.exited(1, 1, 0, 0)
    j.started(2, 1, 0, (1,))  # after 1 ended: fine
    j.started(3, 1, 0, (1,))  # while 2 still holds GPU 1: the double placement the chaos tests look for
    j.exited(3, 1, 0, 0)
    j.exited(2, 1, 0, 0)
    intervals = read_intervals("n1", tmp_path)
    assert sorted((i.run[0], i.gpu) for i in intervals) == [(1, 0), (1, 1), (2, 1), (3, 1)]
    assert all(i.end is not None and i.end >= i.start for i in intervals)
    found = overlaps(intervals)
    assert [(a.run[0], b.run[0], a.gpu) for a, b in found] == [(2, 3, 1)]
    assert overlaps([i for i in intervals if i.run[0] != 3]) == []


def test_a_run_still_going_holds_its_gpu_to_the_end(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.started(7, 1, 0, (0,))
    j.started(8, 1, 0, (0,))
    assert [(a.run[0], b.run[0]) for a, b in overlaps(read_intervals("n", tmp_path))] == [(7, 8)]
    other = tmp_path / "other"
    Journal(other).started(8, 1, 0, (0,))  # the same GPU index on another node is another GPU
    both = read_intervals("a", tmp_path)[:1] + read_intervals("b", other)
    assert overlaps(both) == []


def test_the_journal_rotates_and_reads_across_the_rotation(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_bytes=200)
    for job in range(1, 6):
        j.started(job, 1, 0, (0,))
        j.exited(job, 1, 0, 0)
    assert (tmp_path / (JOURNAL_FILE + ".1")).exists()
    assert (tmp_path / JOURNAL_FILE).stat().st_size <= 400
    lines = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert all(json.loads(line)["event"] in ("start", "exit") for line in lines)


def test_a_journal_that_cannot_be_written_never_stops_the_agent(tmp_path: Path, caplog: object) -> None:
    d = tmp_path / "j"
    j = Journal(d)
    os.chmod(d, 0o500)
    (d / JOURNAL_FILE).unlink(missing_ok=True)
    try:
        if os.geteuid() == 0:  # root writes anyway: make the path a directory instead
            (d / JOURNAL_FILE).mkdir()
        j.started(1, 1, 0, (0,))  # no exception
        j.exited(1, 1, 0, 0)
    finally:
        os.chmod(d, 0o700)
    assert j._failing
    assert read_intervals("n", tmp_path / "nothing") == []
