"""Simulated-GPU faults at their edges: value ranges, what `clear` may come with, and the messages."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.simfault import SimFault, parse_sim_fault


@pytest.mark.parametrize(
    ("data", "fault"),
    [
        pytest.param({"xid": 1}, SimFault(xid=1), id="lowest-xid"),
        pytest.param({"xid": 999}, SimFault(xid=999), id="highest-xid"),
        pytest.param({"temperature_c": 0}, SimFault(temperature_c=0.0), id="freezing"),
        pytest.param({"temperature_c": 0.5}, SimFault(temperature_c=0.5), id="just-above-freezing"),
        pytest.param({"temperature_c": 150}, SimFault(temperature_c=150.0), id="hottest"),
        pytest.param({"ecc": True, "off_bus": False}, SimFault(ecc=True), id="false-flag-is-no-fault"),
        pytest.param({"off_bus": True, "ecc": "yes"}, SimFault(off_bus=True), id="only-true-sets-a-flag"),
    ],
)
def test_limit_faults_are_accepted(data: dict[str, object], fault: SimFault) -> None:
    assert parse_sim_fault(data) == fault


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"clear": True, "ecc": False, "off_bus": False, "xid": None, "temperature_c": None}, id="all-off"),
        pytest.param({"clear": True}, id="alone"),
    ],
)
def test_clear_with_no_fault_clears(data: dict[str, object]) -> None:
    assert parse_sim_fault(data) is None


@pytest.mark.parametrize(
    "extra",
    [{"xid": 79}, {"ecc": True}, {"off_bus": True}, {"temperature_c": 95}],
)
def test_clear_cannot_come_with_any_fault(extra: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_fault({"clear": True, **extra})
    assert (e.value.field, e.value.problem) == ("clear", "clear cannot be combined with a fault")


def test_clear_cannot_come_with_a_zero_degree_fault() -> None:
    assert parse_sim_fault({"temperature_c": 0}) == SimFault(temperature_c=0.0)
    with pytest.raises(ValidationError):
        parse_sim_fault({"clear": True, "temperature_c": 0})


@pytest.mark.parametrize("xid", [0, 1000, -5, "79", True, 79.0])
def test_bad_xids_say_the_range(xid: object) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_fault({"xid": xid})
    assert (e.value.field, e.value.problem) == ("xid", f"expected an Xid code 1..999, got {xid!r}")


@pytest.mark.parametrize("temp", [-0.5, 150.5, 151, True, False, "95"])
def test_bad_temperatures_say_the_range(temp: object) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_fault({"temperature_c": temp})
    assert (e.value.field, e.value.problem) == ("temperature_c", f"expected degrees C 0..150, got {temp!r}")


@pytest.mark.parametrize("data", [{}, {"ecc": False}, {"xid": None, "temperature_c": None}, {"clear": False}])
def test_no_fault_asks_for_one(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_fault(data)
    assert e.value.field == "fault"
    assert e.value.problem == "name a fault: xid, ecc, off_bus or temperature_c (or clear)"


def test_merge_keeps_values_the_later_fault_leaves_unset() -> None:
    earlier = SimFault(xid=79, off_bus=True, temperature_c=90.0)
    assert earlier.merge(SimFault(ecc=True)) == SimFault(xid=79, ecc=True, off_bus=True, temperature_c=90.0)
    assert SimFault(ecc=True).merge(SimFault(xid=48, temperature_c=99.0)) == SimFault(
        xid=48, ecc=True, temperature_c=99.0
    )
    assert earlier.merge(SimFault(xid=48)).xid == 48
