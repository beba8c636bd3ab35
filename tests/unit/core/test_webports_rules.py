"""Jobs' web-UI port range at its limits, and where the cluster's salt starts the search."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.webports import parse_port_range, select_job_port


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1024-1025", range(1024, 1026), id="lowest-two-ports"),
        pytest.param("65534-65535", range(65534, 65536), id="highest-two-ports"),
        pytest.param(" 20000-29499 ", range(20000, 29500), id="default-high-is-inclusive"),
    ],
)
def test_port_ranges_are_inclusive(text: str, expected: range) -> None:
    assert parse_port_range(text) == expected


@pytest.mark.parametrize("text", ["1023-2000", "2000-65536", "2000-2000", "3000-2000"])
def test_ports_outside_1024_to_65535_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_port_range(text, field="CORRAL_JOB_PORTS")
    assert e.value.field == "CORRAL_JOB_PORTS"
    assert e.value.problem == f"expected 1024 <= LOW < HIGH <= 65535, got {text!r}"


@pytest.mark.parametrize("text", ["", "20000", "a-b", "20000-"])
def test_malformed_ranges_show_an_example(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_port_range(text)
    assert e.value.field == "job_ports"
    assert e.value.problem == f"expected LOW-HIGH such as 20000-29499, got {text!r}"


def test_the_salt_moves_the_start_forward() -> None:
    ports = range(20000, 20010)
    # job 0 starts at the range's low end; a cluster's salt moves its start that many ports up
    assert [select_job_port(0, None, set(), ports, salt=s) for s in (0, 1, 3, 9, 10)] == [
        20000,
        20001,
        20003,
        20009,
        20000,
    ]
