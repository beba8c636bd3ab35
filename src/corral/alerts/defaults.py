"""The rules every Corral server starts with (operators can disable or override them by name)."""

from __future__ import annotations

from corral.alerts.rules import AlertRule, Comparison, Severity

GPU_TEMPERATURE_WARN_C = 85.0
JOB_IDLE_PERCENT = 5.0
JOB_IDLE_FOR_S = 30 * 60.0
BUDGET_WARN_PERCENT = 80.0  # core/budgets.py WARN_PCT

DEFAULT_RULES: tuple[AlertRule, ...] = (
    AlertRule(
        name="gpu_unhealthy",
        metric="gpu_unhealthy",
        comparison=Comparison.GT,
        threshold=0,
        severity=Severity.CRITICAL,
        summary="GPU {gpu} on {node} taken out of the pool: {reason}",
    ),
    AlertRule(
        name="node_lost",
        metric="node_lost",
        comparison=Comparison.GT,
        threshold=0,
        severity=Severity.CRITICAL,
        summary="node {node} stopped sending heartbeats",
    ),
    AlertRule(
        name="gpu_temperature",
        metric="gpu_temperature_c",
        comparison=Comparison.GE,
        threshold=GPU_TEMPERATURE_WARN_C,
        for_s=120,
        severity=Severity.WARNING,
        summary="GPU {gpu} on {node} at {value:.0f} C for 2 minutes (limit {threshold:.0f} C)",
    ),
    AlertRule(
        name="gpu_ecc_errors",
        metric="gpu_ecc_dbe_total",
        comparison=Comparison.GT,
        threshold=0,
        severity=Severity.CRITICAL,
        summary="GPU {gpu} on {node} has {value:.0f} uncorrectable ECC errors",
    ),
    AlertRule(
        name="job_gpu_idle",
        metric="job_gpu_utilization_percent",
        comparison=Comparison.LT,
        threshold=JOB_IDLE_PERCENT,
        for_s=JOB_IDLE_FOR_S,
        severity=Severity.WARNING,
        summary="job {job} of {tenant} has kept its GPUs under {threshold:.0f}% busy for 30 minutes",
    ),
    AlertRule(
        name="budget_warning",
        metric="budget_used_percent",
        comparison=Comparison.GE,
        threshold=BUDGET_WARN_PERCENT,
        severity=Severity.WARNING,
        summary="tenant {tenant} has used {value:.0f}% of its budget this period",
    ),
    AlertRule(
        name="budget_exceeded",
        metric="budget_used_percent",
        comparison=Comparison.GE,
        threshold=100.0,
        severity=Severity.CRITICAL,
        summary="tenant {tenant} has used {value:.0f}% of its budget this period; its policy applies now",
    ),
)


def merge_rules(custom: tuple[AlertRule, ...] | list[AlertRule]) -> list[AlertRule]:
    """Default rules with same-named custom rules in their place, then the other custom rules."""
    by_name = {r.name: r for r in custom}
    merged = [by_name.pop(r.name, r) for r in DEFAULT_RULES]
    return merged + [r for r in custom if r.name in by_name]
