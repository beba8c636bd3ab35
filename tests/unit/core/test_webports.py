"""Jobs' web-UI ports (pure): the configured range, and the choice of a port no other job of the node holds."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.webports import DEFAULT_JOB_PORTS, parse_port_range, select_job_port

PORTS = range(20000, 20004)


@pytest.mark.parametrize(
    ("name", "job_id", "current", "held", "chosen"),
    [
        ("keeps its port when free", 7, 20002, set(), 20002),
        ("a port another job holds is never kept", 7, 20002, {20002}, 20001),  # 7*7919 % 4 = 1
        ("a declared port outside the range is not used", 4, 8600, set(), 20000),
        ("asked for a UI, no port yet", 5, 0, {20003}, 20000),  # 5*7919 % 4 = 3, held: wraps
        ("skips what is held, wrapping around", 3, None, {20001, 20002, 20003}, 20000),
        ("a full range gives none", 1, None, {20000, 20001, 20002, 20003}, None),
    ],
)
def test_select_job_port(name: str, job_id: int, current: int | None, held: set[int], chosen: int | None) -> None:
    assert select_job_port(job_id, current, held, PORTS) == chosen, name


def test_the_choice_depends_on_the_job_and_the_held_ports_only() -> None:
    ports = parse_port_range(DEFAULT_JOB_PORTS)
    assert select_job_port(42, 0, {1}, ports) == select_job_port(42, 0, {1}, ports)
    assert len({select_job_port(j, 0, set(), ports) for j in range(1, 200)}) == 199  # spread, not all at LOW


@pytest.mark.parametrize("text", ["", "20000", "a-b", "29999-20000", "80-90", "20000-70000", "20000-20000"])
def test_bad_ranges_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_port_range(text)
    assert caught.value.field == "job_ports"


def test_default_range_stays_below_the_gangs_master_ports() -> None:
    assert parse_port_range(DEFAULT_JOB_PORTS)[-1] < 29500


def test_another_clusters_salt_starts_elsewhere_and_a_kept_port_ignores_it() -> None:
    assert select_job_port(1, None, set(), PORTS, salt=1) != select_job_port(1, None, set(), PORTS, salt=0)
    assert select_job_port(1, 20002, set(), PORTS, salt=1) == 20002
