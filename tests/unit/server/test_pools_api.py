"""/api/v1/pools (issue 19) through the app (SQLite and PostgreSQL): admins declare, show, change and delete cloud
pools and every refusal names its field; everyone else sees the pools without their provider settings and events;
jobs name a pool, allow spot and are checked against the pools' instance types at submission; a pool node's join
token joins only that node, and an agent never picks its own pool.

Every pool here is `local` and paused (or the jobs that fit it are cancelled at once): no node is ever started."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from node_certs import NodeAgents
from pool_api import TenantApi, open_api

from corral.agent.identity import new_key_and_csr
from corral.api.schemas import AgentRegister
from corral.core.errors import AuthError, ConflictError
from corral.core.pools import LAUNCHING, RELEASED, RUNNING, PoolNode
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.app import create_agent_app
from corral.server.services.agents import register_node
from corral.server.services.identity import create_pool_join_token, join_node
from corral.store.sql import SqlStore


class Api(TenantApi):
    def create_pool(self, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.call("POST", "/pools", auth=auth, json=pool_body(**kw))


SLURM = {"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/corral-slurm"}
SLURM_POOL = {"kind": "slurm", "provider": "", "instance_types": [], "labels": {}, "settings": SLURM}


def pool_body(**kw: Any) -> dict[str, Any]:
    return {
        "name": "burst",
        "provider": "local",
        "instance_types": [
            {"name": "g8", "gpus": 8, "gpu_model": "A100-80GB", "price_per_hour": 20.0},
            {"name": "g1s", "gpus": 1, "gpu_model": "L4", "price_per_hour": 0.3, "spot": True},
        ],
        "max_nodes": 2,
        "idle_s": 120,
        "labels": {"zone": "lab"},
        "taints": [],
        "paused": True,  # never start a node here
        **kw,
    }


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    # The autoscaler's passes do nothing here: the pool nodes these tests write by hand stay as written (it would
    # release them, their instances being unknown to the local provider) and no node is ever started.
    with open_api(Api, database_url, tmp_path) as a:
        yield a
        assert not any((tmp_path / "pools").glob("*/*"))  # no local agent was ever started


@pytest.fixture
def alice(api: Api) -> dict[str, str]:
    return api.user("alice", "member", "vision")


# ---- admins: declare, show, change, delete ------------------------------------------------------------------------
def test_admin_creates_lists_shows_updates_and_deletes_a_pool(api: Api) -> None:
    r = api.create_pool(settings={})
    assert r.status_code == 201, r.text
    p = r.json()
    assert (p["name"], p["kind"], p["provider"], p["max_nodes"], p["min_nodes"]) == ("burst", "cloud", "local", 2, 0)
    assert p["paused"] and p["version"] == 1 and p["settings"] == {} and p["labels"] == {"zone": "lab"}
    types = {t["name"]: t for t in p["instance_types"]}
    assert types["g8"]["gpu_memory_mib"] == 80 * 1024 and types["g8"]["gpus"] == 8
    assert types["g1s"]["gpu_model"] == "L4-24GB" and types["g1s"]["spot"]  # a known model's usual memory
    assert p["nodes"] == [] and p["node_count"] == 0 and p["spend_total"] == 0.0

    listed = api.call("GET", "/pools").json()
    assert [(x["name"], x["kind"]) for x in listed] == [("static", "static"), ("burst", "cloud")]
    assert listed[0]["node_count"] == 1 and listed[0]["gpus"] == 2  # n1 is in the static pool

    shown = api.call("GET", "/pools/burst").json()
    assert shown["name"] == "burst" and isinstance(shown["events"], list)
    assert api.call("GET", "/pools/static").json()["kind"] == "static"
    assert api.call("GET", "/pools/nope").status_code == 404

    r = api.call("PATCH", "/pools/burst", json={"max_nodes": 4, "taints": ["experimental"], "idle_s": 60})
    assert r.status_code == 200, r.text
    u = r.json()
    assert (u["max_nodes"], u["taints"], u["idle_s"], u["version"]) == (4, ["experimental"], 60.0, 2)
    assert u["labels"] == {"zone": "lab"} and len(u["instance_types"]) == 2  # the rest stays
    assert api.store.get_pool("burst").spec.max_nodes == 4  # type: ignore[union-attr]
    assert api.call("PATCH", "/pools/nope", json={"max_nodes": 1}).status_code == 404

    assert api.call("DELETE", "/pools/burst").status_code == 204
    assert [x["name"] for x in api.call("GET", "/pools").json()] == ["static"]
    assert api.call("GET", "/pools/burst").status_code == 404
    assert api.call("DELETE", "/pools/burst").status_code == 404
    kinds = [e["action"] for e in api.call("GET", "/audit").json() if e["action"].startswith("pool.")]
    assert sorted(kinds) == ["pool.create", "pool.delete", "pool.update"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        pytest.param({"provider": "gcp"}, 400, "provider", id="unknown-provider"),
        pytest.param({"min_nodes": 3, "max_nodes": 2}, 400, "min_nodes", id="min-above-max"),
        pytest.param({"name": "static"}, 400, "name", id="name-static"),
        pytest.param({"name": "Burst_1"}, 400, "name", id="bad-name"),
        pytest.param({"settings": {"ami": "ami-1"}}, 400, "settings", id="unknown-local-setting"),
        pytest.param({"policy": "no_such_module_anywhere"}, 400, "policy", id="policy-module-missing"),
        pytest.param({"policy": "not a module"}, 400, "policy", id="policy-not-a-name"),
        pytest.param({"labels": {"pool": "other"}}, 400, "labels", id="label-pool"),
        pytest.param({"taints": ["bad taint"]}, 400, "taints", id="bad-taint"),
        pytest.param({"instance_types": []}, 400, "instance_types", id="no-types"),
        pytest.param({"kind": "mesos"}, 400, "kind", id="unknown-kind"),
        pytest.param({"kind": "slurm", "provider": "", "settings": SLURM}, 400, "instance_types", id="slurm-types"),
        pytest.param({**SLURM_POOL, "settings": {"log_dir": "/srv/x"}}, 400, "settings.slurm_conf", id="slurm-conf"),
        pytest.param({**SLURM_POOL, "settings": {**SLURM, "log_dir": "rel"}}, 400, "settings.log_dir", id="slurm-log"),
        pytest.param({**SLURM_POOL, "settings": {**SLURM, "x": "1"}}, 400, "settings.x", id="slurm-unknown"),
        pytest.param({**SLURM_POOL, "settings": {**SLURM, "rest_url": "http://h"}}, 400, "rest_url", id="slurm-rest"),
        pytest.param({**SLURM_POOL, "settings": {**SLURM, "submit_as": "root"}}, 400, "submit_as", id="slurm-as"),
        pytest.param({**SLURM_POOL, "provider": "aws"}, 400, "provider", id="slurm-provider"),
        pytest.param({**SLURM_POOL, "labels": {"a": "b"}}, 400, "labels", id="slurm-labels"),
        pytest.param(
            {"instance_types": [{"name": "g 4", "gpus": 4, "gpu_model": "A100-80GB"}]},
            400,
            "instance_types.name",
            id="bad-type-name",
        ),
        pytest.param(
            {"instance_types": [{"name": "g4", "gpus": 4, "gpu_model": "not a model"}]},
            400,
            "instance_types",
            id="bad-type-model",
        ),
        pytest.param(
            {"instance_types": [{"name": "g4", "gpus": 4, "gpu_model": "not a model", "gpu_memory_mib": 1024}]},
            400,
            "instance_types.gpu_model",
            id="bad-type-model-with-memory",
        ),
        pytest.param(
            {"instance_types": [{"name": "g4", "gpus": 4, "gpu_model": "A100"}] * 2},
            400,
            "instance_types.name",
            id="type-named-twice",
        ),
        pytest.param(
            {"instance_types": [{"name": "g4", "gpus": 65, "gpu_model": "A100"}]}, 422, "gpus", id="too-many-gpus"
        ),
        pytest.param({"max_nodes": 1001}, 422, "max_nodes", id="max-too-large"),
        pytest.param({"join_timeout_s": 1}, 422, "join_timeout_s", id="join-timeout-too-short"),
        pytest.param({"bogus": 1}, 422, "bogus", id="extra-field"),
    ],
)
def test_bad_pools_name_the_field_and_store_nothing(api: Api, body: dict[str, Any], status: int, field: str) -> None:
    r = api.create_pool(**body)
    assert r.status_code == status, r.text
    assert field in (r.json()["error"]["field"] or ""), r.text
    assert api.store.list_pools() == []


def test_a_policy_module_missing_inside_an_existing_package_is_refused(api: Api) -> None:
    r = api.create_pool(policy="corral.no_such_policy")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "policy"


def test_an_existing_policy_module_is_accepted(api: Api) -> None:
    r = api.create_pool(policy="corral.autoscaler.policy")
    assert r.status_code == 201, r.text
    assert r.json()["policy"] == "corral.autoscaler.policy"


def test_a_taken_name_is_a_409_naming_name(api: Api) -> None:
    assert api.create_pool().status_code == 201
    r = api.create_pool(max_nodes=5)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["field"] == "name"
    assert api.store.get_pool("burst").spec.max_nodes == 2  # type: ignore[union-attr]


def test_bad_updates_name_the_field_and_change_nothing(api: Api) -> None:
    assert api.create_pool().status_code == 201
    for body, status, field in [
        ({"min_nodes": 3}, 400, "min_nodes"),  # above max 2
        ({"settings": {"region": "x"}}, 400, "settings"),
        ({"policy": "no_such_module_anywhere"}, 400, "policy"),
        ({"provider": "aws"}, 422, "provider"),  # a pool's provider never changes
        ({"name": "other"}, 422, "name"),
        ({"instance_types": []}, 422, "instance_types"),
    ]:
        r = api.call("PATCH", "/pools/burst", json=body)
        assert r.status_code == status, (body, r.text)
        assert field in (r.json()["error"]["field"] or ""), (body, r.text)
    p = api.store.get_pool("burst")
    assert p is not None and p.version == 1 and p.spec.min_nodes == 0


# ---- everyone else ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["member", "viewer", "tenant-admin"])
def test_non_admins_see_pools_without_settings_or_events_and_change_nothing(api: Api, role: str) -> None:
    assert api.create_pool().status_code == 201
    api.store.add_pool_events([("burst", "burst-g8-1", "launch", "g8 for job 7 of tenant nlp")], datetime.now(UTC))
    who = api.user("carol", role, "vision")
    assert api.call("GET", "/pools/burst").json()["events"][-1]["kind"] == "launch"  # admins see them

    listed = api.call("GET", "/pools", auth=who)
    assert listed.status_code == 200, listed.text
    assert [x["name"] for x in listed.json()] == ["static", "burst"]
    for p in listed.json():
        assert p["settings"] is None and p["events"] is None
    shown = api.call("GET", "/pools/burst", auth=who)
    assert shown.status_code == 200 and shown.json()["settings"] is None and shown.json()["events"] is None
    assert "job 7" not in shown.text and "nlp" not in shown.text
    assert [t["name"] for t in shown.json()["instance_types"]] == ["g8", "g1s"]  # types are everyone's to see
    assert api.call("GET", "/pools/nope", auth=who).status_code == 404

    assert api.call("POST", "/pools", auth=who, json=pool_body(name="mine")).status_code == 403
    assert api.call("PATCH", "/pools/burst", auth=who, json={"max_nodes": 9}).status_code == 403
    assert api.call("PATCH", "/pools/nope", auth=who, json={"max_nodes": 9}).status_code == 403
    assert api.call("DELETE", "/pools/burst", auth=who).status_code == 403
    assert api.call("POST", "/pools/burst/nodes/x/interrupt", auth=who, json={"seconds": 1}).status_code == 403
    p = api.store.get_pool("burst")
    assert p is not None and p.version == 1 and p.spec.max_nodes == 2
    assert [x.name for x in api.store.list_pools()] == ["burst"]


def test_a_slurm_pool_is_declared_by_its_settings_and_members_do_not_see_them(api: Api) -> None:
    r = api.create_pool(name="hpc", **{**SLURM_POOL, "settings": {**SLURM, "partitions": "gpu,a100"}})
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "slurm" and r.json()["provider"] == "slurm" and r.json()["instance_types"] == []
    who = api.user("dave", "member", "vision")
    shown = api.call("GET", "/pools/hpc", auth=who)
    assert shown.status_code == 200 and shown.json()["settings"] is None and "slurm.conf" not in shown.text
    assert api.call("POST", "/pools", auth=who, json=pool_body(name="mine", **SLURM_POOL)).status_code == 403


def test_a_job_pinned_to_a_slurm_pool_is_checked_against_what_it_runs_and_its_nodes(
    api: Api, alice: dict[str, str]
) -> None:
    assert api.create_pool(name="hpc", **SLURM_POOL).status_code == 201
    container = api.submit(alice, gpus=1, pool="hpc", image="reg.example/team/train:1")
    assert container.status_code == 400 and container.json()["error"]["field"] == "pool", container.text
    assert "slurm cluster" in container.json()["error"]["message"] and "not containers" in container.text
    first = api.submit(alice, gpus=2, pool="hpc")  # its nodes not read yet: accepted, it waits for them
    assert first.status_code == 201, first.text
    api.call("POST", f"/jobs/{first.json()['id']}/cancel", auth=alice)
    gpus = [GpuInfo(index=i, uuid=f"s-{i}", model="H100-80GB", memory_mib=81920) for i in range(4)]
    api.store.upsert_node("hpc.n1", "n1", "slurm", 16000, 64000, {"pool": "hpc", "source": "slurm"}, gpus,
                          datetime.now(UTC))  # fmt: skip
    too_big = api.submit(alice, gpus=8, pool="hpc")
    assert too_big.status_code == 400 and too_big.json()["error"]["field"] == "gpus", too_big.text
    assert api.store.list_jobs(states=[JobState.PENDING]) == []


def test_no_token_no_pools(api: Api) -> None:
    assert api.call("GET", "/pools", auth={}).status_code == 401
    assert api.call("POST", "/pools", auth={}, json=pool_body()).status_code == 401


def test_a_pool_shows_its_live_nodes_and_spend(api: Api) -> None:
    assert api.create_pool().status_code == 201
    now = datetime.now(UTC)
    launched = now - timedelta(hours=1)
    month = datetime(now.year, now.month, 1, tzinfo=UTC)
    api.store.add_pool_node(
        PoolNode("burst-g8-old", "burst", "g8", RELEASED, launched.timestamp(), price_per_hour=20.0, gpus=8), None, []
    )
    api.store.update_pool_node("burst-g8-old", {"ended_at": launched + timedelta(minutes=30)})
    api.store.add_pool_node(
        PoolNode("burst-g8-1", "burst", "g8", RUNNING, launched.timestamp(), price_per_hour=20.0, gpus=8), None, []
    )
    p = api.call("GET", "/pools/burst").json()
    assert [n["name"] for n in p["nodes"]] == ["burst-g8-1"] and p["node_count"] == 1 and p["gpus"] == 8
    assert p["nodes"][0]["state"] == RUNNING and p["nodes"][0]["node_state"] is None  # never registered
    # 30 min of the released node + an hour (and the test's seconds) of the running one, at 20/h
    assert p["spend_total"] == pytest.approx(30.0, abs=0.2)
    if launched >= month:
        assert p["spend_month"] == pytest.approx(p["spend_total"], abs=0.01)


# ---- jobs: pool, spot and the submission check --------------------------------------------------------------------
def test_a_job_naming_an_unknown_pool_is_refused_naming_pool(api: Api, alice: dict[str, str]) -> None:
    assert api.create_pool().status_code == 201
    r = api.submit(alice, gpus=1, pool="nope")
    assert r.status_code in (400, 422), r.text
    assert r.json()["error"]["field"] == "pool" and "burst" in r.json()["error"]["message"]
    bad = api.submit(alice, gpus=1, pool="Not_A_Pool")
    assert bad.status_code == 422 and "pool" in bad.json()["error"]["field"]
    assert api.store.list_jobs() == []
    ok = api.submit(alice, gpus=1, pool="static")
    assert ok.status_code == 201, ok.text
    assert ok.json()["pool"] == "static"
    api.call("POST", f"/jobs/{ok.json()['id']}/cancel", auth=alice)


def test_spot_shows_as_a_toleration(api: Api, alice: dict[str, str]) -> None:
    r = api.submit(alice, gpus=0, spot=True, tolerations=["experimental"])
    assert r.status_code == 201, r.text
    assert r.json()["tolerations"] == ["experimental", "spot"]
    shown = api.call("GET", f"/jobs/{r.json()['id']}", auth=alice).json()
    assert shown["tolerations"] == ["experimental", "spot"] and shown["pool"] is None
    plain = api.submit(alice, gpus=0).json()
    assert plain["tolerations"] == []
    bad = api.submit(alice, gpus=0, tolerations=["bad taint"])
    assert bad.status_code == 422 and "tolerations" in bad.json()["error"]["field"]


def test_a_request_that_fits_only_a_pool_type_is_accepted_and_one_that_fits_none_is_refused(
    api: Api, alice: dict[str, str]
) -> None:
    too_big = api.submit(alice, gpus=8)
    assert too_big.status_code == 400 and too_big.json()["error"]["field"] == "gpus"  # no pool yet
    assert api.create_pool().status_code == 201
    r = api.submit(alice, gpus=8)  # n1 has 2 GPUs; g8 has 8
    assert r.status_code == 201, r.text
    assert api.call("POST", f"/jobs/{r.json()['id']}/cancel", auth=alice).status_code in (200, 202)
    refused = api.submit(alice, gpus=16)
    assert refused.status_code == 400, refused.text
    err = refused.json()["error"]
    assert err["field"] == "gpus"
    assert "pool burst: g8 (8 x A100-80GB" in err["message"]  # the pool's largest type
    assert [j.state for j in api.store.list_jobs()] == [JobState.CANCELLED]


def test_a_spot_only_type_serves_only_spot_jobs(api: Api, alice: dict[str, str]) -> None:
    spot_only = [{"name": "g8s", "gpus": 8, "gpu_model": "A100-80GB", "price_per_hour": 6.0, "spot": True}]
    assert api.create_pool(instance_types=spot_only).status_code == 201
    r = api.submit(alice, gpus=8)
    assert r.status_code == 400 and r.json()["error"]["field"] == "gpus", r.text
    ok = api.submit(alice, gpus=8, spot=True)
    assert ok.status_code == 201, ok.text
    api.call("POST", f"/jobs/{ok.json()['id']}/cancel", auth=alice)


def test_a_tainted_pool_serves_only_jobs_that_tolerate_it(api: Api, alice: dict[str, str]) -> None:
    assert api.create_pool(taints=["experimental"]).status_code == 201
    assert api.submit(alice, gpus=8).status_code == 400
    ok = api.submit(alice, gpus=8, tolerations=["experimental"])
    assert ok.status_code == 201, ok.text
    api.call("POST", f"/jobs/{ok.json()['id']}/cancel", auth=alice)


def test_a_job_pinned_to_static_that_only_a_cloud_type_fits_is_refused(api: Api, alice: dict[str, str]) -> None:
    assert api.create_pool().status_code == 201
    r = api.submit(alice, gpus=8, pool="static")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "gpus"
    assert api.store.list_jobs() == []


def test_a_job_pinned_to_a_pool_that_only_a_static_node_fits_is_refused(api: Api, alice: dict[str, str]) -> None:
    assert api.create_pool().status_code == 201  # A100 and L4 types; n1 has H100s
    r = api.submit(alice, gpus=1, gpu_model="H100", pool="burst")
    if r.status_code == 201:
        api.call("POST", f"/jobs/{r.json()['id']}/cancel", auth=alice)
    assert r.status_code == 400, r.text


def test_a_job_pinned_to_static_runs_on_a_static_node(api: Api, alice: dict[str, str]) -> None:
    r = api.submit(alice, gpus=1, pool="static")
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    try:
        api.ctx.scheduler.run_once(datetime.now(UTC))
        job = api.store.get_job(job_id)
        why = {k: v for k, v in api.call("GET", f"/jobs/{job_id}").json().items() if k.startswith("pending")}
        assert job is not None and job.state is JobState.RUNNING, why
        assert job.placed_parts[0][0] == "n1"
    finally:
        api.call("POST", f"/jobs/{job_id}/cancel", auth=alice)


# ---- nodes: the join binding and the pool label -------------------------------------------------------------------
def test_a_pool_nodes_join_token_joins_only_that_node(api: Api) -> None:
    ctx = api.ctx
    token, token_id = create_pool_join_token(api.store, ctx.ca, 600.0, "burst-g8-1")
    api.store.add_pool_node(
        PoolNode("burst-g8-1", "burst", "g8", LAUNCHING, datetime.now(UTC).timestamp(), gpus=8), token_id, []
    )
    _, csr = new_key_and_csr("evil")
    with pytest.raises(AuthError, match="another node"):
        join_node(api.store, ctx.ca, token, "evil", csr, timedelta(hours=1))
    with pytest.raises(AuthError, match="another node"):  # nor any other name
        join_node(api.store, ctx.ca, token, "burst-g8-2", new_key_and_csr("burst-g8-2")[1], timedelta(hours=1))
    assert api.store.list_node_certs("evil") == [] and api.store.list_node_certs("burst-g8-2") == []
    # the refusal spent nothing: its own node still joins, once
    _, csr = new_key_and_csr("burst-g8-1")
    cert = join_node(api.store, ctx.ca, token, "burst-g8-1", csr, timedelta(hours=1))
    assert cert.pem
    with pytest.raises((AuthError, ConflictError)):  # spent (and the name holds a live certificate now)
        join_node(api.store, ctx.ca, token, "burst-g8-1", csr, timedelta(hours=1))


def test_a_pool_join_token_through_http_is_refused_for_another_name(api: Api) -> None:
    token, token_id = create_pool_join_token(api.store, api.ctx.ca, 600.0, "burst-g8-2")
    api.store.add_pool_node(
        PoolNode("burst-g8-2", "burst", "g8", LAUNCHING, datetime.now(UTC).timestamp(), gpus=8), token_id, []
    )
    agents = TestClient(create_agent_app(api.client.app.app))  # type: ignore[attr-defined]  # the agents' port
    _, csr = new_key_and_csr("evil")
    r = agents.post("/api/v1/join", json={"token": token, "node": "evil", "csr": csr})
    assert r.status_code == 401, r.text
    assert "another node" in r.json()["error"]["message"]
    assert api.store.list_node_certs("evil") == []
    _, csr = new_key_and_csr("burst-g8-2")
    ok = agents.post("/api/v1/join", json={"token": token, "node": "burst-g8-2", "csr": csr})
    assert ok.status_code == 200, ok.text


def _register(store: SqlStore, name: str, labels: dict[str, str]) -> Any:
    body = AgentRegister.model_validate(
        {
            "name": name,
            "backend": "simulated",
            "labels": labels,
            "gpus": [{"index": 0, "uuid": f"{name}-0", "model": "A100-80GB", "memory_mib": 81920}],
        }
    )
    return register_node(store, body)


def test_an_agent_never_picks_its_pool(api: Api) -> None:
    node = _register(api.store, "sneaky", {"pool": "evil", "rack": "r1"})
    assert node.labels == {"rack": "r1"}
    assert api.store.get_node("sneaky").labels == {"rack": "r1"}  # type: ignore[union-attr]
    node = _register(api.store, "sneaky2", {"pool": "burst"})  # not even an existing pool's name
    assert "pool" not in node.labels

    api.store.add_pool_node(
        PoolNode("burst-g8-1", "burst", "g8", RUNNING, datetime.now(UTC).timestamp(), gpus=8), None, []
    )
    node = _register(api.store, "burst-g8-1", {"pool": "static", "zone": "lab"})
    assert node.labels == {"pool": "burst", "zone": "lab"}  # the server's word, not the agent's

    api.store.add_pool_node(
        PoolNode("burst-g8-9", "burst", "g8", RELEASED, datetime.now(UTC).timestamp(), gpus=8), None, []
    )
    node = _register(api.store, "burst-g8-9", {"pool": "burst"})  # a released node is no pool's any more
    assert "pool" not in node.labels


def test_an_agent_over_http_never_picks_its_pool(api: Api) -> None:
    gpus = [{"index": 0, "uuid": "S-0", "model": "A100-80GB", "memory_mib": 81920}]
    r = api.client.post(
        "/api/v1/agents/register",
        json={"name": "n2", "backend": "simulated", "gpus": gpus, "labels": {"pool": "evil"}},
        headers=NodeAgents(api.client)("n2"),
    )
    assert r.status_code == 200, r.text
    assert "pool" not in api.store.get_node("n2").labels  # type: ignore[union-attr]
    static = next(p for p in api.call("GET", "/pools").json() if p["name"] == "static")
    assert static["node_count"] == 2
