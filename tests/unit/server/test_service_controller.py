"""The services controller (issue 18) driven pass by pass against the real store (SQLite and PostgreSQL), with a
fake clock and a fake readiness (the gateway's health checks): replicas are started, crashed ones replaced after
the back-off, unhealthy ones restarted, rolling updates go one by one through draining, a new revision that never
becomes ready stalls while the old one serves, rollback, autoscaling on the gateways' counts, deletion.

Replica jobs move as the scheduler and the agents would move them, through the store: assign_job (PENDING ->
RUNNING), finish_job (a crash, or the agent confirming a cancel)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from corral.api.services import SETTING_DEFAULTS, ServicePatch
from corral.core.models import Job
from corral.core.states import JobState
from corral.gateway.stats import TrafficCounters, TrafficStats
from corral.server.background.services import DRAIN_S, ServiceController
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.service_runtime import TrafficFlush
from corral.server.services.services import delete_service, rollback_service, scale_service, update_service
from corral.store.records import Service

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
REVISION = {"template": {"command": ["serve"]}, "port": 8000, "health_path": "/healthz"}


@dataclass
class FakeReadiness:
    """Which replica jobs answer their health path (all of them when `everyone`), and why the others do not."""

    ready_ids: set[int] = field(default_factory=set)
    everyone: bool = False
    never: set[int] = field(default_factory=set)
    why: dict[int, str] = field(default_factory=dict)

    def ready(self, job_id: int, attempt: int) -> bool:
        return job_id not in self.never and (self.everyone or job_id in self.ready_ids)

    def detail(self, job_id: int) -> str:
        return self.why.get(job_id, "")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    @property
    def wall(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


class Harness:
    def __init__(self, store: Any, tenant_id: int) -> None:
        self.store, self.tenant_id = store, tenant_id
        self.clock = Clock()
        self.readiness = FakeReadiness()
        self.ctl = ServiceController(
            store, Trigger(), NodeNotifier(), self.readiness, [10.0, 100.0, 1000.0], clock=self.clock
        )

    def service(self, name: str = "web", replicas: int = 2, **settings: Any) -> Service:
        return self.store.create_service(
            self.tenant_id, None, name, {**SETTING_DEFAULTS, **settings}, REVISION, replicas, self.clock.wall
        )

    def get(self, s: Service) -> Service:
        got = self.store.get_service(s.id)
        assert got is not None
        return got

    def live(self, s: Service) -> list[Job]:
        return list(self.store.live_replicas(s.id))

    def place(self) -> None:
        """The scheduler: every pending replica starts on n1."""
        for j in self.store.live_replicas():
            if j.state is JobState.PENDING:
                assert self.store.assign_job(j.id, "n1", [], self.clock.wall)

    def confirm_cancels(self) -> None:
        """The agents: replicas asked to stop end."""
        for j in self.store.live_replicas():
            if j.cancel_requested:
                assert self.store.finish_job(j.id, JobState.CANCELLED, None, "cancelled", self.clock.wall)

    def step(self, dt: float = 1.0, *, place: bool = True, cancels: bool = True) -> None:
        """One controller pass, then the cluster reacts, then time moves on."""
        self.ctl.run_pass()
        if place:
            self.place()
        if cancels:
            self.confirm_cancels()
        self.clock.now += dt

    def events(self, s: Service, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.get(s).events if kind is None or e["kind"] == kind]

    def up(self, s: Service, passes: int = 4) -> Service:
        """Replicas started, placed, ready: the rollout completes."""
        self.readiness.everyone = True
        for _ in range(passes):
            self.step()
        got = self.get(s)
        assert got.state["rollout"]["state"] == "complete", got.state
        return got


@pytest.fixture
def h(store: Any, ready_nodes: Any) -> Iterator[Harness]:
    ready_nodes("n1", gpus=4)
    tenant = store.create_tenant("vision", datetime.fromtimestamp(T0, UTC))
    yield Harness(store, tenant.id)


def test_starts_as_many_replica_jobs_as_asked_and_completes_once_they_are_ready(h: Harness) -> None:
    s = h.service(replicas=3)
    h.ctl.run_pass()
    live = h.live(s)
    assert len(live) == 3
    assert {(j.spec.service_id, j.spec.service_revision, j.spec.name) for j in live} == {(s.id, 1, "web")}
    assert all(j.spec.time_limit_s is None and j.spec.port == 8000 for j in live)
    assert len(h.events(s, "started")) == 3
    h.ctl.run_pass()
    assert len(h.live(s)) == 3  # not started twice
    assert h.get(s).state["rollout"]["state"] == "progressing" and h.get(s).stable_revision == 0
    got = h.up(s)
    assert got.stable_revision == 1 and len(h.live(s)) == 3
    assert "3 replica(s) ready" in h.events(s, "rollout-complete")[-1]["message"]


def test_a_crashed_replica_is_replaced_after_the_back_off_and_the_exit_is_said(h: Harness) -> None:
    s = h.service(replicas=2)
    h.up(s)
    victim = h.live(s)[0]
    assert h.store.finish_job(victim.id, JobState.FAILED, 137, "killed", h.clock.wall)
    h.ctl.run_pass()
    crashed = h.events(s, "crashed")
    assert len(crashed) == 1 and str(victim.id) in crashed[0]["message"] and "exited 137" in crashed[0]["message"]
    assert "1 s" in h.events(s, "restarting")[-1]["message"]
    assert len(h.live(s)) == 1  # the back-off: not at once
    h.clock.now += 0.5
    h.ctl.run_pass()
    assert len(h.live(s)) == 1
    h.clock.now += 0.5
    h.ctl.run_pass()
    live = h.live(s)
    assert len(live) == 2 and victim.id not in {j.id for j in live}
    assert len(h.events(s, "crashed")) == 1  # its end is counted once


def test_a_ready_replica_that_stops_answering_is_restarted(h: Harness) -> None:
    s = h.service(replicas=2, unhealthy_after_s=5.0)
    h.up(s)
    sick = h.live(s)[0]
    h.readiness.never.add(sick.id)
    h.readiness.why[sick.id] = "GET /healthz: 500"
    for _ in range(4):  # silent for less than 5 s: left alone
        h.step()
        assert not h.store.get_job(sick.id).cancel_requested
        assert h.store.get_job(sick.id).state is JobState.RUNNING
    for _ in range(4):
        h.step()
    assert h.store.get_job(sick.id).state is JobState.CANCELLED
    unhealthy = h.events(s, "unhealthy")
    assert len(unhealthy) == 1 and str(sick.id) in unhealthy[0]["message"] and "500" in unhealthy[0]["message"]
    for _ in range(3):
        h.step()
    live = h.live(s)
    assert len(live) == 2 and sick.id not in {j.id for j in live}
    assert h.events(s, "crashed") == []  # the controller stopped it: no crash


def ready_now(h: Harness, s: Service) -> int:
    """Replicas taking traffic: ready, not draining and not being stopped."""
    got = h.get(s)
    draining = got.state.get("draining", {})
    return sum(
        1
        for j in h.live(s)
        if j.state is JobState.RUNNING
        and h.readiness.ready(j.id, j.attempt)
        and str(j.id) not in draining
        and not j.cancel_requested
    )


def test_a_rolling_update_goes_one_by_one_through_draining(h: Harness) -> None:
    s = h.service(replicas=3)
    s = h.up(s)
    old = {j.id for j in h.live(s)}
    s = update_service(h.store, s, ServicePatch(env={"MODEL": "v2"}), h.clock.wall)
    assert s.revision == 2 and s.state["rollout"]["state"] == "progressing"
    seen_draining = False
    for _ in range(60):
        h.ctl.run_pass()
        got = h.get(s)
        draining = got.state.get("draining", {})
        if draining:
            seen_draining = True
            # a drained replica is out of the balance first, stopped DRAIN_S later
            key = next(iter(draining))
            job = h.store.get_job(int(key))
            if h.clock.now - float(draining[key]) < DRAIN_S:
                assert not job.cancel_requested and job.state is JobState.RUNNING
        assert ready_now(h, s) >= 3  # never fewer ready than desired (max_unavailable 0)
        starting = [j for j in h.live(s) if str(j.id) not in draining and not j.cancel_requested]
        assert len(starting) <= 4  # max_surge 1
        h.place()
        h.confirm_cancels()
        h.clock.now += 0.5
        if got.state["rollout"]["state"] == "complete" and got.stable_revision == 2:
            break
    got = h.get(s)
    assert seen_draining
    assert got.state["rollout"] == {**got.state["rollout"], "state": "complete", "revision": 2}
    assert got.stable_revision == 2
    live = h.live(s)
    assert len(live) == 3 and all(j.spec.service_revision == 2 for j in live)
    assert not old & {j.id for j in live}
    assert all(h.store.get_job(i).state is JobState.CANCELLED for i in old)
    assert len(h.events(s, "draining")) == 3 and h.events(s, "crashed") == []
    started = [int(e["message"].split()[2]) for e in h.events(s, "started")]
    assert {h.store.get_job(i).spec.service_revision for i in started[-3:]} == {2}


class CountingGateway:
    """What TrafficFlush reads of a gateway: its counters."""

    def __init__(self) -> None:
        self.stats = TrafficCounters()

    def snapshot(self) -> dict[int, TrafficStats]:
        return self.stats.snapshot()


@pytest.mark.parametrize(
    ("drain_timeout_s", "requests_end_after_s", "stopped_after_s", "why"),
    [
        pytest.param(60.0, 0.0, DRAIN_S, "drained and stopped by its service", id="none in flight: after DRAIN_S"),
        pytest.param(60.0, 6.0, 6.0, "drained and stopped by its service", id="once its requests in flight end"),
        pytest.param(
            9.0,
            None,
            9.0,
            "stopped by its service: 2 request(s) still in flight after the drain timeout (9 s)",
            id="at the drain timeout, requests still in flight",
        ),
    ],
)
def test_a_draining_replica_is_stopped_once_its_requests_in_flight_end_or_at_the_drain_timeout(
    h: Harness, drain_timeout_s: float, requests_end_after_s: float | None, stopped_after_s: float, why: str
) -> None:
    s = h.up(h.service(replicas=2, drain_timeout_s=drain_timeout_s))
    gateway = CountingGateway()
    flush = TrafficFlush(h.store, gateway, "server-a")  # type: ignore[arg-type]
    s = scale_service(h.store, s, 1, h.clock.wall)
    h.ctl.run_pass()
    draining = h.get(s).state["draining"]
    assert len(draining) == 1
    victim, since = int(next(iter(draining))), float(next(iter(draining.values())))
    gateway.stats.add_outstanding(s.id, 2, victim)  # sent before the gateway's refresh took it out of the balance
    stopped_at = None
    while h.clock.now - since <= 20:
        if requests_end_after_s is not None and h.clock.now - since >= requests_end_after_s:
            gateway.stats.add_outstanding(s.id, -gateway.snapshot()[s.id].outstanding_by_job.get(victim, 0), victim)
        flush.run_pass()
        h.ctl.run_pass()
        job = h.store.get_job(victim)
        if job.cancel_requested:
            stopped_at = h.clock.now - since
            break
        h.clock.now += 0.5
    assert stopped_at is not None and stopped_after_s <= stopped_at < stopped_after_s + 0.5, stopped_at
    assert h.store.get_job(victim).state is JobState.RUNNING  # asked to stop; the agent ends it
    assert why in [e.message for e in h.store.list_events(victim)]
    timeouts = h.events(s, "drain-timeout")
    assert len(timeouts) == (1 if requests_end_after_s is None else 0)


def test_a_revision_that_never_becomes_ready_stalls_and_the_old_one_serves_on(h: Harness) -> None:
    s = h.service(replicas=2, progress_deadline_s=30.0)
    s = h.up(s)
    old = {j.id for j in h.live(s)}
    h.readiness.everyone = False
    h.readiness.ready_ids = set(old)
    s = update_service(h.store, s, ServicePatch(command=["serve", "--broken"]), h.clock.wall)
    for _ in range(40):
        h.step()
    got = h.get(s)
    assert got.state["rollout"]["state"] == "stalled"
    assert got.revision == 2 and got.stable_revision == 1
    msg = got.state["rollout"]["message"]
    assert "not ready after 30 s" in msg and "/healthz" in msg
    assert "revision 1 keeps serving" in h.events(s, "rollout-stalled")[-1]["message"]
    live = h.live(s)
    assert {j.id for j in live} == old and not any(j.cancel_requested for j in live)
    new_jobs = [int(e["message"].split()[2]) for e in h.events(s, "started")][-1:]
    assert all(h.store.get_job(i).state is JobState.CANCELLED for i in new_jobs)
    before = len(h.events(s, "started"))
    for _ in range(10):
        h.step()
    assert len(h.events(s, "started")) == before  # stalled: revision 2 is not tried again by itself
    assert len(h.events(s, "rollout-stalled")) == 1


def test_rollback_goes_back_to_the_stable_revision(h: Harness) -> None:
    s = h.service(replicas=2)
    s = h.up(s)
    s = update_service(h.store, s, ServicePatch(env={"V": "2"}), h.clock.wall)
    for _ in range(30):
        h.step(0.5)
    s = h.get(s)
    assert s.stable_revision == 2 and s.state["rollout"]["state"] == "complete"
    s = rollback_service(h.store, s, h.clock.wall)
    assert s.revision == 1 and s.state["rollout"]["state"] == "progressing"
    for _ in range(30):
        h.step(0.5)
    s = h.get(s)
    assert s.revision == 1 and s.stable_revision == 1 and s.state["rollout"]["state"] == "complete"
    live = h.live(s)
    assert len(live) == 2 and all(j.spec.service_revision == 1 for j in live)
    assert all(j.spec.env.get("V") is None for j in live)
    assert h.events(s, "rollback")


# ---- autoscaling -----------------------------------------------------------------------------------------------


def traffic(h: Harness, s: Service, requests: float, *, waiting: int = 0, last: float | None = None) -> None:
    data: dict[str, Any] = {"requests": requests, "errors": 0, "waiting": waiting}
    if last is not None:
        data["last_request_at"] = last
    h.store.save_service_traffic("server-a", {s.id: data}, h.clock.wall)


def test_autoscaling_follows_the_request_rate_and_scales_down_after_the_delay(h: Harness) -> None:
    s = h.service(replicas=1, target_rps=20.0, min_replicas=1, max_replicas=10, scale_down_delay_s=30.0)
    h.readiness.everyone = True
    total = 0.0
    for _ in range(3):  # 100 requests a second: 5 replicas of 20 each
        traffic(h, s, total, last=h.clock.now)
        h.step()
        total += 100
    assert h.get(s).replicas == 5
    assert "scaled up from 1 to 5" in h.events(s, "autoscaled")[0]["message"]
    for _ in range(3):
        traffic(h, s, total, last=h.clock.now)
        h.step()
        total += 100
    assert h.get(s).replicas == 5 and len(h.live(s)) == 5
    flat_since = h.clock.now
    history = []
    for _ in range(50):  # no request any more
        traffic(h, s, total, last=flat_since)
        h.step()
        history.append((h.clock.now - flat_since, h.get(s).replicas))
    assert all(n == 5 for t, n in history if t <= 30)  # not before the stabilisation window passed
    assert history[-1][1] == 1
    down = [e["message"] for e in h.events(s, "autoscaled") if "scaled down" in e["message"]]
    assert down and "below for 30 s" in down[-1]
    for _ in range(5):
        h.step()
    assert len(h.live(s)) == 1


def test_min_zero_scales_to_zero_when_idle_and_back_to_one_for_a_waiting_request(h: Harness) -> None:
    s = h.service(
        replicas=1, target_rps=20.0, min_replicas=0, max_replicas=4, idle_timeout_s=60.0, scale_down_delay_s=0.0
    )
    h.readiness.everyone = True
    for _ in range(59):
        h.step()
    assert h.get(s).replicas == 1 and len(h.live(s)) == 1
    for _ in range(4):
        h.step()
    assert h.get(s).replicas == 0
    assert "no request for 60 s" in h.events(s, "autoscaled")[-1]["message"]
    for _ in range(4):
        h.step()
    assert h.live(s) == []
    traffic(h, s, 0, waiting=1)  # the gateway holds a request for it
    h.step()
    assert h.get(s).replicas == 1
    assert "a request waits for a replica" in h.events(s, "autoscaled")[-1]["message"]
    h.step()
    assert len(h.live(s)) == 1


def test_samples_carry_the_rate_and_the_replicas(h: Harness) -> None:
    s = h.service(replicas=1, target_rps=50.0, min_replicas=1, max_replicas=4)
    h.readiness.everyone = True
    total = 0.0
    for _ in range(12):
        traffic(h, s, total, last=h.clock.now)
        h.step()
        total += 40
    points = h.store.service_samples(s.id, datetime.fromtimestamp(T0 - 1, UTC))
    assert len(points) >= 2
    assert points[-1][1]["rps"] == pytest.approx(40.0) and points[-1][1]["desired"] == 1
    assert points[-1][1]["ready"] == 1
    f = h.ctl.figures(s.id, h.clock.now - 1)  # at the last pass
    assert f is not None and f["rps"] == pytest.approx(40.0) and f["error_rate"] == 0.0


def test_delete_stops_every_replica_then_removes_the_service(h: Harness) -> None:
    s = h.service(replicas=3)
    s = h.up(s)
    h.store.save_service_traffic("server-a", {s.id: {"requests": 1}}, h.clock.wall)
    ids = [j.id for j in h.live(s)]
    delete_service(h.store, s, h.clock.wall)
    h.ctl.run_pass()
    assert all(h.store.get_job(i).cancel_requested for i in ids)
    assert h.store.get_service(s.id) is not None  # not before its replicas stopped
    h.confirm_cancels()
    h.clock.now += 1
    h.ctl.run_pass()
    assert h.store.get_service(s.id) is None and h.store.get_service_by_name("web") is None
    assert all(h.store.get_job(i).state is JobState.CANCELLED for i in ids)
    assert s.id not in h.store.load_service_traffic()
    h.ctl.run_pass()  # a pass after it is gone is quiet
    again = h.service(name="web")  # the name is free again
    assert again.revision == 1 and again.stable_revision == 0 and h.live(again) == []


def test_a_deleted_service_leaves_no_figures_behind(h: Harness) -> None:
    s = h.service(replicas=1)
    h.up(s)
    for i in range(6):
        traffic(h, s, 100.0 * i, last=h.clock.now)
        h.step()
    assert h.ctl.figures(s.id) is not None
    delete_service(h.store, h.get(s), h.clock.wall)
    for _ in range(4):
        h.step()
    assert h.store.get_service(s.id) is None
    assert h.ctl.figures(s.id) is None
    assert s.id not in h.ctl.autoscalers and s.id not in h.ctl.latest


def crash_new_replicas(h: Harness, s: Service, exit_code: int = 1) -> None:
    """Every replica placed this pass dies at once, as a server that cannot start would."""
    for j in h.live(s):
        if j.state is JobState.RUNNING and j.id not in h.readiness.ready_ids:
            assert h.store.finish_job(j.id, JobState.FAILED, exit_code, "crashed", h.clock.wall)


def test_a_new_revision_whose_replicas_keep_crashing_stalls(h: Harness) -> None:
    s = h.service(replicas=2)
    s = h.up(s)
    old = {j.id for j in h.live(s)}
    h.readiness.everyone = False
    h.readiness.ready_ids = set(old)
    update_service(h.store, s, ServicePatch(command=["serve", "--broken"]), h.clock.wall)
    for _ in range(40):
        h.step(0.5)
        crash_new_replicas(h, s, exit_code=3)
    got = h.get(s)
    assert got.state["rollout"]["state"] == "stalled" and got.stable_revision == 1
    assert "ended 3 times before becoming ready" in got.state["rollout"]["message"]
    assert {j.id for j in h.live(s)} == old
    assert all("exited 3" in e["message"] for e in h.events(s, "crashed"))


def test_a_replica_that_keeps_crashing_backs_off_beside_a_healthy_one(h: Harness) -> None:
    s = h.service(replicas=2)
    s = h.up(s)
    h.readiness.everyone = False
    h.readiness.ready_ids = {h.live(s)[0].id}  # one serves; whatever replaces the other dies at start
    assert h.store.finish_job(h.live(s)[1].id, JobState.FAILED, 1, "crashed", h.clock.wall)
    for _ in range(40):
        h.step(0.25)
        crash_new_replicas(h, s)
    delays = [e["message"] for e in h.events(s, "restarting")]
    assert len(delays) >= 3
    assert any("starts in 4 s" in m for m in delays), delays
