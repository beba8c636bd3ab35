"""Data staging's server side (issue 19): the checks at submit, the orders a node's sync reply carries (stage a
pending job's input in, an ended job's output out), and what the node's reports do to the jobs.

The scheduler chooses the node: a pending job with input to stage that a pass would place is not bound there;
its input is staged on that node first (stage_state staging) while its GPUs stay free for others, then it is
placed on that node only (staged). A multi-node job's input is staged on each of its nodes, and it is placed on
those once every one has it. Its output ships from its first node (rank 0). The agent does the copying
(agent/staging/)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from corral.api.staging import SharedRootWire, StageItemWire, StageOrder, StageReport
from corral.core.errors import ValidationError
from corral.core.models import Job, JobSpec
from corral.core.staging import (
    IN_STAGED,
    IN_STAGING,
    OUT_DONE,
    OUT_FAILED,
    OUT_RUNNING,
    StageItem,
    StagingRules,
    check_shared,
    format_bytes,
    format_progress,
    is_s3,
    parse_shared_roots,
)
from corral.core.states import JobState
from corral.core.unix_identity import UidRange
from corral.server.keyring import Keyring
from corral.server.services.secrets import SecretUnavailable, check_s3_secret_ref, resolve_s3_secret
from corral.store.base import StateStore
from corral.store.protocols import SecretStore, TenancyStore

log = logging.getLogger("corral.staging")
NO_RULES = StagingRules()


class StagingChecksStore(SecretStore, TenancyStore, Protocol):
    """What the submit checks read: the tenant's name (its shared dirs) and its secrets."""


def check_staging(store: StagingChecksStore, tenant_id: int, spec: JobSpec, rules: StagingRules | None) -> None:
    """At submit: a job's stage items' shared paths lie under what its tenant may use
    (written ones under a writable root), and its s3 items have an s3 secret of its tenant whose endpoint the server
    allows. ValidationError naming the field otherwise."""
    items = (*spec.stage_in, *spec.stage_out)
    if not items and not spec.stage_secret:
        return
    rules = rules or NO_RULES
    uses_s3 = any(is_s3(i.source) for i in spec.stage_in) or any(is_s3(i.target) for i in spec.stage_out)
    if uses_s3 and not spec.stage_secret:
        raise ValidationError(
            "stage_secret", "s3:// items need a tenant secret of kind s3 (`corral secrets create NAME --s3`)"
        )
    if spec.stage_secret and not uses_s3:
        raise ValidationError("stage_secret", "it opens s3:// items, and this job stages none")
    tenant = store.get_tenant(tenant_id)
    roots = parse_shared_roots(rules.shared_paths, tenant.name if tenant else "")
    for item in spec.stage_in:
        check_shared(item, roots, outward=False, field="stage_in")
    for item in spec.stage_out:
        check_shared(item, roots, outward=True, field="stage_out")
    if spec.stage_secret:
        check_s3_secret_ref(store, tenant_id, spec.stage_secret, rules.s3_endpoints)


def _wire(items: Sequence[StageItem]) -> list[StageItemWire]:
    return [StageItemWire(source=i.source, target=i.target) for i in items]


def compute_stage_orders(
    store: StateStore,
    node: str,
    keyring: Keyring | None,
    rules: StagingRules,
    uids: UidRange,
    staging: Sequence[Job] | None = None,
    outs: Sequence[Job] | None = None,
) -> tuple[list[StageOrder], list[StageOrder]]:
    """The node's stage-in orders (pending jobs staging there) and stage-out orders (ended jobs it last ran with
    output to ship), with the S3 login opened for it. A job whose secret is gone or whose shared path is no longer
    allowed fails (stage-in) or records the stage-out failure, saying why, instead of staging. `staging` and
    `outs`: what list_staging and list_stage_outs just read (None: read here)."""
    staging = store.list_staging(node) if staging is None else staging
    outs = store.list_stage_outs(node) if outs is None else outs
    if not staging and not outs:
        return [], []
    tenants = {t.id: t.name for t in store.list_tenants()}
    ins: list[StageOrder] = []
    for job in staging:
        try:
            order = _order(store, job, keyring, rules, tenants, job.spec.stage_in, outward=False)
            ins.append(_with_identity(store, job, order, uids))  # shared files are read as the job's user could
        except (SecretUnavailable, ValidationError) as e:
            store.finish_job(job.id, JobState.FAILED, None, f"cannot stage input: {e.message}", datetime.now(UTC))
    outward: list[StageOrder] = []
    for job in outs:
        try:
            order = _order(store, job, keyring, rules, tenants, job.spec.stage_out, outward=True)
        except (SecretUnavailable, ValidationError) as e:
            store.set_stage_out(job.id, OUT_FAILED, f"cannot stage output: {e.message}")
            continue
        outward.append(_with_identity(store, job, order, uids))
    return ins, outward


def _with_identity(store: StateStore, job: Job, order: StageOrder, uids: UidRange) -> StageOrder:
    """The order with the Unix identity the job runs as: shared files are read and written as it could itself."""
    from corral.server.services.agents import load_job_identity  # the agents service imports this module

    try:
        identity = load_job_identity(store, job, uids)
    except ValidationError:
        return order  # no identity: the job does not start either (its hand-over fails saying why)
    return order.model_copy(update={"uid": identity.uid, "gid": identity.gid})


def _order(
    store: StateStore,
    job: Job,
    keyring: Keyring | None,
    rules: StagingRules,
    tenants: Mapping[int, str],
    items: Sequence[StageItem],
    outward: bool,
) -> StageOrder:
    roots = parse_shared_roots(rules.shared_paths, tenants.get(job.spec.tenant_id or 0, ""))
    field = "stage_out" if outward else "stage_in"
    for item in items:  # the settings may have changed since submit: what is handed out is checked now
        check_shared(item, roots, outward, field)
    s3 = None
    if job.spec.stage_secret:
        if keyring is None:
            raise SecretUnavailable("the server handed the job out without its secrets keyring")
        s3 = resolve_s3_secret(store, keyring, job.spec.tenant_id, job.spec.stage_secret, rules.s3_endpoints)
    return StageOrder(
        job_id=job.id,
        attempt=job.attempt,
        items=_wire(items),
        s3=s3,
        roots=[SharedRootWire(path=r.path, writable=r.writable) for r in roots],
    )


def record_stage_reports(
    store: StateStore, node: str, ins: Mapping[str, StageReport], outs: Mapping[str, StageReport]
) -> bool:
    """Apply a node's staging reports: progress becomes the job's pending reason; input done: the job is staged
    there (placed there next pass); input failed: the job fails saying why; output: its state and outcome. Only a
    job this node was asked to stage is touched (a report about another job is ignored). Whether a job became
    placeable (the scheduler should run)."""
    placeable = False
    if ins:
        mine = {str(j.id): j for j in store.list_staging(node)}
        for key, report in ins.items():
            job = mine.get(key)
            if job is None:
                continue
            expect = (IN_STAGING, job.stage_node)
            if report.state == "done":
                now_state = store.finish_staging_on(job.id, node)
                if now_state:
                    store.add_event(job.id, "staged", f"input on node {node}: {_summary(report)}", datetime.now(UTC))
                if now_state == IN_STAGED:
                    placeable = True
                elif now_state:  # a gang: the others are still at it
                    fresh = store.get_job(job.id)
                    have = len(fresh.stage_done) if fresh is not None else 1
                    text = f"staging input: on {have} of {len(job.stage_nodes)} nodes"
                    store.update_staging(job.id, expect, IN_STAGING, job.stage_node, text)
            elif report.state == "failed":
                why = f"staging input failed on node {node}: {report.message}"
                store.finish_job(job.id, JobState.FAILED, None, why, datetime.now(UTC))
            else:
                text = format_progress(report.done_bytes, report.total_bytes) if report.total_bytes else ""
                text = text or "staging input: listing the sources"
                if len(job.stage_nodes) > 1:
                    text = f"{text} (node {node})"
                if text != job.stage_progress:
                    store.update_staging(job.id, expect, IN_STAGING, job.stage_node, text)
    if outs:
        mine_out = {str(j.id): j for j in store.list_stage_outs(node)}
        for key, report in outs.items():
            job = mine_out.get(key)
            if job is None:
                continue
            if report.state == "running":
                text = format_progress(report.done_bytes, report.total_bytes, "staging output")
                if job.stage_out_state != OUT_RUNNING or job.stage_out_message != text:
                    store.set_stage_out(job.id, OUT_RUNNING, text)
            else:
                state = OUT_DONE if report.state == "done" else OUT_FAILED
                store.set_stage_out(job.id, state, report.message or _summary(report))
                store.add_event(job.id, f"stage-out {state}", report.message, datetime.now(UTC))
    return placeable


def _summary(report: StageReport) -> str:
    return f"{report.files} files, {format_bytes(report.total_bytes)}"


def compute_staging_reasons(pending: Sequence[Job]) -> dict[int, str]:
    """Job id -> why a job whose input is being staged waits (it is outside the scheduler's pass meanwhile)."""
    return {
        j.id: j.stage_progress or describe_stage_nodes(j.stage_nodes) for j in pending if j.stage_state == IN_STAGING
    }


def describe_stage_nodes(nodes: Sequence[str]) -> str:
    """Why a job waits while its input is staged: "staging input on node n1" (a gang's: "on nodes n1, n2")."""
    return f"staging input on node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)}"
