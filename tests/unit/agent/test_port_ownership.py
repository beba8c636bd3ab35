"""The agent's web-UI port check (pure parts): which processes are the job's, and the verdict on a port."""

from __future__ import annotations

import pytest

from corral.agent.webports import compute_job_pids, compute_port_verdict

# pid -> (parent, process group, session); 100 is the job's shim (leads its session and group)
TABLE = {
    1: (0, 1, 1),
    100: (1, 100, 100),  # the shim
    101: (100, 100, 100),  # the job's command
    102: (101, 102, 100),  # a child in a group of its own, same session
    103: (1, 103, 103),  # escaped: setsid + double fork, reparented to init
    104: (101, 104, 104),  # setsid only: still a descendant of the shim
    105: (104, 104, 104),  # ... and its child
    200: (1, 200, 200),  # another job's shim
    201: (200, 200, 200),
}


def test_the_jobs_processes_are_its_session_group_and_tree() -> None:
    assert compute_job_pids(100, TABLE) == {100, 101, 102, 104, 105}
    assert compute_job_pids(200, TABLE) == {200, 201}


@pytest.mark.parametrize(
    ("name", "leader", "listeners", "mine", "verdict"),
    [
        ("the job's own socket", 100, {7}, {7, 8}, (True, "")),
        ("not running here", None, {7}, set(), (False, "the job is not running on this node")),
        ("nothing listens", 100, set(), {8}, (False, "nothing listens on port 20000")),
        ("another's socket", 100, {9}, {7}, (False, "port 20000 is held by a process that is not the job's")),
        ("its own and another's", 100, {7, 9}, {7}, (False, "port 20000 is held by a process that is not the job's")),
    ],
)
def test_port_verdict(
    name: str, leader: int | None, listeners: set[int], mine: set[int], verdict: tuple[bool, str]
) -> None:
    assert compute_port_verdict(20000, leader, listeners, mine) == verdict, name
