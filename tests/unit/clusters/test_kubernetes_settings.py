"""The kubernetes pool's pure parts: its settings, Kubernetes quantities, namespace and label names made from
tenant names, tolerations. No client, no server (the module imports without the kubernetes package)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from corral.clusters.base import ClusterError
from corral.clusters.kubernetes import (
    check_settings,
    compute_label_value,
    compute_namespace,
    compute_toleration,
    parse_quantity,
)
from corral.core.errors import ValidationError

GOOD = {"kubeconfig": "/etc/corral/kubeconfig"}


@pytest.mark.parametrize(
    ("name", "settings", "field"),
    [
        ("unknown key", {**GOOD, "namespace": "x"}, "settings.namespace"),
        ("no kubeconfig", {}, "settings.kubeconfig"),
        ("relative kubeconfig", {"kubeconfig": "kubeconfig"}, "settings.kubeconfig"),
        ("kubeconfig with ..", {"kubeconfig": "/etc/../root/kc"}, "settings.kubeconfig"),
        ("context with a space", {**GOOD, "context": "a b"}, "settings.context"),
        ("prefix upper case", {**GOOD, "namespace_prefix": "Corral-"}, "settings.namespace_prefix"),
        ("prefix too long", {**GOOD, "namespace_prefix": "c" * 31}, "settings.namespace_prefix"),
        ("gpu resource with a space", {**GOOD, "gpu_resource": "nvidia.com/ gpu"}, "settings.gpu_resource"),
        ("model label with a slash too many", {**GOOD, "model_label": "a/b/c"}, "settings.model_label"),
        ("memory label empty", {**GOOD, "memory_label": ""}, "settings.memory_label"),
    ],
)
def test_bad_settings_name_their_field(name: str, settings: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_settings(settings)
    assert e.value.field == field, name


def test_good_settings_are_kept() -> None:
    full = {**GOOD, "context": "admin@prod", "namespace_prefix": "gpu-", "gpu_resource": "amd.com/gpu"}
    assert check_settings(full) == full
    assert check_settings(GOOD) == GOOD


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16", Decimal(16)),
        ("15500m", Decimal("15.5")),
        ("64Gi", Decimal(64 * 2**30)),
        ("128974848Ki", Decimal(128974848 * 1024)),
        ("1e3", Decimal(1000)),
        ("1.5G", Decimal(1_500_000_000)),
        ("2E", Decimal(2 * 10**18)),
        ("100u", Decimal("0.0001")),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1 Gi", "1GB", "abc", "1..2"])
def test_not_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("tenant", "namespace"),
    [("default", "corral-default"), ("team-a", "corral-team-a")],
)
def test_a_dns_safe_tenant_name_is_its_namespace_as_given(tenant: str, namespace: str) -> None:
    assert compute_namespace("corral-", tenant) == namespace


@pytest.mark.parametrize("tenant", ["../x", "Team_A", "team.a", "a" * 70, "x/../../kube-system", "-", ""])
def test_other_tenant_names_make_bounded_dns_labels_of_their_own(tenant: str) -> None:
    ns = compute_namespace("corral-", tenant)
    assert ns.startswith("corral-") and len(ns) <= 63
    assert all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in ns) and not ns.endswith("-")
    assert ns != compute_namespace("corral-", tenant + "x")


@pytest.mark.parametrize(("value", "kept"), [("team-a", True), ("Team_A.1", True), ("../x", False), ("a" * 64, False)])
def test_label_values(value: str, kept: bool) -> None:
    out = compute_label_value(value)
    assert (out == value) is kept and len(out) <= 63


@pytest.mark.parametrize(
    ("text", "toleration"),
    [
        ("spot", {"key": "spot", "operator": "Exists"}),
        ("spot:NoExecute", {"key": "spot", "operator": "Exists", "effect": "NoExecute"}),
        ("dedicated=ml", {"key": "dedicated", "operator": "Equal", "value": "ml"}),
        (
            "nvidia.com/gpu=present:NoSchedule",
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        ),
    ],
)
def test_tolerations(text: str, toleration: dict[str, str]) -> None:
    assert compute_toleration(text) == toleration


@pytest.mark.parametrize("text", ["", "=x", "a=b:Sometimes", "a b"])
def test_bad_tolerations(text: str) -> None:
    with pytest.raises(ClusterError):
        compute_toleration(text)
