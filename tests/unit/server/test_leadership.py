"""Several server replicas on one database (issue 17), on SQLite and PostgreSQL: the leader lease is held by one
replica at a time, renewed by it, taken by another only once it expired (a new epoch: a fencing token), given up
at once on a clean stop; a replica that does not lead computes the plan (to say why jobs wait) but never applies it,
and leads (and applies) once it holds the lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.core.models import JobSpec
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.background.leadership import Leadership
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.server.services.replicas import compute_status
from corral.store.records import Replica
from corral.store.sql import SqlStore

T0 = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def test_one_holder_at_a_time_renewed_taken_over_only_when_expired(store: SqlStore) -> None:
    a = store.claim_lease("a", T0, 6.0)
    assert (a.holder, a.epoch, a.since) == ("a", 1, T0)
    b = store.claim_lease("b", T0 + timedelta(seconds=3), 6.0)
    assert (b.holder, b.epoch) == ("a", 1)  # a's lease lives: b is told who leads
    renewed = store.claim_lease("a", T0 + timedelta(seconds=5), 6.0)
    assert (renewed.holder, renewed.epoch, renewed.since) == ("a", 1, T0)  # a renewal keeps epoch and since
    assert renewed.expires_at == T0 + timedelta(seconds=11)
    later = T0 + timedelta(seconds=12)  # a stopped renewing (died): past its expiry b takes over
    taken = store.claim_lease("b", later, 6.0)
    assert (taken.holder, taken.epoch, taken.since) == ("b", 2, later)
    stale = store.claim_lease("a", later + timedelta(seconds=1), 6.0)  # the old leader wakes up: not its lease
    assert (stale.holder, stale.epoch) == ("b", 2)
    assert store.release_lease("b", later + timedelta(seconds=2))
    assert not store.release_lease("a", later + timedelta(seconds=2))
    again = store.claim_lease("a", later + timedelta(seconds=2, milliseconds=1), 6.0)  # released: no wait
    assert (again.holder, again.epoch) == ("a", 3)


def test_replicas_heartbeat_and_status_lists_the_live_ones(store: SqlStore) -> None:
    for rid, seen in (("r1", T0), ("r2", T0 - timedelta(seconds=30))):
        store.touch_replica(Replica(rid, "host", f"https://{rid}:8443", "1.0", T0 - timedelta(minutes=5), seen))
    store.touch_replica(Replica("r1", "host", "", "1.0", T0, T0 + timedelta(seconds=1)))  # a heartbeat
    store.claim_lease("r1", T0, 6.0)
    status = compute_status(store, "r1", T0 + timedelta(seconds=2))
    assert (status.leader, status.leader_epoch, status.replica) == ("r1", 1, "r1")
    assert [(r.id, r.leader, r.url) for r in status.replicas] == [("r1", True, "https://r1:8443")]  # r2 is gone
    assert compute_status(store, "r1", T0 + timedelta(seconds=60)).leader is None  # the lease expired
    assert store.forget_replicas(T0 - timedelta(seconds=1)) == 1


def test_leadership_loops_two_replicas_one_leads_and_a_clean_stop_hands_over(store: SqlStore) -> None:
    changes: list[tuple[str, bool]] = []
    first = Leadership(store, "https://a", replica_id="a", on_change=lambda on: changes.append(("a", on)))
    second = Leadership(store, "https://b", replica_id="b", on_change=lambda on: changes.append(("b", on)))
    assert first.claim() and not second.claim()
    assert first.leading and not second.leading
    first.run_pass()
    second.run_pass()  # heartbeats
    assert {r.id for r in store.list_replicas(datetime.now(UTC) - timedelta(seconds=5))} == {"a", "b"}
    first.on_stop()  # a clean stop gives the lease up
    assert second.claim() and second.leading
    assert changes == [("a", True), ("b", True)]


def _pending_job_on_a_node(store: SqlStore) -> int:
    gpu = GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920)
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, [gpu], datetime.now(UTC))
    return store.create_job(JobSpec(command=("true",), gpus=1), datetime.now(UTC)).id


def test_a_replica_that_does_not_lead_computes_the_plan_but_never_applies_it(store: SqlStore) -> None:
    job = _pending_job_on_a_node(store)
    leading = False
    follower = Scheduler(store, NodeNotifier(), "bestfit", 1.0, leading=lambda: leading)
    assert follower.run_once(datetime.now(UTC)) == []
    found = store.get_job(job)
    assert found is not None and found.state is JobState.PENDING
    assert job not in follower.pending_reasons  # it would start: no reason to wait
    leading = True  # the lease came to this replica
    assert follower.run_once(datetime.now(UTC)) == [job]
    started = store.get_job(job)
    assert started is not None and started.state is JobState.RUNNING


def test_a_worker_serving_only_agents_computes_no_plan_but_wakes_its_agents_and_plans_once_it_leads(
    store: SqlStore,
) -> None:
    """CORRAL_WORKERS: a worker serving the agents' port answers no one why a job waits, so it spends no pass on a
    plan while another leads; it still wakes the long polls it holds when the leader gave their node work."""

    class Woken(NodeNotifier):
        def __init__(self) -> None:
            super().__init__()
            self.nodes: list[str] = []

        def notify(self, node: str) -> None:
            self.nodes.append(node)
            super().notify(node)

    job = _pending_job_on_a_node(store)
    leading = False
    woken = Woken()
    worker = Scheduler(store, woken, "bestfit", 1.0, leading=lambda: leading, explains=False)
    assert worker.run_once(datetime.now(UTC)) == []
    assert worker.last_cycle is None and woken.nodes == []  # no plan computed
    leader = Scheduler(store, NodeNotifier(), "bestfit", 1.0)
    assert leader.run_once(datetime.now(UTC)) == [job]  # the leader places it on n1
    worker.run_once(datetime.now(UTC))
    assert "n1" in woken.nodes  # n1's agent, whose long poll the worker holds, hears of it now
    store.mark_delivered([job], "n1")
    woken.nodes.clear()
    worker.run_once(datetime.now(UTC))
    assert woken.nodes == []  # nothing new for n1
    assert store.requeue_job(job, "node n1 drained", datetime.now(UTC))  # `corral nodes drain n1`, via the starter
    worker.run_once(datetime.now(UTC))
    assert woken.nodes == ["n1"]  # n1's agent stops the run now, not at the end of its long poll
    assert leader.run_once(datetime.now(UTC)) == [job]
    second = store.create_job(JobSpec(command=("true",), gpus=1), datetime.now(UTC)).id
    leading = True  # the lease came to the worker (its starter is gone)
    worker.run_once(datetime.now(UTC))
    assert worker.last_cycle is not None  # a leader plans whatever it serves
    assert second in worker.pending_reasons  # n1's one GPU is taken: it says why the job waits


def test_any_replicas_job_proxy_may_check_a_port_whose_agent_syncs_with_another(store: SqlStore) -> None:
    from corral.api.schemas import WebPortReport
    from corral.server.services.webports import WebPortRegistry

    _pending_job_on_a_node(store)
    here, there = WebPortRegistry(store=store), WebPortRegistry(store=store)
    report = WebPortReport(job_id=7, attempt=1, rank=0, port=31000, listening=True)
    assert WebPortRegistry(store=store).why_not("n1", 7, 1, 31000) is not None  # nobody vouched for it yet
    here.record("n1", [report])  # the agent syncs with `here`
    assert here.why_not("n1", 7, 1, 31000) is None
    assert there.why_not("n1", 7, 1, 31000) is None  # read from the database
    assert "not checked port 31001" in (there.why_not("n1", 7, 1, 31001) or "")
    stale = WebPortRegistry(ttl_s=0.0, store=store)  # a report older than the TTL vouches for nothing
    assert stale.why_not("n1", 7, 1, 31000) is not None


def test_a_report_is_written_again_for_its_age_but_an_empty_one_only_when_it_changes(store: SqlStore) -> None:
    """Other replicas trust a written report for REPORT_TTL_S, so an unchanged one is written again every
    PERSIST_EVERY_S; an empty one vouches for no port at any age, and a fleet of idle nodes must not write a row a
    sync for it."""
    from corral.api.schemas import WebPortReport
    from corral.server.services.webports import PERSIST_EVERY_S, WebPortRegistry

    writes: list[tuple[str, list[object]]] = []

    class Counting:
        def save_web_ports(self, node: str, reports: list[object], now: object) -> None:
            writes.append((node, reports))
            store.save_web_ports(node, reports, now)  # type: ignore[arg-type]

        def load_web_ports(self, node: str) -> object:
            return store.load_web_ports(node)

    _pending_job_on_a_node(store)
    registry = WebPortRegistry(store=Counting())  # type: ignore[arg-type]
    registry.record("n1", [], now=0.0)
    assert writes == [("n1", [])]  # the first sync here clears what another replica may have written
    registry.record("n1", [], now=1.0)
    registry.record("n1", [], now=PERSIST_EVERY_S * 3)
    assert len(writes) == 1
    report = WebPortReport(job_id=7, attempt=1, rank=0, port=31000, listening=True)
    registry.record("n1", [report], now=PERSIST_EVERY_S * 3 + 1)
    registry.record("n1", [report], now=PERSIST_EVERY_S * 3 + 2)
    assert len(writes) == 2  # a change is written at once, the same report not again so soon
    registry.record("n1", [report], now=PERSIST_EVERY_S * 4 + 1)
    assert len(writes) == 3  # ... but again once PERSIST_EVERY_S old, for its age
    registry.record("n1", [], now=PERSIST_EVERY_S * 4 + 2)
    assert writes[-1] == ("n1", [])  # and emptied at once


def test_an_agents_report_order_holds_across_replicas(store: SqlStore) -> None:
    """An agent that fails over reports to another replica: a snapshot older than one a replica applied counts for
    its exits only, whichever replica it reaches (the order is kept in the database)."""
    from corral.server.services.agents import ReportOrder

    _pending_job_on_a_node(store)
    here, there = ReportOrder(store), ReportOrder(store)
    assert here.is_fresh("n1", "boot-1", 5)
    assert not there.is_fresh("n1", "boot-1", 4) and not there.is_fresh("n1", "boot-1", 5)
    assert there.is_fresh("n1", "boot-1", 6) and not here.is_fresh("n1", "boot-1", 6)
    assert here.is_fresh("n1", "boot-2", 1)  # a restarted agent starts its numbers over


def test_a_lone_server_on_sqlite_always_leads(store: SqlStore) -> None:
    """SQLite is one server's file: its server leads whatever the lease says, so a renewal held up by a busy
    database never pauses its scheduler (the lease only informs `corral status`)."""
    other = Leadership(store, "https://x", replica_id="x")
    assert other.claim()
    solo = Leadership(store, "https://a", replica_id="a", solo=True)
    solo.claim()
    assert solo.leading and solo.lease is not None and solo.lease.holder == "x"
