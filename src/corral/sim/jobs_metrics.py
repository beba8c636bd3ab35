"""Figures of a job simulation: completion times, waits, utilisation, and per-tenant fair share.

Entitled share (the fairness yardstick): at every instant, the pool is water-filled over the tenants'
demands (the GPUs of their jobs in the system, running or pending) by weight, so a tenant is entitled to
min(demand, weighted fair share); integrated over a window that is its entitled GPU-seconds. Its share
ratio in the window is the GPU-seconds it held divided by what it was entitled to."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.scheduler.queueing import compute_fair_shares
from corral.sim.jobs import Interval, SimResult


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(math.ceil(pct / 100 * len(s)) - 1, 0)
    return s[min(k, len(s) - 1)]


@dataclass(frozen=True, slots=True)
class TenantWindow:
    tenant: str
    window: int  # index of the window (hour) from the first submit
    entitled_gpu_s: float
    received_gpu_s: float

    @property
    def ratio(self) -> float:
        return self.received_gpu_s / self.entitled_gpu_s if self.entitled_gpu_s > 0 else 1.0


def _window_breaks(t0: float, t1: float, origin: float, window_s: float) -> list[tuple[int, float, float]]:
    out = []
    while t0 < t1:
        w = int((t0 - origin) // window_s)
        end = min(t1, origin + (w + 1) * window_s)
        if end <= t0:  # float edge: step into the next window
            end = min(t1, origin + (w + 2) * window_s)
            w += 1
        out.append((w, t0, end))
        t0 = end
    return out


def compute_received(held: Sequence[Interval], origin: float, window_s: float) -> dict[tuple[str, int], float]:
    got: dict[tuple[str, int], float] = {}
    for iv in held:
        for w, a, b in _window_breaks(iv.start_s, iv.end_s, origin, window_s):
            got[(iv.tenant, w)] = got.get((iv.tenant, w), 0.0) + (b - a) * iv.milli / 1000
    return got


def compute_entitled(
    present: Sequence[Interval], weights: dict[str, float], capacity_gpus: float, origin: float, window_s: float
) -> dict[tuple[str, int], float]:
    """Entitled GPU-seconds per (tenant, window): sweep demand changes, water-fill each constant piece."""
    changes: dict[float, dict[str, float]] = {}
    for iv in present:
        for t, d in ((iv.start_s, iv.milli / 1000), (iv.end_s, -iv.milli / 1000)):
            changes.setdefault(t, {}).setdefault(iv.tenant, 0.0)
            changes[t][iv.tenant] += d
    demand: dict[str, float] = {}
    out: dict[tuple[str, int], float] = {}
    times = sorted(changes)
    for i, t in enumerate(times):
        for tenant, d in changes[t].items():
            demand[tenant] = demand.get(tenant, 0.0) + d
        if i + 1 == len(times):
            break
        live = {k: v for k, v in demand.items() if v > 1e-9}
        if not live:
            continue
        shares = compute_fair_shares(live, weights, capacity_gpus)
        for w, a, b in _window_breaks(t, times[i + 1], origin, window_s):
            for tenant, s in shares.items():
                out[(tenant, w)] = out.get((tenant, w), 0.0) + s * (b - a)
    return out


def compute_tenant_windows(result: SimResult, window_s: float = 3600.0) -> list[TenantWindow]:
    """Every (tenant, window) in which the tenant had demand, with entitled and received GPU-seconds."""
    if not result.present:
        return []
    origin = min(iv.start_s for iv in result.present)
    entitled = compute_entitled(result.present, result.weights, result.capacity_milli / 1000, origin, window_s)
    received = compute_received(result.held, origin, window_s)
    return [TenantWindow(t, w, e, received.get((t, w), 0.0)) for (t, w), e in sorted(entitled.items()) if e > 1e-6]


def compute_report(result: SimResult) -> dict[str, object]:
    """The simulator's JSON figures (keys are part of the CLI's contract; see docs/queueing.md)."""
    recs = result.records
    jct = [r.jct_s for r in recs]
    wait = [r.wait_s for r in recs]
    start = min((r.submit_s for r in recs), default=0.0)
    end = max((r.end_s for r in recs), default=0.0)
    makespan = end - start
    cap_gpu_s = result.capacity_milli / 1000 * makespan
    busy = sum((iv.end_s - iv.start_s) * iv.milli / 1000 for iv in result.held)
    windows = compute_tenant_windows(result, window_s=max(makespan, 1.0))
    entitled = {w.tenant: w.entitled_gpu_s for w in windows}
    received: dict[str, float] = {}
    for iv in result.held:
        received[iv.tenant] = received.get(iv.tenant, 0.0) + (iv.end_s - iv.start_s) * iv.milli / 1000
    by_tenant: dict[str, list[float]] = {}
    for r in recs:
        by_tenant.setdefault(r.tenant, []).append(r.wait_s)
    tenants = {
        t: {
            "share_pct": round(100 * received.get(t, 0.0) / cap_gpu_s, 3) if cap_gpu_s else 0.0,
            "entitled_pct": round(100 * entitled.get(t, 0.0) / cap_gpu_s, 3) if cap_gpu_s else 0.0,
            "avg_wait_s": round(sum(ws) / len(ws), 3),
        }
        for t, ws in sorted(by_tenant.items())
    }
    return {
        "jobs": len(recs),
        "avg_jct_s": round(sum(jct) / len(jct), 3) if jct else 0.0,
        "p50_jct_s": round(percentile(jct, 50), 3),
        "p99_jct_s": round(percentile(jct, 99), 3),
        "avg_wait_s": round(sum(wait) / len(wait), 3) if wait else 0.0,
        "p99_wait_s": round(percentile(wait, 99), 3),
        "makespan_s": round(makespan, 3),
        "gpu_util_pct": round(100 * busy / cap_gpu_s, 3) if cap_gpu_s else 0.0,
        "tenants": tenants,
    }
