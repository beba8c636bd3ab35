"""Cloud pools (core/pools.py): what an admin may declare, the CLI's short form of a type, and what nodes cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.errors import ValidationError
from corral.core.pools import (
    FAILED,
    LAUNCHING,
    RELEASED,
    RUNNING,
    SPOT_TAINT,
    InstanceType,
    PoolNode,
    PoolSpec,
    check_pool,
    compute_spend,
    format_instance_type,
    parse_instance_type,
)

G4 = InstanceType("g4", 4, "A100-80GB", 81920, price_per_hour=2.5)


def _pool(**kw: object) -> PoolSpec:
    spec = PoolSpec("burst", "local", (G4,), max_nodes=2)
    return replace(spec, **kw)


def _field(spec: PoolSpec) -> str:
    with pytest.raises(ValidationError) as e:
        check_pool(spec)
    return e.value.field


def test_a_valid_pool_passes_unchanged() -> None:
    spec = _pool(labels={"team": "ml"}, taints=("gpu=burst:NoSchedule",), min_nodes=1)
    assert check_pool(spec) is spec


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (_pool(name="Bad_Name"), "name"),
        (_pool(name="static"), "name"),
        (_pool(min_nodes=3, max_nodes=2), "min_nodes"),
        (_pool(provider="gcp"), "provider"),
        (_pool(labels={"bad key!": "x"}), "labels"),
        (_pool(labels={"pool": "other"}), "labels"),
        (_pool(labels={"team": "has space"}), "labels"),
        (_pool(instance_types=(G4, replace(G4, price_per_hour=1.0))), "instance_types.name"),
        (_pool(instance_types=()), "instance_types"),
        (_pool(instance_types=(replace(G4, gpus=65),)), "instance_types.gpus"),
        (_pool(instance_types=(replace(G4, price_per_hour=float("nan")),)), "instance_types.price_per_hour"),
        (_pool(join_timeout_s=1.0), "join_timeout_s"),
        (_pool(max_nodes=-1), "max_nodes"),
        (_pool(kind="static"), "kind"),
    ],
)
def test_check_pool_names_the_bad_field(spec: PoolSpec, field: str) -> None:
    assert _field(spec) == field


def test_static_is_refused_as_a_pool_name_with_a_reason() -> None:
    with pytest.raises(ValidationError, match="static"):
        check_pool(_pool(name="static"))


def test_parse_instance_type_fills_the_model_memory_and_spot() -> None:
    t = parse_instance_type("g4=4xA100,price=2.5,spot")
    assert t.name == "g4"
    assert t.gpus == 4
    assert t.gpu_model == "A100-80GB"
    assert t.gpu_memory_mib == 81920
    assert t.price_per_hour == 2.5
    assert t.spot is True


def test_parse_instance_type_reads_cpus_memory_and_model_memory_from_the_name() -> None:
    t = parse_instance_type("p5.48xlarge=8xH100-80GB,price=98.32,cpus=192,memory=2048")
    assert (t.name, t.gpus, t.gpu_model, t.gpu_memory_mib) == ("p5.48xlarge", 8, "H100-80GB", 80 * 1024)
    assert (t.cpus, t.memory_gib, t.price_per_hour, t.spot) == (192, 2048, 98.32, False)


@pytest.mark.parametrize(
    "t",
    [
        InstanceType("g4", 4, "A100-80GB", 81920, price_per_hour=2.5, spot=True),
        InstanceType("p4d.24xlarge", 8, "A100-40GB", 40960, cpus=96, memory_gib=1152, price_per_hour=32.77),
        InstanceType("g1", 1, "L4-24GB", 24576, price_per_hour=0.8),
    ],
)
def test_format_then_parse_gives_the_same_type(t: InstanceType) -> None:
    assert parse_instance_type(format_instance_type(t)) == t


@pytest.mark.parametrize(
    "text",
    ["g4", "g4=A100", "g4=4xA100,price=cheap", "g4=4xA100,colour=red", "g4=65xA100", "g4=4xA100,cpus=x"],
)
def test_a_bad_instance_type_raises_naming_the_flag(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_instance_type(text, "--instance-type")
    assert e.value.field.startswith("--instance-type")


def test_a_spot_type_node_carries_the_spot_taint_and_the_pool_label() -> None:
    spot = replace(G4, spot=True)
    info = spot.node_info("burst-1", _pool().node_labels(), ("team=ml",))
    assert SPOT_TAINT in info.taints and "team=ml" in info.taints
    assert ("pool", "burst") in info.labels
    assert len(info.gpus) == 4 and all(g.memory_mib == 81920 for g in info.gpus)
    assert SPOT_TAINT not in G4.node_info("burst-2").taints


def test_describe_and_largest() -> None:
    g8 = InstanceType("g8", 8, "A100-80GB", 81920, price_per_hour=20.0)
    assert G4.describe == "g4 (4 x A100-80GB, 2.50/h)"
    assert replace(G4, spot=True).describe == "g4 (4 x A100-80GB, spot, 2.50/h)"
    assert _pool(instance_types=(G4, g8)).largest == g8


def _node(launched: float, ended: float | None, state: str = RELEASED, price: float = 2.5) -> PoolNode:
    return PoolNode("n", "burst", "g4", state, launched, price_per_hour=price, ended_s=ended)


def test_spend_is_price_times_hours() -> None:
    assert compute_spend([_node(0.0, 7200.0)], now_s=10_000.0) == pytest.approx(5.0)


def test_spend_of_a_live_node_runs_to_now() -> None:
    assert compute_spend([_node(0.0, None, RUNNING)], now_s=3600.0) == pytest.approx(2.5)


def test_spend_since_the_month_start_cuts_the_earlier_hours() -> None:
    month_start = 3600.0
    assert compute_spend([_node(0.0, 7200.0)], 10_000.0, since_s=month_start) == pytest.approx(2.5)
    # a node that ended before the month began costs nothing this month
    assert compute_spend([_node(0.0, 1800.0, FAILED)], 10_000.0, since_s=month_start) == 0.0


def test_spend_sums_nodes() -> None:
    nodes = [_node(0.0, 7200.0), _node(0.0, 3600.0, price=1.0), _node(100.0, None, LAUNCHING, price=0.0)]
    assert compute_spend(nodes, 10_000.0) == pytest.approx(6.0)
