"""Python's `$` also matches before a trailing newline: every name check must refuse "name\\n" (a tenant, a user, a
queue, an image, a container user, a secret, an environment variable, a registry host, an alert rule, a job id on
the node), or a hostile member stores names that print as someone else's on the next line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError as SchemaError

from corral.alerts.rules import KNOWN_METRICS, AlertRule, Comparison
from corral.api.schemas import JobSubmit
from corral.api.secrets import check_registry_host, check_secret_name
from corral.core.containers import check_image, check_user
from corral.core.errors import ValidationError
from corral.core.tenancy import check_name
from corral.executors.jobdir import check_job_id

METRIC = sorted(KNOWN_METRICS)[0]
CHECKS: list[tuple[str, Callable[[str], object], str]] = [
    ("tenant name", lambda v: check_name("tenant", v), "team"),
    ("image", check_image, "corral-test/busybox:1"),
    ("container user", check_user, "1000:1000"),
    ("secret name", check_secret_name, "token"),
    ("registry host", check_registry_host, "registry.example.com:5000"),
    ("job id on the node", check_job_id, "12.1"),
    ("environment variable", lambda v: JobSubmit(command=["true"], env={v: "x"}), "HOME_DIR"),
]


@pytest.mark.parametrize(("what", "check", "good"), CHECKS, ids=[c[0] for c in CHECKS])
def test_a_trailing_newline_is_refused(what: str, check: Callable[[str], object], good: str) -> None:
    check(good)
    with pytest.raises((ValidationError, ValueError, SchemaError)):
        check(good + "\n")


def test_an_alert_rule_name_with_a_trailing_newline_is_refused() -> None:
    AlertRule(name="hot", metric=METRIC, comparison=Comparison.GT, threshold=90)
    with pytest.raises(ValidationError):
        AlertRule(name="hot\n", metric=METRIC, comparison=Comparison.GT, threshold=90)
