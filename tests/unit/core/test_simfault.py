"""Simulated-GPU faults: parsing from API/CLI input, and merging."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.simfault import SimFault, parse_sim_fault


@pytest.mark.parametrize(
    ("data", "fault"),
    [
        ({"xid": 79}, SimFault(xid=79)),
        ({"ecc": True, "temperature_c": 95}, SimFault(ecc=True, temperature_c=95.0)),
        ({"off_bus": True}, SimFault(off_bus=True)),
        ({"clear": True}, None),
    ],
)
def test_parse_sim_fault(data: dict[str, object], fault: SimFault | None) -> None:
    assert parse_sim_fault(data) == fault


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "fault"),
        ({"xid": "79"}, "xid"),
        ({"xid": 0}, "xid"),
        ({"xid": True}, "xid"),
        ({"temperature_c": 500}, "temperature_c"),
        ({"clear": True, "xid": 79}, "clear"),
    ],
)
def test_parse_sim_fault_refuses_bad_input(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_sim_fault(data)
    assert caught.value.field == field


def test_merge_keeps_earlier_faults_and_takes_later_values() -> None:
    merged = SimFault(xid=79, temperature_c=90.0).merge(SimFault(ecc=True, temperature_c=95.0))
    assert merged == SimFault(xid=79, ecc=True, temperature_c=95.0)
