"""Data staging through the API and the server's side of the agent protocol, as users and hostile tenants try
it: submissions are checked naming the field (shared paths only under the tenant's own, S3 only through the
tenant's own s3 secret and an endpoint the server allows); a job with input is not bound where the scheduler
would place it but staged there first with its GPUs free, says how far staging is, then runs on that node only;
its output is asked of the node it ran on once it ends, success or failure, and the outcome is on the job. A node
never hears of, nor reports on, another node's staging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from staging_api import ENDPOINT, open_staging_api
from staging_api import StagingApi as Api

from corral.api.staging import StageReport
from corral.core.states import JobState
from corral.server.services.agents import apply_reports, compute_assignments
from corral.server.services.staging import record_stage_reports

KEY = "s3-secret-key-VALUE-161803"


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with open_staging_api(database_url, tmp_path, ("vision", "nlp"), KEY) as a:
        yield a


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        ({"stage_in": ["data"]}, "stage_in", "SRC:DST"),
        ({"stage_in": ["relative/path:data"]}, "stage_in", "absolute path"),
        ({"stage_in": ["s3://bucket/k:/etc"]}, "stage_in", "relative to the job's stage dir"),
        ({"stage_in": ["s3://bucket/k:../up"]}, "stage_in", "no .."),
        ({"stage_in": ["s3://Bad_Bucket/k:d"]}, "stage_in", "bucket name"),
        ({"stage_out": ["/abs:s3://bucket/out/"]}, "stage_out", "relative"),
        ({"stage_in": ["s3://bucket/k:d"]}, "stage_secret", "secret of kind s3"),
        ({"stage_in": ["s3://bucket/k:d"], "stage_secret": "nope"}, "stage_secret", "no secret 'nope'"),
        ({"stage_in": ["/etc/passwd:p"]}, "stage_in", "not under the shared storage"),
        ({"stage_out": ["out:/DATASETS/x"]}, "stage_out", "not under the writable shared storage"),
        ({"stage_in": ["s3://bucket/k:d"] * 17, "stage_secret": "s3"}, "stage_in", "at most 16"),
    ],
)
def test_bad_staging_is_refused_naming_the_field(api: Api, body: dict[str, Any], field: str, problem: str) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    for item in ("stage_out",):
        body = {k: ([v.replace("/DATASETS", str(api.shared.parent / "datasets")) for v in v] if k == item else v)
                for k, v in body.items()}  # fmt: skip
    r = api.submit(alice, **body)
    assert r.status_code in (400, 422), r.text  # the schema's refusals are 422, the server's checks 400
    detail = r.text
    assert field in detail and problem in detail, detail
    assert KEY not in detail


def test_a_tenant_stages_only_its_own_shared_dir_and_only_its_own_s3_login(api: Api) -> None:
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    assert api.s3_secret(bob, "bobs3").status_code == 201
    ok = api.submit(alice, stage_in=[f"{api.shared}/vision/ds/:ds"], stage_out=[f"out/:{api.shared}/vision/out/"])
    assert ok.status_code == 201, ok.text
    other = api.submit(alice, stage_in=[f"{api.shared}/nlp/ds/:ds"])  # another tenant's dir
    assert other.status_code == 400 and "not under" in other.text, other.text
    sneaky = api.submit(alice, stage_in=[f"{api.shared}/vision/../nlp/ds/:ds"])
    assert sneaky.status_code == 422 and "must not contain .." in sneaky.text, sneaky.text
    theirs = api.submit(alice, stage_in=["s3://bucket/k:d"], stage_secret="bobs3")  # bob's login is not hers
    assert theirs.status_code == 400 and "no secret 'bobs3'" in theirs.text, theirs.text
    generic = api.call("POST", "/secrets", auth=alice, json={"name": "plain", "value": "v"})
    assert generic.status_code == 201
    wrong_kind = api.submit(alice, stage_in=["s3://bucket/k:d"], stage_secret="plain")
    assert wrong_kind.status_code == 400 and "not an s3 login" in wrong_kind.text, wrong_kind.text
    assert (
        api.s3_secret(alice, "elsewhere", endpoint="http://169.254.169.254").status_code == 201
    )  # the secret may name it: jobs may not
    ssrf = api.submit(alice, stage_in=["s3://bucket/k:d"], stage_secret="elsewhere")
    assert ssrf.status_code == 400 and "not allowed here" in ssrf.text, ssrf.text
    assert api.s3_secret(alice).status_code == 201
    env = api.submit(alice, secret_env={"KEY": "s3"})  # an s3 login never becomes a job's variable
    assert env.status_code == 400 and "--stage-secret" in env.text, env.text


def test_input_is_staged_on_the_chosen_node_before_its_gpus_are_taken_then_it_runs_there(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    r = api.submit(alice, gpus=2, stage_in=["s3://inputs/data/:data"], stage_out=["out/:s3://outputs/run/"],
                stage_secret="s3")  # fmt: skip
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert r.json()["stage_in"] == ["s3://inputs/data/:data"] and r.json()["stage_out_state"] == "pending"

    api.run_pass()
    job = api.store.get_job(job_id)
    assert job is not None and job.state is JobState.PENDING and job.stage_state == "staging", job
    node = job.stage_node
    assert node in ("n1", "n2")
    other = "n2" if node == "n1" else "n1"
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["pending_code"] == "staging" and shown["stage_node"] == node, shown
    assert api.call("GET", f"/nodes/{node}").json()["gpus_free"] == 2  # its GPUs are not taken meanwhile

    ins, outs = api.orders(node)
    assert [o.job_id for o in ins] == [job_id] and outs == []
    [order] = ins
    assert order.s3 is not None and order.s3.secret_access_key == KEY and order.s3.endpoint == ENDPOINT
    assert [(i.source, i.target) for i in order.items] == [("s3://inputs/data/", "data")]
    assert api.orders(other) == ([], [])  # another node never hears of it

    # Another node's report about it changes nothing; its own node's progress is the job's reason.
    half = StageReport(state="running", done_bytes=3 << 29, total_bytes=12 << 30)
    assert not record_stage_reports(api.store, other, {str(job_id): StageReport(state="done")}, {})
    assert api.store.get_job(job_id).stage_state == "staging"  # type: ignore[union-attr]
    record_stage_reports(api.store, node, {str(job_id): half}, {})
    api.run_pass()
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["state"] == "PENDING" and shown["pending_reason"] == "staging input: 1.5 of 12 GiB", shown

    # Done: placed on that node only, next pass, even with the other node as free.
    assert record_stage_reports(api.store, node, {str(job_id): StageReport(state="done", files=3, total_bytes=99)}, {})
    api.run_pass()
    job = api.store.get_job(job_id)
    assert job is not None and job.state is JobState.RUNNING and job.node == node, job
    assert job.stage_state == ""  # used by this attempt
    events = [e.kind for e in api.store.list_events(job_id)]
    assert events.index("staging") < events.index("staged") < events.index("assigned"), events
    record = api.store.get_node(node)
    assert record is not None
    [a], _ = compute_assignments(api.store, record, set(), keyring=api.ctx.keyring)
    assert a.staged_in and a.stage_dir

    # It fails; its output is asked of the node it ran on (not the other), and the outcome is on the job.
    from corral.api.schemas import AgentSync, ExitReport

    apply_reports(api.store, node, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=3)]))
    assert api.store.get_job(job_id).state is JobState.FAILED  # type: ignore[union-attr]
    ins, outs = api.orders(node)
    assert ins == [] and [o.job_id for o in outs] == [job_id] and outs[0].items[0].target == "s3://outputs/run/"
    assert api.orders(other) == ([], [])
    done = StageReport(state="done", files=2, done_bytes=10, total_bytes=10, message="uploaded 2 files")
    assert not record_stage_reports(api.store, other, {}, {str(job_id): done})
    assert api.store.get_job(job_id).stage_out_state == "pending"  # type: ignore[union-attr]
    record_stage_reports(api.store, node, {}, {str(job_id): done})
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["stage_out_state"] == "done" and shown["stage_out_message"] == "uploaded 2 files", shown
    assert api.orders(node) == ([], [])  # shipped: not asked again


def test_a_gangs_input_is_staged_on_each_of_its_nodes_and_it_runs_there_once_all_have_it(api: Api) -> None:
    """A 2-node job: its input goes to both nodes the scheduler chose (each hears of it, its GPUs stay free); one
    node done is not enough (the reason says how many have it); once both are, it runs on those two; its output is
    asked of its first node only. A node of the gang that stops taking work restages the whole job."""
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    body = {"gpus": 2, "nodes": 2, "stage_in": ["s3://inputs/shard/:data"], "stage_out": ["out/:s3://outputs/g/"]}
    r = api.submit(alice, stage_secret="s3", **body)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    api.run_pass()
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and sorted(job.stage_nodes) == ["n1", "n2"]
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["pending_code"] == "staging" and sorted(shown["stage_nodes"]) == ["n1", "n2"], shown
    assert shown["pending_reason"] == f"staging input on nodes {', '.join(job.stage_nodes)}", shown
    for node in ("n1", "n2"):
        assert [o.job_id for o in api.orders(node)[0]] == [job_id]
        assert api.call("GET", f"/nodes/{node}").json()["gpus_free"] == 2

    first, second = job.stage_nodes
    assert record_stage_reports(api.store, first, {str(job_id): StageReport(state="done", files=1)}, {}) is False
    assert not record_stage_reports(api.store, first, {str(job_id): StageReport(state="done")}, {})  # said already
    assert api.orders(first) == ([], []) and [o.job_id for o in api.orders(second)[0]] == [job_id]
    api.run_pass()
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and job.stage_done == (first,), job
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["pending_reason"] == "staging input: on 1 of 2 nodes", shown
    assert record_stage_reports(api.store, second, {str(job_id): StageReport(state="done", files=1)}, {})
    api.run_pass()
    job = api.job(job_id)
    assert job.state is JobState.RUNNING and sorted(n for n, _ in job.placed_parts) == ["n1", "n2"], job
    events = [e.kind for e in api.store.list_events(job_id)]
    assert events.count("staged") == 2 and events.index("staging") < events.index("assigned"), events

    from corral.api.schemas import AgentSync, ExitReport

    assert job.stage_state == "" and job.stage_nodes == ()  # used by this attempt
    rank0, other = job.placed_parts[0][0], job.placed_parts[1][0]
    assert api.orders(rank0) == ([], [])  # running: nothing to ship yet
    # its first part ends: its output is asked of that node now (it would drop an ended part's stage dir), while the
    # other part still runs; the other node is never asked
    apply_reports(api.store, rank0, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, rank=0, exit_code=0)]))
    assert api.job(job_id).state is JobState.RUNNING
    assert [o.job_id for o in api.orders(rank0)[1]] == [job_id] and api.orders(other) == ([], [])
    apply_reports(api.store, other, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, rank=1, exit_code=0)]))
    assert api.job(job_id).state.terminal
    assert [o.job_id for o in api.orders(rank0)[1]] == [job_id] and api.orders(other) == ([], [])

    again = api.submit(alice, stage_secret="s3", **body).json()["id"]
    api.run_pass()
    assert sorted(api.job(again).stage_nodes) == ["n1", "n2"]
    assert api.call("POST", "/nodes/n2/cordon").status_code == 200
    api.run_pass()  # one of its nodes takes no work: it is staged again (nowhere now: one node cannot hold it)
    job = api.job(again)
    assert job.stage_state != "staged" and "n2" not in job.stage_nodes, job
    assert "unstaged" in [e.kind for e in api.store.list_events(again)]


def test_staging_that_fails_fails_the_job_and_a_lost_node_restages_elsewhere(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    first = api.submit(alice, gpus=1, stage_in=["s3://inputs/x:x"], stage_secret="s3").json()["id"]
    api.run_pass()
    node = api.store.get_job(first).stage_node  # type: ignore[union-attr]
    assert node
    record_stage_reports(
        api.store, node, {str(first): StageReport(state="failed", message="no object s3://inputs/x")}, {}
    )
    job = api.store.get_job(first)
    assert job is not None and job.state is JobState.FAILED and "no object s3://inputs/x" in job.reason, job

    second = api.submit(alice, gpus=1, stage_in=["s3://inputs/y:y"], stage_secret="s3").json()["id"]
    api.run_pass()
    node = api.store.get_job(second).stage_node  # type: ignore[union-attr]
    assert node
    r = api.call("POST", f"/nodes/{node}/cordon")
    assert r.status_code == 200, r.text
    api.run_pass()  # its node takes no work now: its input is staged again on the other one
    job = api.store.get_job(second)
    assert job is not None and job.stage_state == "staging" and job.stage_node not in (None, node), job
    assert "unstaged" in [e.kind for e in api.store.list_events(second)]


def test_a_deleted_s3_secret_fails_the_staging_naming_it(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id = api.submit(alice, stage_in=["s3://inputs/x:x"], stage_secret="s3").json()["id"]
    api.run_pass()
    node = api.store.get_job(job_id).stage_node  # type: ignore[union-attr]
    assert api.call("DELETE", "/secrets/s3", auth=alice).status_code == 204
    assert api.orders(node) == ([], [])
    job = api.store.get_job(job_id)
    assert job is not None and job.state is JobState.FAILED and "s3 secret 's3'" in job.reason, job
    assert KEY not in job.reason
