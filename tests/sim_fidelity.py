"""Compare a real server's job starts with `corral simulate jobs`' (the simulator-fidelity test's yardstick)."""

from __future__ import annotations

import bisect
import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Part = tuple[str, tuple[int, ...]]  # (node, GPU indices) of one gang part


@dataclass(frozen=True, slots=True)
class Start:
    """Where and when a job first started. `start_s` is seconds since the replay began; jobs started by the
    same scheduling cycle share it exactly (the server stamps `started_at` with the cycle's clock)."""

    job: str
    start_s: float
    parts: tuple[Part, ...]  # sorted: a gang's rank order is not compared, its set of parts is


def make_start(job: str, start_s: float, parts: Iterable[tuple[str, Iterable[int]]]) -> Start:
    return Start(job, start_s, tuple(sorted((node, tuple(sorted(g))) for node, g in parts)))


def load_sim_starts(report: Mapping[str, Any]) -> list[Start]:
    """The `starts` of `corral simulate jobs --json --starts`: [{job, start_s, placements: [{node, gpu_indices}]}]."""
    return [
        make_start(s["job"], float(s["start_s"]), ((p["node"], p["gpu_indices"]) for p in s["placements"]))
        for s in report["starts"]
    ]


def compute_cycles(starts: Sequence[Start]) -> list[frozenset[str]]:
    """Start order as a sequence of sets: the jobs of one cycle (one start time) are not ordered among themselves."""
    by_time: dict[float, set[str]] = {}
    for s in starts:
        by_time.setdefault(s.start_s, set()).add(s.job)
    return [frozenset(by_time[t]) for t in sorted(by_time)]


def compute_differences(server: Sequence[Start], sim: Sequence[Start], expected: Mapping[str, str]) -> list[str]:
    """Every way the simulator's starts disagree with the server's, one line each; jobs named in `expected`
    (job -> why it may differ) are left out. Order: a pair of jobs started by different cycles on one side must
    not start in the opposite order on the other (a pair started by one cycle on either side is unordered there).
    Placement: each job's set of (node, GPU indices) parts must be the same."""
    out: list[str] = []
    srv = {s.job: s for s in server if s.job not in expected}
    sm = {s.job: s for s in sim if s.job not in expected}
    for job in sorted(srv.keys() - sm.keys()):
        out.append(f"{job}: started on the server, never in the simulator")
    for job in sorted(sm.keys() - srv.keys()):
        out.append(f"{job}: started in the simulator, never on the server")
    both = sorted(srv.keys() & sm.keys(), key=lambda j: (srv[j].start_s, j))
    for i, a in enumerate(both):
        for b in both[i + 1 :]:
            if srv[a].start_s < srv[b].start_s and sm[b].start_s < sm[a].start_s:
                out.append(
                    f"order: server started {a} (t={srv[a].start_s:.2f}) before {b} (t={srv[b].start_s:.2f}), "
                    f"the simulator {b} (t={sm[b].start_s:.2f}) before {a} (t={sm[a].start_s:.2f})"
                )
    for job in both:
        if srv[job].parts != sm[job].parts:
            out.append(f"placement: {job} on the server {_fmt(srv[job].parts)}, in the simulator {_fmt(sm[job].parts)}")
    return out


def _fmt(parts: tuple[Part, ...]) -> str:
    return " + ".join(f"{node}:{list(g)}" for node, g in parts)


GRID_S = 1 / 1024  # times fed to the simulator are multiples of this: its sums (start + run time) are then exact
COMMIT_LAG_S = 0.1  # bound on created_at -> visible to a pass (stamped before validation and the commit)


def compute_sim_arrivals(
    submit_s: Mapping[str, float], start_s: Mapping[str, float], window_s: float = COMMIT_LAG_S
) -> dict[str, float]:
    """When each job reached the scheduler. A job's `created_at` is stamped before the submission commits: a pass
    that began within `window_s` after it may not have seen it. When such a pass started other jobs but not this
    one, the job is taken to have arrived just after that pass (the simulator would otherwise consider it a pass
    earlier than the server could). Only passes that started something are observable; that is enough, since a
    pass that starts nothing changes nothing."""
    passes = sorted(set(start_s.values()))
    out = {}
    for job, submit in submit_s.items():
        lo, hi = bisect.bisect_right(passes, submit), bisect.bisect_right(passes, submit + window_s)
        missed = [p for p in passes[lo:hi] if p < start_s[job]]
        out[job] = missed[-1] + GRID_S if missed else submit
    return out


def compute_on_grid(times: Mapping[str, float]) -> dict[str, float]:
    """Times floored to GRID_S. Two jobs the server saw end in one report end at the same instant in the simulator
    too (with microsecond decimals, start + run time could differ in the last bit and split them over two cycles);
    events less than GRID_S apart may merge, as they do in one server pass."""
    return {k: math.floor(v / GRID_S) * GRID_S for k, v in times.items()}


def compute_sim_durations(
    submit_s: Mapping[str, float], start_s: Mapping[str, float], end_s: Mapping[str, float]
) -> dict[str, float]:
    """Run times that make the simulator's end events fall exactly on the server's. The server starts a job in a
    pass that runs a little after the event that triggered it (a submit or another job's end); the simulator
    starts it at the event itself. Counting each run from that event (the latest one at or before the start)
    instead of from the server's start keeps that lag from shifting every later event of the simulator."""
    events = sorted([*submit_s.values(), *end_s.values()])
    out = {}
    for job, start in start_s.items():
        trigger = events[bisect.bisect_right(events, start) - 1]
        out[job] = end_s[job] - max(trigger, submit_s[job])
    return out


def render_trace(
    rows: Sequence[Mapping[str, str]], submit_s: Mapping[str, float], duration_s: Mapping[str, float]
) -> str:
    """The trace CSV again with each job's submit time and duration replaced by those observed on the server
    (what the simulator must be fed for its clock to see the same events as the server's)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        job = row["job_id"]
        writer.writerow(dict(row, submit_s=f"{submit_s[job]:.10f}", duration_s=f"{duration_s[job]:.10f}"))
    return buf.getvalue()
