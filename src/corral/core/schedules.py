"""Repeating jobs, the pure part: when a schedule fires and what a firing does.

A schedule expression is one of
- a cron line of five fields, `minute hour day-of-month month day-of-week` (Vixie cron syntax with ranges,
  steps, lists, names, `L`, `W` and `#`), evaluated in the schedule's time zone (DST handled as cron does:
  a time that does not exist that day runs at the next existing minute, a repeated hour runs once);
- a nickname: `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`;
- `@every DURATION`, a fixed interval from the schedule's creation: `@every 90s`, `@every 15m`, `@every 1h30m`.

What happens when a firing finds the previous run still active is the concurrency policy, as in Kubernetes'
CronJob: `allow` starts another, `forbid` skips this firing, `replace` cancels the active run(s) and starts a
new one. Firings missed while the server was down are not replayed one by one: the schedule runs once for
the latest of them (counted as missed), then resumes its rhythm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from corral.core.errors import ValidationError

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MIN_INTERVAL_S = 1
MAX_INTERVAL_S = 366 * 86400
MAX_MISSED_COUNTED = 10_000  # beyond this a long outage is reported as "at least N" missed firings


class ConcurrencyPolicy(StrEnum):
    ALLOW = "allow"
    FORBID = "forbid"
    REPLACE = "replace"


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `1h30m`, `2d`: a positive duration. Raises ValueError."""
    m = _DURATION.match(text.strip().lower())
    if not text.strip() or not m or not any(m.groups()):
        raise ValueError(f"{text!r} is not a duration like 30s, 15m, 1h30m or 1d")
    d, h, mi, s = (int(g or 0) for g in m.groups())
    total_s = ((d * 24 + h) * 60 + mi) * 60 + s
    if total_s > 100 * 366 * 86400:  # timedelta overflows near 10^9 days; no schedule needs a century
        raise ValueError(f"{text!r} is longer than a century")
    return timedelta(seconds=total_s)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone, or ValidationError on field `timezone`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValidationError(
            "timezone", f"unknown time zone {name!r} (use an IANA name like UTC or Europe/Paris)"
        ) from e


@dataclass(frozen=True, slots=True)
class ScheduleExpr:
    """A parsed, valid schedule expression; `next_after` is the only way to ask when it fires."""

    text: str
    timezone: str = "UTC"
    cron: str | None = None  # the five-field form (nicknames expanded)
    every: timedelta | None = None

    @classmethod
    def parse(cls, text: str, timezone: str = "UTC") -> ScheduleExpr:
        """Raises ValidationError naming `schedule` (or `timezone`) with what is wrong."""
        zone(timezone)
        raw = " ".join(text.split())
        if not raw:
            raise ValidationError("schedule", "a schedule is required, e.g. '0 * * * *', '@daily' or '@every 30m'")
        if raw.lower().startswith("@every"):
            arg = raw[len("@every") :].strip()
            try:
                every = parse_duration(arg)
            except ValueError as e:
                raise ValidationError("schedule", f"@every needs a duration: {e}") from None
            secs = every.total_seconds()
            if secs < MIN_INTERVAL_S or secs > MAX_INTERVAL_S:
                raise ValidationError("schedule", f"@every must be between {MIN_INTERVAL_S} s and 366 days")
            return cls(text=raw, timezone=timezone, every=every)
        cron = NICKNAMES.get(raw.lower(), raw)
        if cron.startswith("@"):
            raise ValidationError(
                "schedule", f"unknown nickname {raw!r}; known: {', '.join(NICKNAMES)}, @every DURATION"
            )
        try:
            it = CronSim(cron, datetime(2000, 1, 1))
            next(it)
        except CronSimError as e:
            raise ValidationError(
                "schedule", f"{raw!r} is not a cron line (minute hour day month weekday): {e}"
            ) from None
        except StopIteration:
            raise ValidationError("schedule", f"{raw!r} never fires") from None
        return cls(text=raw, timezone=timezone, cron=cron)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime:
        """The first firing strictly after `after` (aware, UTC). `@every` counts from `anchor` (creation)."""
        after = after.astimezone(UTC)
        if self.every is not None:
            base = (anchor or after).astimezone(UTC)
            if after < base:
                return base
            steps = int((after - base) / self.every) + 1
            return base + steps * self.every
        local = after.astimezone(zone(self.timezone))
        # cronsim yields minutes strictly after the minute `local` falls in, which is strictly after `after`.
        it = CronSim(self.cron or "", local)
        try:
            return next(it).astimezone(UTC)
        except StopIteration:  # e.g. "0 0 30 2 *": only reachable for impossible dates, rejected by parse
            raise ValidationError("schedule", f"{self.text!r} never fires") from None

    def upcoming(self, after: datetime, count: int, anchor: datetime | None = None) -> list[datetime]:
        out: list[datetime] = []
        t = after
        for _ in range(count):
            t = self.next_after(t, anchor)
            out.append(t)
        return out

    def describe(self) -> str:
        """Plain words, e.g. 'At 09:00 on every day-of-week from Monday through Friday' or 'every 15m'."""
        if self.every is not None:
            return f"every {self.text[len('@every') :].strip()}"
        try:
            words = CronSim(self.cron or "", datetime(2000, 1, 1)).explain()
        except Exception:  # explain() is best effort; the expression itself is valid
            words = self.cron or ""
        return words if self.timezone == "UTC" else f"{words} ({self.timezone})"


@dataclass(frozen=True, slots=True)
class Firing:
    """What the server does when a schedule is due: start a job or skip, which runs to cancel, when next."""

    start: bool
    cancel: tuple[int, ...]
    next_run_at: datetime
    missed: int  # earlier due times folded into this firing (the server was down or behind)
    skip_reason: str = ""


def count_missed(expr: ScheduleExpr, due_at: datetime, now: datetime, anchor: datetime | None) -> int:
    """How many further firing times after `due_at` passed by `now` (capped at MAX_MISSED_COUNTED)."""
    if expr.every is not None:
        return min(int((now - due_at) / expr.every), MAX_MISSED_COUNTED) if now > due_at else 0
    n, t = 0, due_at
    while n < MAX_MISSED_COUNTED:
        t = expr.next_after(t, anchor)
        if t > now:
            break
        n += 1
    return n


def plan_firing(
    expr: ScheduleExpr,
    policy: ConcurrencyPolicy,
    due_at: datetime,
    now: datetime,
    active_job_ids: list[int],
    anchor: datetime | None = None,
) -> Firing:
    """Decide one due firing: missed times since `due_at` fold into it, the next time is after `now`."""
    missed = count_missed(expr, due_at, now, anchor)
    nxt = expr.next_after(now, anchor)
    if active_job_ids and policy is ConcurrencyPolicy.FORBID:
        ids = ", ".join(str(i) for i in active_job_ids)
        return Firing(
            start=False,
            cancel=(),
            next_run_at=nxt,
            missed=missed,
            skip_reason=f"skipped: the previous run (job {ids}) is still active and concurrency is forbid",
        )
    cancel = tuple(active_job_ids) if policy is ConcurrencyPolicy.REPLACE else ()
    return Firing(start=True, cancel=cancel, next_run_at=nxt, missed=missed)
