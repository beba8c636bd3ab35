"""Why a job waits, in one plain sentence (issue 14): the same wording for the same situation, the numbers a user
acts on (how many GPUs, where some are free, which job frees the next ones and when), no internal codes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState, RunningJob, reasons
from corral.scheduler.queueing.quota import QuotaBook, TenantQuota, check_quota
from corral.scheduler.queueing.wording import WaitFacts, compute_wait_sentence, format_clock

FIFO = QueueingPolicy("skip", "fifo")
NOW = datetime(2026, 11, 26, 13, 5, tzinfo=UTC).timestamp()
CODES = (
    "capacity",
    "gang-incomplete",
    "quota",
    "borrow-limit",
    "model-constraint",
    "behind-head",
    "backfill-reserved",
    "preempting",
    "priority",
)


def qjob(id: str, gpus: int, nodes: int = 1, tenant: str = "t", limit: float | None = None) -> QueuedJob:
    req = ResourceRequest(gpus=gpus)
    return QueuedJob(id, tenant, gpus=gpus, nodes=nodes, time_limit_s=limit, request=req)


def running(id: str, node: str, gpus: tuple[int, ...], limit: float | None, started: float) -> RunningJob:
    return RunningJob(qjob(id, len(gpus), limit=limit), started, "A100-80GB", parts=((node, gpus),))


def sentence(nodes: list, pending: list[QueuedJob], run: list[RunningJob], now: float = NOW) -> dict[str, str]:
    plan = compute_plan(Snapshot(nodes, QueueState(pending, run)), now, "bestfit", FIFO)
    return {job_id: status.text for job_id, status in plan.pending.items()}


def test_a_one_node_job_says_how_many_it_waits_for_where_some_are_free_and_what_frees_next() -> None:
    nodes = [make_node("gpu-a").gpus(4).used(1000, 1000, 0, 0).build()]
    run = [running("12", "gpu-a", (0, 1), limit=5400, started=NOW - 1800)]  # reaches its limit at 14:05 UTC
    text = sentence(nodes, [qjob("w", 4)], run)["w"]
    assert (
        text
        == "waiting for 4 free GPUs; 2 are free on node gpu-a; the next frees at 14:05 UTC when job 12 reaches its time limit"
    )


def test_the_same_situation_reads_the_same_from_one_cycle_to_the_next_and_names_no_code() -> None:
    nodes = [
        make_node("a").gpus(8).used(*([1000] * 5), 0, 0, 0).build(),
        make_node("b").gpus(8).used(*[1000] * 7, 0).build(),
    ]
    run = [running("3", "a", (0, 1, 2, 3, 4), limit=None, started=NOW - 60)]
    first = sentence(nodes, [qjob("w", 6)], run)["w"]
    again = sentence(nodes, [qjob("w", 6)], run, NOW + 5)["w"]
    assert first == again
    assert first.startswith("waiting for 6 free GPUs; 3 are free on node a, 1 on node b;")
    assert "no start time can be estimated" in first  # the job holding them has no time limit
    assert first.split(":")[0] not in CODES and not any(first.startswith(c) for c in CODES)


def test_a_multi_node_gang_says_nodes_with_gpus_each() -> None:
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).used(1000, 0, 0, 0).build()]
    text = sentence(nodes, [qjob("g", 4, nodes=2)], [])["g"]
    assert text.startswith("waiting for 2 nodes with 4 free GPUs each; 4 are free on node a, 3 on node b")


def test_quota_sentences_name_the_tenant_and_the_numbers() -> None:
    book = QuotaBook({"vision": TenantQuota("vision", {"A100-80GB": 8000}, {"A100-80GB": 8000})}, require_quota=True)
    job = qjob("j", 2, tenant="vision")
    code, detail = check_quota(book, {"vision": {"A100-80GB": 7000}}, job, "A100-80GB") or ("", "")
    assert code == reasons.QUOTA
    assert compute_wait_sentence(code, detail, job, WaitFacts(NOW)) == (
        "waiting for tenant vision's own jobs to free GPUs: this one would bring it to 9 A100-80GB GPUs,"
        " above its maximum of 8"
    )
    nobody = qjob("n", 1, tenant="nobody")
    code, detail = check_quota(book, {}, nobody, "A100-80GB") or ("", "")
    assert "tenant nobody has no GPU quota" in compute_wait_sentence(code, detail, nobody, WaitFacts(NOW))


@pytest.mark.parametrize(("eta", "expected"), [(NOW + 3600, "14:05 UTC"), (NOW + 3 * 86400, "Nov 29 13:05 UTC")])
def test_times_carry_their_zone_and_a_date_when_not_soon(eta: float, expected: str) -> None:
    assert format_clock(eta, NOW) == expected


def test_every_code_has_a_sentence_of_its_own() -> None:
    job = qjob("j", 2)
    for code in CODES:
        text = compute_wait_sentence(code, "", job, WaitFacts(NOW, (), 0.0, NOW + 60, ("7", True)))
        assert text and text != code and text != reasons.DESCRIPTIONS.get(code, ""), code


def test_another_tenants_job_is_not_named_only_when_its_gpus_free() -> None:
    nodes = [make_node("gpu-a").gpus(4).used(1000, 1000, 0, 0).build()]
    theirs = RunningJob(qjob("77", 2, tenant="rival", limit=5400), NOW - 1800, "A100-80GB", parts=(("gpu-a", (0, 1)),))
    text = sentence(nodes, [qjob("w", 4)], [theirs])["w"]
    assert "77" not in text and text.endswith("the next frees at 14:05 UTC when a running job reaches its time limit")


def test_an_empty_pool_says_so_and_names_the_model_a_job_asks_for() -> None:
    # Was "no node in the pool can ever hold it (no  GPUs in the pool)": the job's model is "" when no pool model
    # matches (here: no pool model at all), and the sentence named that.
    any_gpu = qjob("a", 1)
    b200 = QueuedJob("b", "t", gpus=1, request=ResourceRequest(gpus=1, gpu_models=("B200-192GB",)))
    text = sentence([], [any_gpu, b200], [])
    assert text["a"] == "no GPU is in the pool yet; it waits until a node joins"
    assert text["b"] == "no B200-192GB GPU is in the pool; it waits until a node with one joins"
