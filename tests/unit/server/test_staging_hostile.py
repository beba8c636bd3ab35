"""Data staging under attack, at the API and the server's side of the agent protocol: a hostile member of one
tenant reaching another tenant's shared files or S3 login (path tricks, a sibling dir whose name starts with its
own, an s3 endpoint spelt to slip past the allowlist, a region made into a host), a node reporting on or hearing of
another node's staging, secret values leaking into what users or logs see, and races (cancel, cordon, a late report
from a node the job left). Each test passes when the system defends itself; a known hole is marked xfail (strict)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from staging_api import StagingApi as Api
from staging_api import open_staging_api

from corral.api.staging import StageReport
from corral.core.states import JobState
from corral.server.services.staging import compute_stage_orders, record_stage_reports

KEY = "s3-hostile-secret-KEY-271828"


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with open_staging_api(database_url, tmp_path, ("vision", "vision2", "nlp"), KEY) as a:
        yield a


def _staging_on(api: Api, auth: dict[str, str], **body: Any) -> tuple[int, str]:
    """A job of `auth` whose input is being staged: its id and the node it stages on."""
    r = api.submit(auth, gpus=1, **body)
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    api.run_pass()
    job = api.job(job_id)
    assert job.stage_state == "staging" and job.stage_node, job
    return job_id, job.stage_node


# ---- (1) another tenant's shared files: path tricks ------------------------------------------------------------
def test_hostile_shared_path_tricks_never_reach_another_tenants_dir(api: Api) -> None:
    alice = api.user("alice", "vision")
    s = str(api.shared)
    tries = [
        f"{s}/vision2/data/:d",  # a sibling tenant whose name starts with hers
        f"{s}/vision2:d",
        f"{s}/visio/x:d",
        f"{s}/vision/../nlp/x:d",
        f"{s}/vision/./../nlp/x:d",
        f"{s}/vision//..//nlp/x:d",
        f"{s}/./nlp/x:d",
        f"{s}//nlp/x:d",
        f"/{s}/nlp/x:d",  # two leading slashes (POSIX keeps them apart from one)
        f"/{s}/vision/x:d",
        f"{s}:d",  # the parent of every tenant's dir
        f"{s}/:d",
        f"{s}/vision/..:d",
        f"{s}/vision/x\n/../../nlp:d",
        f"{s}/vision/x\x00:d",
        f"{s}/VISION/x:d",
        "/:d",
        "/etc/shadow:d",
    ]
    for item in tries:
        r = api.submit(alice, stage_in=[item])
        assert r.status_code in (400, 422), (item, r.text)
        assert "stage_in" in r.text, (item, r.text)
    assert api.store.list_jobs(states=[JobState.PENDING]) == []


def test_hostile_stage_out_never_writes_into_another_tenant_or_a_read_only_root(api: Api) -> None:
    alice = api.user("alice", "vision")
    s, datasets = str(api.shared), str(api.shared.parent / "datasets")
    tries = [
        f"out:{s}/vision2/out",
        f"out:{s}/vision2",
        f"out:{s}/nlp/",
        f"out:{s}/vision/../nlp/x",
        f"out:{s}",
        f"out:{datasets}/x",  # read-only for every tenant
        f"out:{datasets}",
        f"out:{datasets}/",
        f"out:/{datasets}/x",
        f"out:{s}/vision/../../datasets/x",
        "out:/tmp/x",
        "../../etc:s3://bucket/x",  # the job's side must stay in its stage dir
        "/etc/shadow:s3://bucket/x",
    ]
    for item in tries:
        r = api.submit(alice, stage_out=[item])
        assert r.status_code in (400, 422), (item, r.text)
        assert "stage_out" in r.text or "stage_secret" in r.text, (item, r.text)
    ok = api.submit(alice, stage_out=[f"out/:{s}/vision/out/"], stage_in=[f"{datasets}/imagenet/:in"])
    assert ok.status_code == 201, ok.text  # her own dir (writable) and the read-only tree (for input)


def test_hostile_unicode_lookalikes_stay_names_inside_her_own_dir(api: Api) -> None:
    """A 'division slash' or 'one dot leader' is a plain character in a file name, not a separator or `..`: what is
    accepted lies lexically under her dir, and what is handed to the node is exactly that."""
    alice = api.user("alice", "vision")
    s = str(api.shared)
    sneaky = f"{s}/vision/\u2025\u2215nlp\u2215x:d"
    job_id, node = _staging_on(api, alice, stage_in=[sneaky])
    [order], _ = api.orders(node)
    assert order.items[0].source.startswith(f"{s}/vision/") and "/nlp/" not in order.items[0].source
    assert [r.path for r in order.roots] == [f"{s}/vision", str(api.shared.parent / "datasets")]
    assert [r.writable for r in order.roots] == [True, False]
    assert api.job(job_id).state is JobState.PENDING


def test_hostile_order_roots_are_the_jobs_own_tenant_never_the_submitters_guess(api: Api) -> None:
    """The roots an order carries (what the node checks with links resolved) are computed from the job's tenant."""
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    a_id, a_node = _staging_on(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    b_id, b_node = _staging_on(api, bob, stage_in=[f"{api.shared}/nlp/ds/:ds"])
    orders = {o.job_id: o for n in {a_node, b_node} for o in api.orders(n)[0]}
    assert [r.path for r in orders[a_id].roots][0] == f"{api.shared}/vision"
    assert [r.path for r in orders[b_id].roots][0] == f"{api.shared}/nlp"
    assert all(f"{api.shared}/nlp" != r.path for r in orders[a_id].roots)


def test_hostile_settings_narrowed_after_submit_fail_the_staging_instead_of_handing_it_out(api: Api) -> None:
    alice = api.user("alice", "vision")
    job_id, node = _staging_on(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    settings = api.ctx.settings
    narrowed = settings.staging_rules.__class__(shared_paths=f"{api.shared}/other", s3_endpoints=())
    ins, _ = compute_stage_orders(api.store, node, api.ctx.keyring, narrowed, settings.job_uid_range)
    assert ins == []
    job = api.job(job_id)
    assert job.state is JobState.FAILED and "cannot stage input" in job.reason, job


# ---- (4) SSRF through the s3 endpoint ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    [
        "http://169.254.169.254",
        "http://169.254.169.254/",
        "HTTP://127.0.0.1:9",
        "https://127.0.0.1:9",
        "http://127.0.0.1:90",
        "http://127.0.0.1",
        "127.0.0.1:9",
        "http://127.0.0.1:9@169.254.169.254",
        "http://user:pw@127.0.0.1:9",
        "http://127.0.0.1:9.evil.example",
        "http://127.0.0.1.evil.example:9",
        "http://127.0.0.1:9/../x",
        "http://127.0.0.1:9/latest/meta-data",
        "http://127.0.0.1:9?x=1",
        "http://127.0.0.1:9#frag",
        "http://127.0.0.1:9 ",
        " http://127.0.0.1:9",
        "http://127.0.0.1:9\n",
        "http://0x7f.0.0.1:9",
        "http://[::1]:9",
    ],
)
def test_hostile_s3_endpoint_spellings_never_pass_the_allowlist(api: Api, host: str) -> None:
    alice = api.user("alice", "vision")
    made = api.s3_secret(alice, "evil", endpoint=host)
    if made.status_code == 201:  # the secret may name it: a job may never use it
        r = api.submit(alice, stage_in=["s3://bucket/k:d"], stage_secret="evil")
        assert r.status_code == 400 and "not allowed here" in r.text, (host, r.text)
    else:
        assert made.status_code == 422, (host, made.text)
    assert KEY not in made.text


@pytest.mark.parametrize("region", ["us-east-1.evil.example", "x/../y", "US-EAST-1", "a b", "us-east-1#", "a" * 33])
def test_hostile_s3_region_is_never_a_host_or_path(api: Api, region: str) -> None:
    """Without an endpoint, boto3 builds AWS's URL from the region: a region must not be able to name a host."""
    alice = api.user("alice", "vision")
    r = api.s3_secret(alice, "aws", endpoint=None, region=region)
    assert r.status_code == 422, (region, r.text)


def test_hostile_endpoint_switched_after_submit_is_refused_at_hand_out(api: Api) -> None:
    """The check at submit is not enough: the secret's host may be changed later (PUT /secrets/NAME)."""
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(api, alice, stage_in=["s3://bucket/k:d"], stage_secret="s3")
    r = api.call("PUT", "/secrets/s3", auth=alice, json={"value": KEY, "host": "http://169.254.169.254"})
    assert r.status_code == 200, r.text
    assert api.orders(node) == ([], [])
    job = api.job(job_id)
    assert job.state is JobState.FAILED and "not allowed here" in job.reason, job
    assert KEY not in job.reason


def test_hostile_endpoint_switched_while_output_waits_is_refused_too(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(
        api, alice, stage_in=["s3://bucket/k:d"], stage_out=["out/:s3://bucket/out/"], stage_secret="s3"
    )
    record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
    api.run_pass()
    assert api.job(job_id).state is JobState.RUNNING
    from corral.api.schemas import AgentSync, ExitReport
    from corral.server.services.agents import apply_reports

    apply_reports(api.store, node, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=0)]))
    r = api.call("PUT", "/secrets/s3", auth=alice, json={"value": KEY, "host": "http://169.254.169.254"})
    assert r.status_code == 200, r.text
    assert api.orders(node) == ([], [])
    shown = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
    assert shown["stage_out_state"] == "failed" and "not allowed here" in shown["stage_out_message"], shown
    assert KEY not in str(shown)


# ---- (5) secret values never leak ---------------------------------------------------------------------------------
def test_hostile_secret_value_never_in_job_events_reasons_or_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(
        api, alice, stage_in=["s3://bucket/k:d"], stage_out=["out/:s3://bucket/o/"], stage_secret="s3"
    )
    [order], _ = api.orders(node)
    assert order.s3 is not None and order.s3.secret_access_key == KEY  # the node that stages gets it ...
    assert KEY not in repr(order) and KEY not in str(order)  # ... but no repr (a log line) shows it
    record_stage_reports(api.store, node, {str(job_id): StageReport(state="running", total_bytes=10)}, {})
    api.run_pass()
    seen = [
        api.call("GET", f"/jobs/{job_id}", auth=alice).text,
        api.call("GET", "/jobs", auth=alice).text,
        api.call("GET", f"/jobs/{job_id}/events", auth=alice).text,
        api.call("GET", "/secrets", auth=alice).text,
        api.call("GET", "/secrets").text,
        caplog.text,
    ]
    for text in seen:
        assert KEY not in text
    # Another tenant does not even see the job, nor her secret's name.
    assert api.call("GET", f"/jobs/{job_id}", auth=bob).status_code in (403, 404)
    assert "AKIAHOSTILE" not in api.call("GET", "/secrets", auth=bob).text
    # Deleting the secret mid-way fails the staging naming the secret, not its value.
    assert api.call("DELETE", "/secrets/s3", auth=alice).status_code == 204
    assert api.orders(node) == ([], [])
    job = api.job(job_id)
    assert job.state is JobState.FAILED and "'s3'" in job.reason and KEY not in job.reason
    assert all(KEY not in e.message for e in api.store.list_events(job_id))
    assert KEY not in caplog.text


def test_hostile_other_tenants_s3_secret_cannot_be_named_even_by_a_same_named_one(api: Api) -> None:
    alice, bob = api.user("alice", "vision"), api.user("bob", "nlp")
    assert api.s3_secret(bob, "shared-name").status_code == 201
    r = api.submit(alice, stage_in=["s3://bucket/k:d"], stage_secret="shared-name")
    assert r.status_code == 400 and "no secret" in r.text, r.text
    assert api.s3_secret(alice, "shared-name").status_code == 201  # her own of that name
    job_id, node = _staging_on(api, alice, stage_in=["s3://bucket/k:d"], stage_secret="shared-name")
    [order], _ = api.orders(node)
    # The sealed value is bound to (tenant, name): hers opens, and it is hers.
    assert order.job_id == job_id and order.s3 is not None and order.s3.secret_access_key == KEY


# ---- (3) a node reporting on, or hearing of, another node's staging -------------------------------------------
def test_hostile_node_cannot_fail_finish_or_hear_of_another_nodes_staging(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(
        api, alice, stage_in=["s3://bucket/k:d"], stage_out=["out/:s3://bucket/o/"], stage_secret="s3"
    )
    other = "n2" if node == "n1" else "n1"
    assert api.orders(other) == ([], [])  # no order, so no S3 login, for the other node
    for key in (str(job_id), f"0{job_id}", f" {job_id}", f"{job_id}.0", f"+{job_id}"):
        for state in ("failed", "done", "running"):
            report = StageReport(state=state, message="pwned", total_bytes=1 << 40, done_bytes=1 << 40)  # type: ignore[arg-type]
            assert not record_stage_reports(api.store, other, {key: report}, {key: report})
    # The job's own node, with a key that only looks like the job's, changes nothing either.
    for key in (f"0{job_id}", f" {job_id}", f"{job_id}.0"):
        assert not record_stage_reports(api.store, node, {key: StageReport(state="failed", message="x")}, {})
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_state == "staging" and job.stage_node == node, job
    assert "pwned" not in job.reason and "pwned" not in job.stage_progress
    assert all("pwned" not in e.message for e in api.store.list_events(job_id))


def test_hostile_node_cannot_ship_or_fail_another_nodes_output(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(
        api, alice, stage_in=["s3://bucket/k:d"], stage_out=["out/:s3://bucket/o/"], stage_secret="s3"
    )
    other = "n2" if node == "n1" else "n1"
    record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
    api.run_pass()
    from corral.api.schemas import AgentSync, ExitReport
    from corral.server.services.agents import apply_reports

    # The other node cannot report the job's exit either (it is not placed there).
    apply_reports(api.store, other, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=0)]))
    assert api.job(job_id).state is JobState.RUNNING
    apply_reports(api.store, node, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=0)]))
    assert api.orders(other) == ([], [])
    forged = StageReport(state="done", message="uploaded 0 files (forged)")
    record_stage_reports(api.store, other, {}, {str(job_id): forged})
    record_stage_reports(api.store, other, {}, {str(job_id): StageReport(state="failed", message="forged")})
    job = api.job(job_id)
    assert job.stage_out_state == "pending" and "forged" not in job.stage_out_message, job
    assert [o.job_id for o in api.orders(node)[1]] == [job_id]


def test_hostile_node_report_on_a_pending_job_not_staged_anywhere_is_ignored(api: Api) -> None:
    """A node cannot mark a job staged on itself that the scheduler never chose to stage (to pin it there)."""
    alice = api.user("alice", "vision")
    api.ctx.scheduler.leading = lambda: False  # the loop a submit wakes stages nothing meanwhile
    r = api.submit(alice, gpus=1, stage_in=[f"{api.shared}/vision/ds/:ds"])  # staged nowhere
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    for node in ("n1", "n2"):
        assert not record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
        assert not record_stage_reports(api.store, node, {str(job_id): StageReport(state="failed")}, {})
    job = api.job(job_id)
    assert job.state is not JobState.FAILED and job.stage_state == "", job


# ---- (7) races -----------------------------------------------------------------------------------------------------
def test_hostile_cancel_while_staging_withdraws_the_order_and_a_late_done_changes_nothing(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(api, alice, stage_in=["s3://bucket/k:d"], stage_secret="s3")
    r = api.call("POST", f"/jobs/{job_id}/cancel", auth=alice)
    assert r.status_code == 200, r.text
    assert api.orders(node) == ([], [])  # the node withdraws it (and forgets the login)
    assert not record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
    api.run_pass()
    job = api.job(job_id)
    assert job.state is JobState.CANCELLED and job.node is None, job
    assert (
        api.call("GET", "/nodes/n1").json()["gpus_free"] == 2 and api.call("GET", "/nodes/n2").json()["gpus_free"] == 2
    )


def test_hostile_late_report_from_the_node_a_job_left_is_ignored(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, first = _staging_on(api, alice, stage_in=["s3://bucket/k:d"], stage_secret="s3")
    assert api.call("POST", f"/nodes/{first}/cordon").status_code == 200
    api.run_pass()
    job = api.job(job_id)
    assert job.stage_state == "staging" and job.stage_node not in (None, first), job
    second = job.stage_node
    # The node it left says "done" (or "failed"): neither pins it back there nor fails it.
    assert not record_stage_reports(api.store, first, {str(job_id): StageReport(state="done")}, {})
    assert not record_stage_reports(api.store, first, {str(job_id): StageReport(state="failed", message="x")}, {})
    assert api.orders(first) == ([], [])
    job = api.job(job_id)
    assert job.state is JobState.PENDING and job.stage_node == second and job.stage_state == "staging", job


def test_hostile_cordon_after_staged_restages_elsewhere_never_runs_on_the_cordoned_node(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(api, alice, stage_in=["s3://bucket/k:d"], stage_secret="s3")
    record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
    assert api.job(job_id).stage_state == "staged"
    assert api.call("POST", f"/nodes/{node}/cordon").status_code == 200
    api.run_pass()
    job = api.job(job_id)
    assert job.node != node and job.stage_node != node, job
    assert job.state is JobState.PENDING and job.stage_state == "staging", job


def test_hostile_secret_deleted_after_staged_still_fails_the_output_without_the_value(api: Api) -> None:
    alice = api.user("alice", "vision")
    assert api.s3_secret(alice).status_code == 201
    job_id, node = _staging_on(
        api, alice, stage_in=["s3://bucket/k:d"], stage_out=["out/:s3://bucket/o/"], stage_secret="s3"
    )
    record_stage_reports(api.store, node, {str(job_id): StageReport(state="done")}, {})
    assert api.call("DELETE", "/secrets/s3", auth=alice).status_code == 204
    api.run_pass()
    assert api.job(job_id).state is JobState.RUNNING  # its input is in: the run needs no login
    from corral.api.schemas import AgentSync, ExitReport
    from corral.server.services.agents import apply_reports

    apply_reports(api.store, node, AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=0)]))
    # A secret of that name made again by the same tenant would do; another tenant's never could.
    assert api.orders(node) == ([], [])
    job = api.job(job_id)
    assert job.stage_out_state == "failed" and "'s3'" in job.stage_out_message and KEY not in job.stage_out_message


# ---- (6) denial of service -----------------------------------------------------------------------------------------
def test_hostile_item_count_and_length_are_bounded(api: Api) -> None:
    alice = api.user("alice", "vision")
    s = str(api.shared)
    many = [f"{s}/vision/d{i}:d{i}" for i in range(10_000)]
    r = api.submit(alice, stage_in=many)
    assert r.status_code == 422, r.text[:200]
    r = api.submit(alice, stage_out=[f"o{i}:{s}/vision/o{i}" for i in range(17)])
    assert r.status_code == 422, r.text[:200]
    r = api.submit(alice, stage_in=[f"{s}/vision/{'a' * 5000}:d"])
    assert r.status_code == 422, r.text[:200]
    r = api.submit(alice, stage_in=[f"{s}/vision/x:{'d/' * 600}"])
    assert r.status_code == 422, r.text[:200]


def test_hostile_absurd_progress_reports_are_refused_or_harmless(api: Api) -> None:
    from pydantic import ValidationError as PydanticError

    for bad in ({"state": "running", "done_bytes": -1}, {"state": "running", "total_bytes": 1 << 61},
                {"state": "sideways"}, {"state": "failed", "message": "x" * 1001}):  # fmt: skip
        with pytest.raises(PydanticError):
            StageReport.model_validate(bad)
    alice = api.user("alice", "vision")
    job_id, node = _staging_on(api, alice, stage_in=[f"{api.shared}/vision/ds/:ds"])
    record_stage_reports(
        api.store, node, {str(job_id): StageReport(state="running", done_bytes=1 << 60, total_bytes=1)}, {}
    )
    job = api.job(job_id)
    assert job.state is JobState.PENDING and len(job.stage_progress) <= 255, job


def test_hostile_a_tenant_cannot_stage_more_jobs_at_once_than_the_cluster_could_run(api: Api) -> None:
    """Jobs being staged hold no GPUs, so every pass the plan places more of a tenant's jobs on the same free GPUs:
    without a bound, one tenant's 10 jobs all stage at once (10 downloads into every node's cache, 10 secret opens
    per sync), where the cluster (4 GPUs) could run 2 of them."""
    alice = api.user("alice", "vision")
    ids = []
    for i in range(10):
        r = api.submit(alice, gpus=2, stage_in=[f"{api.shared}/vision/ds{i}/:ds"])
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["id"]))
    for _ in range(3):
        api.run_pass()
    staging = [j for j in ids if api.job(j).stage_state == "staging"]
    assert len(staging) <= 4, f"{len(staging)} of 10 jobs staging at once on a cluster of 4 GPUs"
