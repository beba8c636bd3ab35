"""Usage reports: GPU-hours and utilisation per tenant, user, GPU model or day over a time range.

compute_usage_rows is pure: the jobs' runs clipped to the range, GPU-hours = hours x GPUs (a share counts
its fraction), utilisation = the jobs' mean GPU utilisation weighted by their GPU-hours. Only the current
(or last) attempt of a job is counted by time; earlier attempts of requeued jobs are not in the range.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from corral.core.errors import ValidationError
from corral.core.timestamps import parse_iso_time
from corral.store.records import compute_placed_parts

GROUPS = ("tenant", "user", "gpu_model", "day", "pool", "job")
BY_PLACEMENT = ("gpu_model", "pool", "job")  # groupings that read where each job ran (and every cost does)


@dataclass(frozen=True, slots=True)
class JobRun:
    """What a report needs of a job's run (its current or last attempt)."""

    id: int
    tenant_id: int | None
    user_id: int | None
    gpus: int
    gpu_milli: int
    nodes: int
    started_at: datetime | None
    finished_at: datetime | None
    parts: tuple[tuple[str, tuple[int, ...]], ...]
    utilization_pct: float | None = None

    @classmethod
    def from_columns(cls, row: Sequence[Any]) -> JobRun:
        """From SqlStore.list_runs_between's tuple."""
        (job_id, tenant, user, gpus, milli, nodes, started, finished, node, gpu_indices, parts, util) = row
        return cls(
            job_id,
            tenant,
            user,
            gpus,
            milli,
            nodes or 1,
            started,
            finished,
            compute_placed_parts(node, gpu_indices, parts),
            None if util is None else float(util),
        )


@dataclass(slots=True)
class UsageRow:
    key: str
    gpu_hours: float = 0.0
    jobs: int = 0
    util_weighted: float = 0.0  # sum of utilisation x GPU-hours over jobs that have a utilisation
    util_hours: float = 0.0
    cost: float = 0.0  # GPU-hours x the price per GPU-hour of the node each ran on
    counted: set[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        avg = self.util_weighted / self.util_hours if self.util_hours else None
        return {
            "key": self.key,
            "gpu_hours": round(self.gpu_hours, 4),
            "jobs": self.jobs,
            "avg_util_pct": None if avg is None else round(avg, 2),
            "cost": round(self.cost, 4),
        }


def _days(t0: datetime, t1: datetime) -> list[tuple[str, datetime, datetime]]:
    out = []
    day = t0.replace(hour=0, minute=0, second=0, microsecond=0)
    while day < t1:
        nxt = day + timedelta(days=1)
        out.append((day.strftime("%Y-%m-%d"), max(day, t0), min(nxt, t1)))
        day = nxt
    return out


def compute_usage_rows(
    jobs: Sequence[JobRun],
    group_by: str,
    start: datetime,
    end: datetime,
    now: datetime,
    tenants: Mapping[int, str],
    users: Mapping[int, str],
    gpu_models: Mapping[tuple[str, int], str],
    prices: Mapping[str, float] | None = None,
    owned_price: float = 0.0,
    pools: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows per group. `prices`: node -> price per GPU-hour (a cloud pool's node), else `owned_price`; `pools`:
    node -> its pool (else static). A multi-node job's parts count on their own node (and pool)."""
    if group_by not in GROUPS:
        raise ValidationError("group_by", f"one of {', '.join(GROUPS)}")
    prices = prices or {}
    pools = pools or {}
    rows: dict[str, UsageRow] = {}
    for job in jobs:
        if job.started_at is None or job.gpus == 0:
            continue
        run0, run1 = max(job.started_at, start), min(job.finished_at or now, end)
        if run1 <= run0:
            continue
        per_node = job.gpus * job.gpu_milli / 1000
        nodes = [n for n, _ in job.parts] or [""] * job.nodes
        for node in nodes:
            price = prices.get(node, owned_price)
            if group_by == "day":
                parts = _days(run0, run1)
            else:
                if group_by == "tenant":
                    key = tenants.get(job.tenant_id or 0, "(none)")
                elif group_by == "user":
                    key = users.get(job.user_id or 0, "(none)")
                elif group_by == "pool":
                    key = pools.get(node, "static")
                elif group_by == "job":
                    key = str(job.id)
                else:
                    idxs = next((i for n, i in job.parts if n == node), ())
                    key = next((gpu_models[(node, i)] for i in idxs if (node, i) in gpu_models), "(unknown)")
                parts = [(key, run0, run1)]
            util = job.utilization_pct
            for key, a, b in parts:
                hours = (b - a).total_seconds() / 3600 * per_node
                row = rows.setdefault(key, UsageRow(key, counted=set()))
                row.gpu_hours += hours
                row.cost += hours * price
                assert row.counted is not None
                if job.id not in row.counted:
                    row.counted.add(job.id)
                    row.jobs += 1
                if util is not None:
                    row.util_weighted += util * hours
                    row.util_hours += hours
    return [
        r.to_dict()
        for r in sorted(rows.values(), key=lambda r: (-r.gpu_hours, r.key) if group_by != "day" else (r.key,))
    ]


def render_csv(rows: Sequence[Mapping[str, Any]], group_by: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([group_by, "gpu_hours", "jobs", "avg_util_pct", "cost"])
    for r in rows:
        util = "" if r["avg_util_pct"] is None else r["avg_util_pct"]
        w.writerow([r["key"], r["gpu_hours"], r["jobs"], util, r.get("cost", 0.0)])
    return buf.getvalue()


def parse_time(value: str | None, field: str, default: datetime) -> datetime:
    return parse_iso_time(value, field) if value else default
