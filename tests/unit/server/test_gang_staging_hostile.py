"""Multi-node (gang) data staging, and schedules and services under the server's own rules, under attack: a hostile
member of one tenant, or a node, trying to read or write another tenant's data, forge or replay a node's staging
reports (a node outside the gang, one of it reporting twice), make a gang run on nodes it should not (the one-of
node selector "n1|n2"), make nodes stage without end, get from a schedule or a service what a submission is
refused; and races (cancel, cordon, requeue mid-staging, a gang requeued after its rank 0 shipped its output, two
nodes reporting at once, a restart mid-staging, a replica of the previous release). Each test passes when the system
defends itself. (The five holes this review found were mended: a requeued gang's next attempt ships its output,
a replica of the previous release restaging a job, two nodes' 'done' at once on SQLite, the scheduler woken by the
last of two, an empty member of a one-of selector.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError as PydanticError
from sqlalchemy import update
from staging_api import StagingApi as Api
from staging_api import _gpu, open_staging_api

from corral.api.schemas import AgentRegister, AgentSync, ExitReport
from corral.api.staging import StageReport
from corral.core.models import compute_request
from corral.core.states import JobState
from corral.scheduler.filters import check_node_constraints, label_matches
from corral.scheduler.framework import Code
from corral.server.app import create_app
from corral.server.services.agents import apply_reports, register_node
from corral.server.services.jobs import SubmitRules
from corral.server.services.staging import record_stage_reports
from corral.store.sql import open_store
from corral.store.tables import JobRow

KEY = "s3-gang-hostile-KEY-314159"
GANG = {"gpus": 2, "nodes": 2}  # each harness node has 2 GPUs: a gang of two whole nodes


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with open_staging_api(database_url, tmp_path, ("vision", "vision2", "nlp"), KEY) as a:
        yield a


def _add_n3(api: Api, labels: dict[str, str] | None = None) -> None:
    """A third node (2 H100s): a node outside a gang of two."""
    api.store.upsert_node("n3", "n3", "simulated", 8000, 65536, labels or {}, [_gpu(0), _gpu(1)], datetime.now(UTC))


def _pass(api: Api) -> None:
    now = datetime.now(UTC)
    for n in api.store.list_nodes():
        api.store.touch_node(n.name, now)
    api.ctx.scheduler.run_once(now)


def _done(api: Api, node: str, job_id: int, **kw: Any) -> bool:
    return record_stage_reports(api.store, node, {str(job_id): StageReport(state="done", **kw)}, {})


def _gang_staging(api: Api, auth: dict[str, str], **body: Any) -> tuple[int, tuple[str, ...]]:
    """A gang of `auth` whose input is being staged: its id and its stage nodes."""
    r = api.submit(auth, **GANG, **body)
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    _pass(api)
    job = api.job(job_id)
    assert job.stage_state == "staging" and len(job.stage_nodes) == 2, job
    return job_id, job.stage_nodes


def _gang_running(api: Api, auth: dict[str, str], **body: Any) -> tuple[int, str, str]:
    """A gang staged on both its nodes and placed: its id, rank 0's node and rank 1's."""
    job_id, nodes = _gang_staging(api, auth, **body)
    for n in nodes:
        _done(api, n, job_id)
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.RUNNING and len(job.placed_parts) == 2, job
    return job_id, job.placed_parts[0][0], job.placed_parts[1][0]


def _exit(api: Api, node: str, job_id: int, rank: int, code: int = 0, attempt: int = 1) -> None:
    apply_reports(
        api.store, node, AgentSync(exits=[ExitReport(job_id=job_id, attempt=attempt, rank=rank, exit_code=code)])
    )


def _s3_items(api: Api, auth: dict[str, str]) -> dict[str, Any]:
    assert api.s3_secret(auth).status_code == 201
    return {"stage_in": ["s3://inputs/shard/:data"], "stage_out": ["out/:s3://outputs/g/"], "stage_secret": "s3"}


# ---- forged and replayed reports -----------------------------------------------------------------------------------
def test_gang_node_outside_the_gang_cannot_finish_fail_or_hear_of_its_staging(api: Api) -> None:
    _add_n3(api)
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, **_s3_items(api, alice))
    [outsider] = {"n1", "n2", "n3"} - set(nodes)
    assert api.orders(outsider) == ([], [])  # no order, so no S3 login
    for state in ("done", "failed", "running"):
        report = StageReport(state=state, message="pwned", total_bytes=1 << 40, done_bytes=1 << 40)  # type: ignore[arg-type]
        assert not record_stage_reports(api.store, outsider, {str(job_id): report}, {str(job_id): report})
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and job.stage_done == (), job
    assert "pwned" not in job.stage_progress and all("pwned" not in e.message for e in api.store.list_events(job_id))
    assert not api.store.finish_staging_on(job_id, outsider)  # the store refuses it too
    assert api.job(job_id).stage_done == ()


def test_gang_node_reporting_done_twice_or_under_other_keys_counts_once(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, (first, second) = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    same = {k: StageReport(state="done") for k in (str(job_id), f"0{job_id}", f" {job_id}", f"{job_id}.0")}
    record_stage_reports(api.store, first, same, {})
    for _ in range(3):  # replayed in later syncs
        assert not _done(api, first, job_id)
    assert not api.store.finish_staging_on(job_id, first)
    job = api.job(job_id)
    assert job.stage_state == "staging" and job.stage_done == (first,), job
    assert [e.kind for e in api.store.list_events(job_id)].count("staged") == 1
    # once done there, the node hears no more of it: a later 'failed' or progress from it changes nothing
    assert api.orders(first) == ([], [])
    assert not record_stage_reports(api.store, first, {str(job_id): StageReport(state="failed", message="x")}, {})
    record_stage_reports(api.store, first, {str(job_id): StageReport(state="running", total_bytes=9)}, {})
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and job.node is None, job
    assert _done(api, second, job_id)  # the other one completes it
    _pass(api)
    assert api.job(job_id).state is JobState.RUNNING


def test_gang_node_name_that_is_a_like_pattern_never_matches_another_node(api: Api) -> None:
    """list_staging finds a gang's nodes with SQL LIKE ',NODE,': a node named with '_' (a LIKE wildcard) must not
    hear of, nor finish, a staging on n1."""
    api.store.upsert_node("n_", "n_", "simulated", 8000, 65536, {}, [_gpu(0), _gpu(1)], datetime.now(UTC))
    assert api.call("POST", "/nodes/n_/cordon").status_code == 200  # the gang goes to n1 and n2
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    assert sorted(nodes) == ["n1", "n2"]
    assert api.store.list_staging("n_") == []
    assert not _done(api, "n_", job_id) and not api.store.finish_staging_on(job_id, "n_")
    assert api.job(job_id).stage_done == ()


# ---- where a gang runs: the one-of node selector ------------------------------------------------------------------
def test_staged_gang_runs_on_exactly_its_stage_nodes_never_a_node_that_claims_their_name(api: Api) -> None:
    """A third node whose agent labels itself `corral.node: n1|n2` (and `pool`) cannot take a part of a gang staged
    on two other nodes."""
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    register_node(
        api.store,
        AgentRegister(
            name="n3",
            backend="simulated",
            labels={"corral.node": "|".join(nodes), "pool": "static|x", "source": "agent"},
            gpus=[{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(2)],
        ),
    )
    for n in nodes:
        _done(api, n, job_id)
    staged = api.job(job_id)
    assert staged.stage_state == "staged" and staged.spec.pinned_node == "|".join(nodes), staged
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.RUNNING and {n for n, _ in job.placed_parts} == set(nodes), job
    # n3 (free, claiming their names) is refused by the node selector itself, not by chance of the policy
    assert api.ctx.scheduler.last_cycle is not None
    snapshot = api.ctx.scheduler.last_cycle[0]
    [n3] = [n for n in snapshot.nodes if n.info.name == "n3"]
    assert dict(n3.info.labels)["corral.node"] == "n3" and dict(n3.info.labels)["pool"] == "static"
    status = check_node_constraints(n3, compute_request(staged.spec))
    assert status.code is Code.UNRESOLVABLE, status


def test_one_of_separator_cannot_come_from_a_tenant_or_a_node_name(api: Api) -> None:
    alice = api.user("alice", "vision")
    for pool in ("static|gpu", "|static", "static|"):
        r = api.submit(alice, gpus=1, pool=pool)
        assert r.status_code == 422, (pool, r.text)
    r = api.submit(alice, gpus=1, pinned_node="n1|n2")  # never the submitter's to say
    assert r.status_code == 422, r.text
    for name in ("n1|n2", "n1,n2", "n%"):
        with pytest.raises(PydanticError):
            AgentRegister(name=name, backend="simulated")
    assert label_matches("n1", "n1|n2") and label_matches("n2", "n1|n2") and label_matches("n1", "n1")
    assert not label_matches("n1|n2", "n1") and not label_matches("n", "n1|n2") and not label_matches(None, "n1|n2")
    assert not label_matches("n1", "n1,n2") and not label_matches("n1|n2x", "n1|n2")


def test_one_of_selector_with_an_empty_member_matches_no_empty_label() -> None:
    assert not label_matches("", "n1|") and not label_matches("", "|n1")


# ---- another tenant's data ---------------------------------------------------------------------------------------
def test_gang_cannot_stage_from_or_into_another_tenants_dir(api: Api) -> None:
    alice = api.user("alice", "vision")
    s = str(api.shared)
    for body in (
        {"stage_in": [f"{s}/nlp/ds/:ds"]},
        {"stage_in": [f"{s}/vision2/ds/:ds"]},
        {"stage_in": [f"{s}/vision/../nlp/ds/:ds"]},
        {"stage_out": [f"out/:{s}/nlp/out/"]},
        {"stage_out": [f"out/:{s}/vision/../nlp/out/"]},
        {"stage_out": [f"out/:{api.shared.parent}/datasets/x/"]},
    ):
        r = api.submit(alice, **GANG, **body)
        assert r.status_code in (400, 422), (body, r.text)
    assert api.store.list_jobs(states=[JobState.PENDING]) == []


def test_gang_orders_carry_the_jobs_own_tenant_roots_on_every_node(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    for n in nodes:
        [order], _ = api.orders(n)
        assert order.job_id == job_id and [r.path for r in order.roots][0] == f"{api.shared}/vision"
        assert all(not r.path.endswith(("/nlp", "/vision2")) for r in order.roots)


# ---- schedules and services: nothing a submission is refused -------------------------------------------------------
def test_schedule_cannot_stage_another_tenants_dir_created_patched_or_run(api: Api) -> None:
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    s = str(api.shared)
    theirs = {"command": ["t"], **GANG, "stage_in": [f"{s}/nlp/ds/:ds"]}
    r = api.call("POST", "/schedules", auth=alice, json={"schedule": "@every 1h", "job": theirs})
    assert r.status_code == 400 and r.json()["error"]["field"] == "job.stage_in", r.text
    out = {"command": ["t"], "stage_out": [f"o/:{s}/nlp/o/"]}
    r = api.call("POST", "/schedules", auth=alice, json={"schedule": "@every 1h", "job": out})
    assert r.status_code == 400 and r.json()["error"]["field"] == "job.stage_out", r.text
    mine = {"command": ["t"], **GANG, "stage_in": [f"{s}/vision/ds/:ds"]}
    r = api.call("POST", "/schedules", auth=alice, json={"schedule": "@every 1h", "job": mine})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for job in (theirs, out, {**mine, "stage_in": [f"{s}/vision/../nlp/ds/:ds"]}):
        r = api.call("PATCH", f"/schedules/{sid}", auth=alice, json={"job": job})
        assert r.status_code in (400, 422) and r.json()["error"]["field"].startswith("job.stage_"), r.text
    # bob (another tenant) may not change hers to read his own dir (nor see it)
    r = api.call("PATCH", f"/schedules/{sid}", auth=bob, json={"job": {**mine, "stage_in": [f"{s}/nlp/ds/:ds"]}})
    assert r.status_code in (403, 404), r.text
    stored = api.store.get_schedule(sid)
    assert stored is not None and stored.job["stage_in"] == [f"{s}/vision/ds/:ds"]


def test_schedule_fired_or_run_after_the_rules_narrowed_is_refused(api: Api) -> None:
    """A schedule accepted under wider settings is checked again at each firing, with the runner's rules."""
    alice = api.user("alice", "vision")
    mine = {"command": ["t"], **GANG, "stage_in": [f"{api.shared}/vision/ds/:ds"]}
    r = api.call("POST", "/schedules", auth=alice, json={"schedule": "@every 1h", "job": mine})
    assert r.status_code == 201, r.text
    runner = api.ctx.schedules
    runner.rules = SubmitRules()  # the server restarted without CORRAL_STAGE_PATHS
    now = api.call("POST", f"/schedules/{r.json()['id']}/run", auth=alice)
    assert now.status_code == 400 and "stage_in" in now.text, now.text
    schedule = api.store.get_schedule(r.json()["id"])
    assert schedule is not None
    assert runner.run_due(schedule.next_run_at + timedelta(seconds=1)) == []
    after = api.store.get_schedule(schedule.id)
    assert after is not None and "stage_in" in after.last_error, after
    assert api.store.list_jobs(states=[JobState.PENDING]) == []


def test_service_cannot_stage_nor_mount_what_the_server_does_not_allow(api: Api) -> None:
    """The staging harness allows no host mounts; a service's template has no staging fields."""
    alice = api.user("alice", "vision")
    base = {"name": "web", "image": "registry.example/web:1", "port": 8000}
    for extra in (
        {"stage_in": [f"{api.shared}/nlp/ds/:ds"]},
        {"stage_out": [f"o/:{api.shared}/nlp/o/"]},
        {"nodes": 2},
        {"pinned_node": "n1|n2"},
    ):
        r = api.call("POST", "/services", auth=alice, json={**base, **extra})
        assert r.status_code in (400, 422), (extra, r.text)
    for mount in (f"{api.shared}/nlp:/d", f"{api.shared}/vision:/d", "/etc:/x"):
        r = api.call("POST", "/services", auth=alice, json={**base, "mounts": [mount]})
        assert r.status_code == 400 and r.json()["error"]["field"] == "mounts", r.text
    r = api.call("POST", "/services", auth=alice, json=base)
    assert r.status_code == 201, r.text
    for body in ({"mounts": [f"{api.shared}/nlp:/d"]}, {"stage_in": [f"{api.shared}/nlp/x:x"]}):
        bad = api.call("PATCH", "/services/web", auth=alice, json=body)
        assert bad.status_code in (400, 422), bad.text
    svc = api.call("GET", "/services/web", auth=alice).json()
    assert "nlp" not in str(svc)


# ---- races -----------------------------------------------------------------------------------------------------------
def test_gang_cancelled_mid_staging_withdraws_every_nodes_order(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, **_s3_items(api, alice))
    first = nodes[0]
    _done(api, first, job_id)
    assert api.call("POST", f"/jobs/{job_id}/cancel", auth=alice).status_code == 200
    for n in nodes:
        assert api.orders(n) == ([], [])  # neither keeps the login nor stages on
        assert not _done(api, n, job_id)
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.CANCELLED and job.node is None and job.placed_parts == (), job
    assert job.stage_out_state in ("skipped", "pending", ""), job
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["stage_out_state"] in (None, "skipped"), shown


def test_gang_node_cordoned_after_one_finished_restages_all_and_forgets_the_done(api: Api) -> None:
    """finish_staging_on against the unstaging of a gang: n1 done, n2 cordoned: the whole gang is staged again; the
    old 'done' is forgotten (else it would be pinned back to a set it is not staged on) and a late report of the
    cordoned node changes nothing."""
    alice = api.user("alice", "vision")
    job_id, (first, second) = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    assert _done(api, first, job_id) is False
    assert api.call("POST", f"/nodes/{second}/cordon").status_code == 200
    _pass(api)
    job = api.job(job_id)
    assert job.stage_state == "" and job.stage_nodes == () and job.stage_done == (), job
    assert not _done(api, second, job_id) and not api.store.finish_staging_on(job_id, second)
    assert not _done(api, first, job_id)
    assert api.orders(second) == ([], [])
    assert api.call("POST", f"/nodes/{second}/uncordon").status_code == 200
    _pass(api)
    job = api.job(job_id)
    assert job.stage_state == "staging" and sorted(job.stage_nodes) == sorted((first, second)), job
    assert job.stage_done == (), job  # both must say so again
    assert not _done(api, first, job_id)
    assert api.job(job_id).stage_state == "staging"


def test_gang_staged_then_a_node_cordoned_never_runs_on_the_rest(api: Api) -> None:
    _add_n3(api)
    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    for n in nodes:
        _done(api, n, job_id)
    assert api.job(job_id).stage_state == "staged"
    assert api.call("POST", f"/nodes/{nodes[1]}/cordon").status_code == 200
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.PENDING and nodes[1] not in job.stage_nodes, job
    assert not job.placed_parts, job


def test_requeued_gang_is_staged_again_on_every_node(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, rank0, rank1 = _gang_running(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    assert api.store.requeue_job(job_id, f"node {rank1} lost", datetime.now(UTC), failure=True)
    assert not _done(api, rank0, job_id)  # a late 'done' for the attempt that ran does not stage the next
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "" and job.stage_done == (), job
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and job.stage_done == (), job
    assert _done(api, rank0, job_id) is False
    _pass(api)
    assert api.job(job_id).state is JobState.PENDING


def test_two_nodes_reporting_done_at_once_both_count(
    api: Api, database_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Two agents' syncs are applied in parallel (a lock per node). finish_staging_on reads stage_done and writes it
    back: both reads before either write (forced here by a barrier after the read) must not lose one 'done'."""
    import corral.store.sql as sql

    alice = api.user("alice", "vision")
    job_id, nodes = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    barrier = threading.Barrier(2)
    real = sql._staging_of

    def slow(r: Any) -> Any:
        try:
            barrier.wait(timeout=2)  # PostgreSQL's FOR UPDATE holds the second reader: the barrier breaks
        except threading.BrokenBarrierError:
            pass
        return real(r)

    monkeypatch.setattr(sql, "_staging_of", slow)
    results: dict[str, str] = {}
    threads = [
        threading.Thread(target=lambda n=n: results.update({n: api.store.finish_staging_on(job_id, n)})) for n in nodes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    monkeypatch.setattr(sql, "_staging_of", real)
    job = api.job(job_id)
    assert sorted(results.values()) == ["staged", "staging"], results  # each counted; the last made it staged
    assert sorted(job.stage_done) == sorted(nodes) and job.stage_state == "staged", job


def test_two_nodes_reporting_done_at_once_make_the_gang_placeable(api: Api) -> None:
    """record_stage_reports returns whether a job became placeable (the scheduler runs at once): when the last two
    'done' of a gang are applied from lists read before either, one of them must say so."""
    alice = api.user("alice", "vision")
    job_id, (first, second) = _gang_staging(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    listed = {n: api.store.list_staging(n) for n in (first, second)}  # both syncs read their node's stagings ...
    store = api.store

    class Stale:  # ... then apply their reports
        def __init__(self, node: str) -> None:
            self.node = node

        def __getattr__(self, name: str) -> Any:
            if name == "list_staging":
                return lambda node: listed[node]
            return getattr(store, name)

    got = [record_stage_reports(Stale(n), n, {str(job_id): StageReport(state="done")}, {}) for n in (first, second)]  # type: ignore[arg-type]
    assert api.job(job_id).stage_state == "staged"
    assert any(got), "neither report said the gang became placeable: it waits for the next pass"


# ---- output of a gang ---------------------------------------------------------------------------------------------
def test_gang_output_is_asked_of_rank0_only_after_its_part_ended(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, rank0, rank1 = _gang_running(api, alice, **_s3_items(api, alice))
    forged = {str(job_id): StageReport(state="done", message="uploaded 0 files (forged)")}
    assert api.orders(rank0) == ([], []) and api.orders(rank1) == ([], [])
    # rank 1 ends first: nothing is shipped yet, and rank 1's node is never asked
    _exit(api, rank1, job_id, rank=1)
    assert api.orders(rank0) == ([], []) and api.orders(rank1) == ([], [])
    # rank 1's node cannot claim rank 0's exit (to ship early) ...
    _exit(api, rank1, job_id, rank=0)
    assert api.orders(rank0)[1] == [] and api.job(job_id).state is JobState.RUNNING
    # ... nor report an output done, nor can rank 0's before its part ended
    record_stage_reports(api.store, rank1, {}, forged)
    record_stage_reports(api.store, rank0, {}, forged)
    assert api.job(job_id).stage_out_state == "pending"
    _exit(api, rank0, job_id, rank=0)
    assert api.job(job_id).state is JobState.SUCCEEDED
    assert [o.job_id for o in api.orders(rank0)[1]] == [job_id] and api.orders(rank1) == ([], [])
    record_stage_reports(api.store, rank1, {}, forged)
    assert api.job(job_id).stage_out_state == "pending"


def test_gang_requeued_after_rank0_shipped_ships_the_next_attempts_output(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, rank0, rank1 = _gang_running(api, alice, **_s3_items(api, alice))
    _exit(api, rank0, job_id, rank=0)
    assert [o.job_id for o in api.orders(rank0)[1]] == [job_id]
    record_stage_reports(api.store, rank0, {}, {str(job_id): StageReport(state="done", files=1, total_bytes=1)})
    assert api.job(job_id).stage_out_state == "done"
    # rank 1's node is lost: the job goes back to the queue (a failure it did not cause)
    assert api.store.requeue_job(job_id, f"node {rank1} lost", datetime.now(UTC), failure=True)
    _pass(api)
    job = api.job(job_id)
    for n in job.stage_nodes:
        _done(api, n, job_id)
    _pass(api)
    job = api.job(job_id)
    assert job.state is JobState.RUNNING and job.attempt == 2, job
    r0, r1 = job.placed_parts[0][0], job.placed_parts[1][0]
    _exit(api, r1, job_id, rank=1, attempt=2)
    _exit(api, r0, job_id, rank=0, attempt=2)
    assert api.job(job_id).state is JobState.SUCCEEDED
    assert [o.job_id for o in api.orders(r0)[1]] == [job_id], "the attempt that ran to the end ships nothing"
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["stage_out_state"] != "done", shown


# ---- denial of service -------------------------------------------------------------------------------------------
def test_a_tenants_gangs_cannot_make_nodes_stage_more_than_the_cluster_could_run(api: Api) -> None:
    alice = api.user("alice", "vision")
    ids = []
    for i in range(6):
        r = api.submit(alice, **GANG, stage_in=[f"{api.shared}/vision/ds{i}/:ds"])
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["id"]))
    for _ in range(3):
        _pass(api)
    staging = [j for j in ids if api.job(j).stage_state == "staging"]
    assert len(staging) == 1, f"{len(staging)} gangs of 2 whole nodes staging at once on a 2-node cluster"
    for n in ("n1", "n2"):
        assert len(api.orders(n)[0]) == 1


# ---- crash safety and a replica of the previous release ---------------------------------------------------------
@contextmanager
def _restarted(api: Api, database_url: str) -> Iterator[Api]:
    store = open_store(database_url)
    with TestClient(create_app(api.ctx.settings, store)) as client:
        yield Api(client, "", api.shared, api.key)


def test_restart_mid_gang_staging_loses_nothing(database_url: str, tmp_path: Path) -> None:
    with open_staging_api(database_url, tmp_path, ("vision",), KEY) as api:
        alice = api.user("alice", "vision")
        job_id, (first, second) = _gang_staging(api, alice, **_s3_items(api, alice))
        _done(api, first, job_id)
        before = api.job(job_id)
        settings_api = api
    with _restarted(settings_api, database_url) as again:
        job = again.job(job_id)
        assert (job.stage_state, job.stage_nodes, job.stage_done) == ("staging", before.stage_nodes, (first,)), job
        assert again.orders(first) == ([], [])
        [order], _ = again.orders(second)
        assert order.job_id == job_id and order.s3 is not None and order.s3.secret_access_key == KEY
        _pass(again)
        job = again.job(job_id)
        assert job.state is JobState.PENDING and job.stage_done == (first,), job  # not restaged, not placed
        assert not _done(again, first, job_id)
        _done(again, second, job_id)
        _pass(again)
        job = again.job(job_id)
        assert job.state is JobState.RUNNING and {n for n, _ in job.placed_parts} == {first, second}, job


def test_job_restaged_by_a_replica_of_the_previous_release_is_staged_where_it_says(api: Api) -> None:
    alice = api.user("alice", "vision")
    r = api.submit(alice, gpus=1, stage_in=[f"{api.shared}/vision/ds/:ds"])
    job_id = int(r.json()["id"])
    _pass(api)
    old = api.job(job_id).stage_node
    new = "n2" if old == "n1" else "n1"
    with api.store._tx() as s:  # what 0026's _unstage_lost then _stage_first write: its columns only
        s.execute(update(JobRow).where(JobRow.id == job_id).values(stage_state="", stage_node=None, stage_progress=""))
    with api.store._tx() as s:
        s.execute(update(JobRow).where(JobRow.id == job_id).values(stage_state="staging", stage_node=new))
    assert [o.job_id for o in api.orders(new)[0]] == [job_id], "the node the job is staged on hears nothing"
    assert api.orders(old) == ([], []), "the node it left is asked to stage it"
    assert api.job(job_id).stage_nodes == (new,)
