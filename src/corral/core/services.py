"""Long-running services (pure): names and settings, the autoscaler's decision and the rolling update's next step.

A service is N replica jobs of one revision (what runs: command or image, resources, port, health path) behind
Corral's gateway. The controller (server/background/services.py) reads the replicas and the gateway's counts and
asks the functions here what to do; they know nothing of the store, HTTP or time sources (`now` is passed in).

Rolling update (Kubernetes Deployment semantics): replicas of the target revision are started, at most
`max_surge` beyond the desired count, and old ones stopped while at least `desired - max_unavailable` replicas stay
ready; a new replica counts only once its health path answered. A new revision that does not become ready stalls
the rollout: its replicas are stopped and the last revision that completed keeps serving.

Autoscaling (Knative / the Horizontal Pod Autoscaler): desired = ceil(observed rps / target rps per replica) within
[min, max]; up at once, down only to the highest recommendation of the stabilisation window; with min 0, to zero
once no request came for the idle period (the gateway buffers the next request while a replica starts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.core.errors import ValidationError

NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")  # a DNS label: it is a path segment of the gateway's URLs
MAX_REPLICAS = 64
MAX_TARGET_RPS = 1_000_000.0
MAX_QUEUE_LIMIT = 100_000
MAX_EVENTS = 100  # a service keeps its newest events
MAX_REVISIONS = 10  # and its newest revisions (rollback goes back to one of them)
HEALTH_PATH = re.compile(r"^/[\x21-\x7e]{0,254}$")  # absolute, printable, no spaces
RESTART_BACKOFF_MAX_S = 60.0
STALL_CRASHES = 3  # replicas of a new revision that ended before becoming ready: the rollout stops


def check_service_name(name: str, field_name: str = "name") -> str:
    if not NAME.fullmatch(name):
        raise ValidationError(
            field_name,
            f"{name!r} is not a service name: lower-case letters, digits and '-', starting with a letter, "
            "at most 63 characters (it is part of the gateway's URL /services/NAME/)",
        )
    return name


def check_health_path(path: str, field_name: str = "health_path") -> str:
    if not HEALTH_PATH.fullmatch(path):
        raise ValidationError(field_name, f"{path!r} is not an absolute URL path such as /healthz")
    return path


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    """How many replicas a service wants: `replicas` fixed, or autoscaled on request rate when `target_rps` is set."""

    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    target_rps: float | None = None  # requests per second one replica should serve; None: no autoscaling
    scale_down_delay_s: float = 60.0  # the stabilisation window: down only to the highest recommendation in it
    idle_timeout_s: float = 300.0  # with min 0: no request for this long scales to zero

    @property
    def autoscaled(self) -> bool:
        return self.target_rps is not None

    def check(self) -> ScalePolicy:
        if self.target_rps is None:
            if not 0 <= self.replicas <= MAX_REPLICAS:
                raise ValidationError("replicas", f"expected 0..{MAX_REPLICAS}, got {self.replicas}")
            return self
        if not 0 <= self.min_replicas <= MAX_REPLICAS:
            raise ValidationError("min_replicas", f"expected 0..{MAX_REPLICAS}, got {self.min_replicas}")
        if not 1 <= self.max_replicas <= MAX_REPLICAS:
            raise ValidationError("max_replicas", f"expected 1..{MAX_REPLICAS}, got {self.max_replicas}")
        if self.min_replicas > self.max_replicas:
            raise ValidationError("min_replicas", f"min ({self.min_replicas}) is above max ({self.max_replicas})")
        if not 0 < self.target_rps <= MAX_TARGET_RPS:
            raise ValidationError("target_rps", f"expected a rate above 0 and at most {MAX_TARGET_RPS:g}")
        return self


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    desired: int
    reason: str  # in words, for the service's events ("" when nothing changed)
    recommendation: int  # what the rate alone asks for now


def compute_recommendation(
    policy: ScalePolicy, rps: float, now: float, last_request_at: float | None, waiting: int
) -> int:
    """Replicas the observed rate asks for, within [min, max]. A request waiting at the gateway asks for one; with
    min 0, zero only once no request came for the idle period."""
    assert policy.target_rps is not None
    rec = math.ceil(rps / policy.target_rps - 1e-9) if rps > 0 else 0
    idle = last_request_at is None or now - last_request_at >= policy.idle_timeout_s
    if waiting > 0 or not idle:
        rec = max(rec, 1)
    return min(max(rec, policy.min_replicas), policy.max_replicas)


@dataclass(slots=True)
class Autoscaler:
    """One service's autoscaler state: the recommendations of the stabilisation window (monotonic seconds)."""

    window: list[tuple[float, int]] = field(default_factory=list)

    def decide(
        self,
        policy: ScalePolicy,
        current: int,
        rps: float,
        now: float,
        last_request_at: float | None,
        waiting: int = 0,
    ) -> ScaleDecision:
        """Up at once to the recommendation; down only to the highest recommendation seen over the last
        `scale_down_delay_s` (a dip in the rate does not remove replicas that the next second needs again)."""
        if not policy.autoscaled:
            return ScaleDecision(policy.replicas, "", policy.replicas)
        rec = compute_recommendation(policy, rps, now, last_request_at, waiting)
        self.window.append((now, rec))
        horizon = now - policy.scale_down_delay_s
        self.window = [(t, r) for t, r in self.window if t >= horizon]
        rate = f"{rps:.1f} requests/s against a target of {policy.target_rps:g} per replica"
        if rec > current:
            why = "a request waits for a replica" if current == 0 and waiting else rate
            return ScaleDecision(rec, f"scaled up from {current} to {rec}: {why}", rec)
        stable = max(r for _, r in self.window)
        if stable < current:
            if stable == 0:
                why = f"no request for {policy.idle_timeout_s:g} s"
            else:
                why = f"{rate}, below for {policy.scale_down_delay_s:g} s"
            return ScaleDecision(stable, f"scaled down from {current} to {stable}: {why}", rec)
        return ScaleDecision(current, "", rec)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A live replica (its job PENDING or RUNNING and not being stopped) as the rollout sees it."""

    job_id: int
    revision: int
    ready: bool


@dataclass(frozen=True, slots=True)
class RolloutStep:
    start: int  # new replicas of the target revision to create now
    stop: tuple[int, ...]  # replica jobs to stop now (drained first)
    complete: bool  # every replica is of the target revision, as many as desired, all ready


def plan_rollout(
    replicas: Sequence[ReplicaView], target: int, desired: int, max_surge: int = 1, max_unavailable: int = 0
) -> RolloutStep:
    """The next step towards `desired` ready replicas of revision `target`.

    Scaling is the same step with no old replicas. Never stops a ready replica if fewer than
    `desired - max_unavailable` would stay ready; never runs more than `desired + max_surge` replicas at once
    (unready old ones are stopped first: they serve nothing). An unready replica of the target revision is left to
    become ready (the controller's deadline and crash count decide when it never will)."""
    min_available = max(desired - max_unavailable, 0)
    new = [r for r in replicas if r.revision == target]
    old = [r for r in replicas if r.revision != target]
    stop: list[int] = []
    ready = sum(r.ready for r in replicas)

    def take(r: ReplicaView) -> None:
        nonlocal ready
        stop.append(r.job_id)
        ready -= r.ready

    # replicas of the target beyond the desired count (scaling down): unready first, then the newest
    for r in sorted(new, key=lambda r: (r.ready, -r.job_id))[: max(len(new) - desired, 0)]:
        if not r.ready or ready - 1 >= min_available:
            take(r)
    kept_new = [r for r in new if r.job_id not in stop]
    # old replicas: the unready go at once; the ready ones, oldest first, while enough stay ready
    for r in sorted(old, key=lambda r: (r.ready, r.job_id)):
        if not r.ready or ready - 1 >= min_available:
            take(r)
    kept_old = [r for r in old if r.job_id not in stop]
    running = len(replicas) - len(stop)
    start = max(0, min(desired - len(kept_new), desired + max_surge - running))
    complete = not stop and not kept_old and len(kept_new) == desired and all(r.ready for r in kept_new) and not start
    return RolloutStep(start=start, stop=tuple(stop), complete=complete)


def restart_delay_s(crashes: int) -> float:
    """The wait before a crashed replica's replacement starts: 1, 2, 4 ... seconds, at most a minute."""
    if crashes <= 0:
        return 0.0
    return min(2.0 ** (crashes - 1), RESTART_BACKOFF_MAX_S)
