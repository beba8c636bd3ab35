"""Time series, alerts and silences in SQL: the monitoring half of SqlStore (a mixin)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, and_, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from corral.core.rollup import RawPoint, Rollup, compute_keyed_rollups, merge_rollup
from corral.store.tables import (
    AlertHistoryRow,
    AlertRuleRow,
    AlertSnapshotRow,
    JobRow,
    MetricPointRow,
    MetricRollupRow,
    SilenceRow,
)
from corral.store.tenancy import affected_rows, utc

HOST_GPU = -1  # the `gpu` of host series


class Point(NamedTuple):
    ts: float
    node: str
    gpu: int  # HOST_GPU for host series
    metric: str
    value: float
    job_id: int | None = None


class AlertRuleRecord(NamedTuple):
    id: int
    name: str
    spec: dict[str, Any]
    tenant_id: int | None
    created_at: datetime


class AlertHistoryRecord(NamedTuple):
    fingerprint: str
    rule: str
    state: str
    severity: str
    labels: dict[str, str]
    value: float
    summary: str
    at: datetime


SeriesKey = tuple[str, int]  # (node, gpu)
_POINTS = cast(Table, MetricPointRow.__table__)
_COPY_POINTS = "COPY metric_points (ts, node, gpu, metric, value, job_id) FROM STDIN"


def _copy_points(raw: Any, points: Sequence[Point]) -> None:
    """The points through PostgreSQL's COPY on the transaction's own DB-API (psycopg) connection. A driver error is
    raised as SQLAlchemy's (OperationalError when the database is gone), as every other query's is."""
    import psycopg

    try:
        with raw.cursor() as cur, cur.copy(_COPY_POINTS) as copy:
            for p in points:
                copy.write_row(p)
    except psycopg.Error as e:
        raise DBAPIError.instance(_COPY_POINTS, None, e, psycopg.Error) from e


class TelemetryMethods:
    """Every method is one transaction. Points are append-only; rollups are replaced bucket by bucket."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    # ---- points -------------------------------------------------------------------
    def insert_points(self, points: Sequence[Point]) -> int:
        if not points:
            return 0
        with self._tx() as s:
            conn = s.connection()
            if conn.dialect.driver == "psycopg":
                # COPY: a batch of 116 points (a node's host and 8 GPUs) costs 1.3 ms of CPU instead of 5.7 ms
                # through executemany; at 200 batches a second (1,000 agents) that was most of a core
                _copy_points(conn.connection.dbapi_connection, points)
            else:  # Core's executemany: the ORM's bulk insert walks each row's dict in Python first
                conn.execute(insert(_POINTS), [p._asdict() for p in points])
        return len(points)

    def query_points(
        self,
        metric: str,
        start: float,
        end: float,
        node: str | None = None,
        gpu: int | None = None,
        job_id: int | None = None,
        tenant_id: int | None = None,
    ) -> dict[SeriesKey, list[tuple[float, float]]]:
        """Raw points of one metric in [start, end), grouped by (node, gpu), oldest first."""
        with self._tx() as s:
            q = select(MetricPointRow.node, MetricPointRow.gpu, MetricPointRow.ts, MetricPointRow.value).where(
                MetricPointRow.metric == metric, MetricPointRow.ts >= start, MetricPointRow.ts < end
            )
            if node is not None:
                q = q.where(MetricPointRow.node == node)
            if gpu is not None:
                q = q.where(MetricPointRow.gpu == gpu)
            if job_id is not None:
                q = q.where(MetricPointRow.job_id == job_id)
            if tenant_id is not None:  # GPU samples taken while one of the tenant's jobs held the GPU
                q = q.where(MetricPointRow.job_id.in_(select(JobRow.id).where(JobRow.tenant_id == tenant_id)))
            out: dict[SeriesKey, list[tuple[float, float]]] = {}
            for n, g, ts, v in s.execute(q.order_by(MetricPointRow.ts)).all():
                out.setdefault((n, g), []).append((ts, v))
            return out

    def latest_points(self, since: float, nodes: Sequence[str] | None = None) -> list[Point]:
        """Each (node, GPU) series' newest sample at or after `since` (host series: gpu HOST_GPU): every metric
        stored at that sample's time, whichever replica stored it. `nodes`: only these nodes (None: all)."""
        if nodes is not None and not nodes:
            return []
        p = MetricPointRow
        with self._tx() as s:
            newest = select(p.node, p.gpu, func.max(p.ts).label("ts")).where(p.ts >= since)
            if nodes is not None:
                newest = newest.where(p.node.in_(sorted(set(nodes))))
            sub = newest.group_by(p.node, p.gpu).subquery()
            q = (
                select(p.ts, p.node, p.gpu, p.metric, p.value, p.job_id)
                .join(sub, and_(p.node == sub.c.node, p.gpu == sub.c.gpu, p.ts == sub.c.ts))
                .order_by(p.node, p.gpu, p.metric, p.id)
            )
            latest: dict[tuple[str, int, str], Point] = {}  # a sample stored twice (a batch sent again) counts once
            for ts, node, gpu, metric, value, job_id in s.execute(q).all():
                latest[(node, gpu, metric)] = Point(ts, node, gpu, metric, value, job_id)
            return list(latest.values())

    def query_aggregate(
        self,
        metric: str,
        start: float,
        end: float,
        step_s: float,
        agg: str,
        node: str | None = None,
        rollups: bool = False,
    ) -> list[tuple[float, float]]:
        """One series: `agg` (avg, max, min, sum) over every (node, GPU) per `step_s` bucket, computed in the
        database (a fleet chart over 800 GPUs must not drag every point into Python)."""
        aggregates: dict[str, Callable[[Any], Any]] = {
            "avg": func.avg,
            "max": func.max,
            "min": func.min,
            "sum": func.sum,
        }
        fn = aggregates[agg]
        table = MetricRollupRow if rollups else MetricPointRow
        ts_col = MetricRollupRow.bucket if rollups else MetricPointRow.ts
        val = (MetricRollupRow.sum / MetricRollupRow.count) if rollups else MetricPointRow.value
        bucket = (func.floor(ts_col / step_s) * step_s).label("bucket")
        with self._tx() as s:
            q = select(bucket, fn(val)).where(table.metric == metric, ts_col >= start, ts_col < end)
            if node is not None:
                q = q.where(table.node == node)
            rows = s.execute(q.group_by(bucket).order_by(bucket)).all()
            return [(float(b), float(v)) for b, v in rows if v is not None]

    def query_rollups(
        self, metric: str, start: float, end: float, node: str | None = None, gpu: int | None = None
    ) -> dict[SeriesKey, list[tuple[float, float]]]:
        """1-minute averages of one metric in [start, end), grouped by (node, gpu)."""
        with self._tx() as s:
            q = select(MetricRollupRow).where(
                MetricRollupRow.metric == metric, MetricRollupRow.bucket >= start, MetricRollupRow.bucket < end
            )
            if node is not None:
                q = q.where(MetricRollupRow.node == node)
            if gpu is not None:
                q = q.where(MetricRollupRow.gpu == gpu)
            out: dict[SeriesKey, list[tuple[float, float]]] = {}
            for r in s.scalars(q.order_by(MetricRollupRow.bucket)).all():
                out.setdefault((r.node, r.gpu), []).append((r.bucket, r.sum / r.count))
            return out

    def compute_and_store_rollups(self, since: float, closed_before: float, bucket_s: float = 60.0) -> int:
        """Roll raw points with since <= ts < closed_before into buckets (merged into existing ones). The buckets
        already stored in that span are read in one query and the new ones written in one statement: a fleet's
        minute is thousands of (metric, node, GPU) rollups, and one lookup each was a tenth of the server's time
        (issue 13)."""
        with self._tx() as s:
            rows = s.execute(
                select(
                    MetricPointRow.metric,
                    MetricPointRow.node,
                    MetricPointRow.gpu,
                    MetricPointRow.ts,
                    MetricPointRow.value,
                ).where(MetricPointRow.ts >= since, MetricPointRow.ts < closed_before)
            ).all()
            keyed = [((m, n, g), RawPoint(ts, v)) for m, n, g, ts, v in rows]
            made = [
                (key, r)
                for key, rollups in compute_keyed_rollups(keyed, closed_before, bucket_s).items()
                for r in rollups
            ]
            if not made:
                return 0
            first, last = min(r.start for _, r in made), max(r.start for _, r in made)
            old = {
                (m, n, g, bucket): Rollup(bucket, *rest)
                for m, n, g, bucket, *rest in s.execute(
                    select(*_ROLLUP_COLUMNS).where(MetricRollupRow.bucket >= first, MetricRollupRow.bucket <= last)
                ).all()
            }
            fresh: list[dict[str, Any]] = []
            for (m, n, g), r in made:
                before = old.get((m, n, g, r.start))
                if before is None:
                    fresh.append(_rollup_values(m, n, g, r))
                    continue
                merged = merge_rollup(before, r)
                s.execute(
                    update(MetricRollupRow)
                    .where(
                        MetricRollupRow.metric == m,
                        MetricRollupRow.node == n,
                        MetricRollupRow.gpu == g,
                        MetricRollupRow.bucket == r.start,
                    )
                    .values(_rollup_values(m, n, g, merged))
                )
            if fresh:
                s.execute(insert(MetricRollupRow), fresh)
            return len(made)

    def latest_rollup_bucket(self) -> float | None:
        with self._tx() as s:
            return s.scalar(select(func.max(MetricRollupRow.bucket)))

    def prune_telemetry(self, raw_before: float, rollup_before: float) -> tuple[int, int]:
        with self._tx() as s:
            raw = affected_rows(s.execute(delete(MetricPointRow).where(MetricPointRow.ts < raw_before)))
            rolled = affected_rows(s.execute(delete(MetricRollupRow).where(MetricRollupRow.bucket < rollup_before)))
            return int(raw or 0), int(rolled or 0)

    def set_job_gpu_summary(self, job_id: int, summary: dict[str, Any]) -> None:
        with self._tx() as s:
            s.execute(update(JobRow).where(JobRow.id == job_id).values(gpu_summary=summary))

    def get_job_gpu_summary(self, job_id: int) -> dict[str, Any]:
        with self._tx() as s:
            return dict(s.scalar(select(JobRow.gpu_summary).where(JobRow.id == job_id)) or {})

    # ---- alert rules, history, silences -----------------------------------------------
    def create_alert_rule(
        self, name: str, spec: dict[str, Any], tenant_id: int | None, now: datetime
    ) -> AlertRuleRecord:
        with self._tx() as s:
            row = AlertRuleRow(name=name, spec=spec, tenant_id=tenant_id, created_at=now)
            s.add(row)
            s.flush()
            return _rule(row)

    def list_alert_rules(self) -> list[AlertRuleRecord]:
        with self._tx() as s:
            return [_rule(r) for r in s.scalars(select(AlertRuleRow).order_by(AlertRuleRow.id)).all()]

    def delete_alert_rule(self, rule_id: int) -> bool:
        with self._tx() as s:
            return bool(affected_rows(s.execute(delete(AlertRuleRow).where(AlertRuleRow.id == rule_id))))

    def add_alert_history(self, entries: Sequence[AlertHistoryRecord]) -> None:
        if not entries:
            return
        with self._tx() as s:
            s.execute(insert(AlertHistoryRow), [e._asdict() for e in entries])

    def list_alert_history(self, limit: int = 200) -> list[AlertHistoryRecord]:
        """Newest first."""
        with self._tx() as s:
            rows = s.scalars(select(AlertHistoryRow).order_by(AlertHistoryRow.id.desc()).limit(limit)).all()
            return [
                AlertHistoryRecord(
                    r.fingerprint, r.rule, r.state, r.severity, dict(r.labels), r.value, r.summary, utc(r.at) or r.at
                )
                for r in rows
            ]

    def save_alert_snapshot(self, alerts: list[dict[str, Any]], at: datetime, holder: str = "") -> None:
        with self._tx() as s:
            row = s.get(AlertSnapshotRow, 1)
            if row is None:
                s.add(AlertSnapshotRow(id=1, alerts=alerts, at=at, holder=holder))
            else:
                row.alerts, row.at, row.holder = alerts, at, holder

    def load_alert_snapshot(self) -> tuple[list[dict[str, Any]], datetime | None, str]:
        with self._tx() as s:
            row = s.get(AlertSnapshotRow, 1)
            if row is None:
                return [], None, ""
            return [dict(a) for a in row.alerts], utc(row.at) or row.at, row.holder

    def save_silence(self, silence_id: str, spec: dict[str, Any], now: datetime) -> None:
        with self._tx() as s:
            s.add(SilenceRow(id=silence_id, spec=spec, created_at=now))

    def list_silences(self) -> list[tuple[str, dict[str, Any]]]:
        with self._tx() as s:
            return [(r.id, dict(r.spec)) for r in s.scalars(select(SilenceRow).order_by(SilenceRow.created_at)).all()]

    def delete_silence(self, silence_id: str) -> bool:
        with self._tx() as s:
            return bool(affected_rows(s.execute(delete(SilenceRow).where(SilenceRow.id == silence_id))))


def _rule(r: AlertRuleRow) -> AlertRuleRecord:
    return AlertRuleRecord(r.id, r.name, dict(r.spec), r.tenant_id, utc(r.created_at) or r.created_at)


_ROLLUP_COLUMNS = (
    MetricRollupRow.metric,
    MetricRollupRow.node,
    MetricRollupRow.gpu,
    MetricRollupRow.bucket,
    MetricRollupRow.count,
    MetricRollupRow.min,
    MetricRollupRow.max,
    MetricRollupRow.sum,
    MetricRollupRow.last,
    MetricRollupRow.last_ts,
)


def _rollup_values(metric: str, node: str, gpu: int, r: Rollup) -> dict[str, Any]:
    return {
        "metric": metric,
        "node": node,
        "gpu": gpu,
        "bucket": r.start,
        "count": r.count,
        "min": r.min,
        "max": r.max,
        "sum": r.sum,
        "last": r.last,
        "last_ts": r.last_ts,
    }
