"""Long-running services: the use-cases behind /api/v1/services (create, update, scale, rollback, delete, show).

What replicas run is a revision: the template of a replica job (JobSubmit fields), its port and health path. The
API only records what is wanted (a new revision, a replica count, a deletion) in the service row and wakes the
controller (server/background/services.py), which starts and stops the replica jobs. Another tenant's service is
reported as missing, never as forbidden.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from corral.api.schemas import JobSubmit
from corral.api.services import (
    REVISION_FIELDS,
    SETTING_FIELDS,
    ReplicaOut,
    RevisionOut,
    RolloutOut,
    ServiceEventOut,
    ServiceIn,
    ServiceOut,
    ServicePatch,
    TrafficOut,
    settings_of,
    template_of,
)
from corral.core.errors import ConflictError, NotFoundError, ValidationError
from corral.core.models import Job, JobSpec
from corral.core.services import ScalePolicy
from corral.core.states import JobState
from corral.server.auth import Principal
from corral.server.services.jobs import NO_SUBMIT_RULES, SubmitRules, job_spec_for
from corral.store.base import StateStore
from corral.store.records import Service

REPLICA_MAX_RETRIES = 1_000_000  # a GPU or node failure requeues a replica elsewhere, however often
LIVE = (JobState.PENDING, JobState.RUNNING)


def load_service(store: StateStore, name: str, caller: Principal | None = None) -> Service:
    """The service, or NotFoundError, also when it belongs to a tenant the caller may not see."""
    s = store.get_service_by_name(name)
    if s is None:
        raise NotFoundError("service", name)
    if caller is not None:
        caller.check_tenant(s.tenant_id, "service", name)
    return s


def scale_policy(settings: Mapping[str, Any], replicas: int) -> ScalePolicy:
    return ScalePolicy(
        replicas=replicas,
        min_replicas=int(settings.get("min_replicas", 1)),
        max_replicas=int(settings.get("max_replicas", 1)),
        target_rps=settings.get("target_rps"),
        scale_down_delay_s=float(settings.get("scale_down_delay_s", 60.0)),
        idle_timeout_s=float(settings.get("idle_timeout_s", 300.0)),
    )


def _check_settings(settings: Mapping[str, Any], replicas: int) -> None:
    scale_policy(settings, replicas).check()
    if int(settings.get("max_surge", 1)) + int(settings.get("max_unavailable", 0)) < 1:
        raise ValidationError("max_surge", "max_surge and max_unavailable cannot both be 0: a rollout could not move")


IMAGE_COMMAND = "(the image's own command)"  # stands for no command while a template is checked as a submission


def replica_submit(name: str, revision: Mapping[str, Any]) -> JobSubmit:
    """The job submission of one replica of `revision` (raises pydantic's error for a bad template). An image
    service without a command is checked with a stand-in command (replica_spec runs the image's own)."""
    t = dict(revision["template"])
    image = t.get("image")
    if image and not t.get("command"):
        t["command"] = [IMAGE_COMMAND]
    return JobSubmit(**t, name=name, web_ui=True, container_port=revision["port"] if image else None)


def replica_spec(
    store: StateStore, service: Service, revision: Mapping[str, Any], rules: SubmitRules = NO_SUBMIT_RULES
) -> JobSpec:
    """A replica job of `revision`, checked like a submission of the service's tenant (its queue, quotas, a node
    that could hold it, host mounts under what `rules` allow). Raises ValidationError naming the field."""
    try:
        body = replica_submit(service.name, revision)
    except PydanticValidationError as e:
        err = e.errors()[0]
        raise ValidationError(".".join(str(x) for x in err["loc"]) or "body", err["msg"]) from None
    # a replica runs as the author of its revision: a member who changes what a service runs never runs it as
    # another member (the service's owner), whose Unix identity it would have
    author = revision.get("user_id", service.user_id)
    spec = job_spec_for(store, body, service.tenant_id, author, rules=rules)
    port = 0 if spec.container is not None else int(revision["port"])  # a command: P when free on its node
    own_command = spec.container is not None and not revision["template"].get("command")
    return dataclasses.replace(
        spec,
        command=() if own_command else spec.command,  # the engine runs the image's CMD / ENTRYPOINT
        service_id=service.id,
        service_revision=int(revision["revision"]),
        max_retries=REPLICA_MAX_RETRIES,
        time_limit_s=None,
        port=port,
    )


def _revision(template: dict[str, Any], port: int, health_path: str) -> dict[str, Any]:
    return {"template": template, "port": port, "health_path": health_path}


def create_service(
    store: StateStore, body: ServiceIn, caller: Principal, now: datetime, rules: SubmitRules = NO_SUBMIT_RULES
) -> Service:
    if caller.tenant_id is None:
        raise ValidationError("tenant", "the caller belongs to no tenant")
    settings = settings_of(body)
    autoscaled = settings.get("target_rps") is not None
    if autoscaled and "max_replicas" not in body.model_fields_set:
        settings["max_replicas"] = max(int(settings["min_replicas"]), body.replicas, 1)
    # autoscaled: starts at min, and at least one (a new service shows at once that it comes up; with min 0 it
    # scales to zero after the idle period), as Knative's initial scale of 1
    replicas = max(int(settings["min_replicas"]), 1) if autoscaled else body.replicas
    _check_settings(settings, replicas)
    user_id = caller.user.id if caller.user else None
    revision = {**_revision(template_of(body), int(body.port or 0), body.health_path or "/"), "user_id": user_id}
    probe = Service(
        id=0,
        tenant_id=caller.tenant_id,
        user_id=user_id,
        name=body.name,
        settings=settings,
        revisions=({**revision, "revision": 1},),
        revision=1,
        stable_revision=0,
        replicas=replicas,
        state={},
        events=(),
        created_at=now,
        updated_at=now,
    )
    replica_spec(store, probe, probe.current, rules)  # the template must make a valid job of this tenant
    return store.create_service(caller.tenant_id, user_id, body.name, settings, revision, replicas, now)


def update_service(
    store: StateStore,
    service: Service,
    body: ServicePatch,
    now: datetime,
    author: int | None = None,
    rules: SubmitRules = NO_SUBMIT_RULES,
) -> Service:
    """Settings change at once; a change of what replicas run is a new revision, rolled out by the controller."""
    settings = settings_of(body, service.settings)
    current = service.current
    template = template_of(body, current["template"])
    port = body.port if body.port is not None else int(current["port"])
    health = body.health_path if body.health_path is not None else str(current["health_path"])
    new_revision = (template, port, health) != (current["template"], current["port"], current["health_path"])
    replicas = service.replicas
    if settings.get("target_rps") is not None:  # within the new bounds at once; the autoscaler goes on from there
        replicas = min(max(replicas, int(settings["min_replicas"])), int(settings["max_replicas"]))
    _check_settings(settings, replicas)
    number = max(r["revision"] for r in service.revisions) + 1
    rev = {**_revision(template, port, health), "revision": number, "created_at": now.isoformat(), "user_id": author}
    if new_revision:
        replica_spec(store, service, rev, rules)
    changed = [f for f in SETTING_FIELDS if settings.get(f) != service.settings.get(f)]

    def change(s: Service) -> dict[str, Any]:
        out: dict[str, Any] = {"settings": {**s.settings, **{f: settings[f] for f in changed}}}
        events: list[tuple[str, str]] = []
        if changed:
            events.append(("updated", "settings: " + ", ".join(f"{f}={settings[f]}" for f in changed)))
        if settings.get("target_rps") is not None and replicas != s.replicas:
            out["replicas"] = replicas
        if new_revision:
            n = max(r["revision"] for r in s.revisions) + 1
            out["revisions"] = [*s.revisions, {**rev, "revision": n}]
            out["revision"] = n
            out["state"] = {**s.state, "rollout": _progressing(n, s.revision, now)}
            what = sorted(k for k in {*template, *current["template"]} if template.get(k) != current["template"].get(k))
            what += [f for f, v in zip(REVISION_FIELDS, (port, health), strict=True) if v != current[f]]
            events.append(("rollout", f"revision {n} ({', '.join(what)} changed): rolling out from {s.revision}"))
        out["_events"] = events
        return out

    updated = store.modify_service(service.id, change, now)
    if updated is None:
        raise NotFoundError("service", service.name)
    return updated


def _progressing(to: int, frm: int, now: datetime) -> dict[str, Any]:
    return {
        "state": "progressing",
        "revision": to,
        "message": f"rolling out revision {to} (from {frm})",
        "since": now.isoformat(),
    }


def scale_service(store: StateStore, service: Service, replicas: int, now: datetime) -> Service:
    if service.settings.get("target_rps") is not None:
        raise ConflictError(
            f"service {service.name} is autoscaled between {service.settings.get('min_replicas')} and "
            f"{service.settings.get('max_replicas')} replicas: change those (service update --min/--max), or turn "
            "autoscaling off (--target-rps 0)",
            field="replicas",
        )

    def change(s: Service) -> dict[str, Any]:
        if s.replicas == replicas:
            return {}
        return {"replicas": replicas, "_events": [("scaled", f"scaled from {s.replicas} to {replicas} by hand")]}

    updated = store.modify_service(service.id, change, now)
    if updated is None:
        raise NotFoundError("service", service.name)
    return updated


def rollback_service(store: StateStore, service: Service, now: datetime) -> Service:
    """Back to the last revision a rollout completed (or, when the current one completed, the one before it): the
    replicas that already run it stay (like `kubectl rollout undo`), the others are replaced."""

    def change(s: Service) -> dict[str, Any]:
        if s.stable_revision and s.stable_revision != s.revision:
            back = s.revision_of(s.stable_revision)
        else:
            older = [r for r in s.revisions if r["revision"] < s.revision]
            back = older[-1] if older else None
        if back is None:
            raise ConflictError(f"service {s.name} has no earlier revision to roll back to", field="revision")
        to = int(back["revision"])
        return {
            "revision": to,
            "state": {**s.state, "rollout": _progressing(to, s.revision, now), "rollout_crashes": 0},
            "_events": [("rollback", f"rolled back from revision {s.revision} to revision {to}")],
        }

    updated = store.modify_service(service.id, change, now)
    if updated is None:
        raise NotFoundError("service", service.name)
    return updated


def delete_service(store: StateStore, service: Service, now: datetime) -> Service:
    """Marks it deleting: the controller stops its replicas, then removes it (the name is free again then)."""
    updated = store.modify_service(
        service.id,
        lambda s: {} if s.deleting else {"deleting": True, "replicas": 0, "_events": [("deleting", "deleting")]},
        now,
    )
    if updated is None:
        raise NotFoundError("service", service.name)
    return updated


def service_out(
    s: Service,
    replicas: list[Job],
    *,
    tenant: str | None,
    owner: str | None,
    ready: Mapping[int, bool],
    health: Mapping[int, str],
    traffic: TrafficOut | None,
    detail: bool,
) -> ServiceOut:
    current = s.current
    t = current["template"]
    draining = s.state.get("draining", {})
    rollout = s.state.get("rollout", {})
    live = [j for j in replicas if j.state in LIVE]
    return ServiceOut(
        id=s.id,
        name=s.name,
        tenant=tenant,
        owner=owner,
        url=f"/services/{s.name}/",
        public=bool(s.settings.get("public")),
        revision=s.revision,
        stable_revision=s.stable_revision,
        desired=s.replicas,
        ready=sum(1 for j in live if ready.get(j.id) and str(j.id) not in draining),
        running=sum(1 for j in live if j.state is JobState.RUNNING),
        pending=sum(1 for j in live if j.state is JobState.PENDING),
        port=int(current["port"]),
        health_path=str(current["health_path"]),
        command=list(t.get("command") or []),
        image=t.get("image"),
        gpus=int(t.get("gpus") or 0),
        gpu_milli=int(t.get("gpu_milli") or 1000),
        settings=dict(s.settings),
        autoscaled=s.settings.get("target_rps") is not None,
        rollout=RolloutOut(
            state=str(rollout.get("state", "progressing")),
            revision=int(rollout.get("revision", s.revision)),
            message=str(rollout.get("message", "")),
        ),
        traffic=traffic,
        deleting=s.deleting,
        created_at=s.created_at,
        updated_at=s.updated_at,
        replicas=[
            ReplicaOut(
                job_id=j.id,
                revision=j.spec.service_revision or 0,
                state=j.state.value,
                ready=bool(ready.get(j.id)) and str(j.id) not in draining,
                node=j.node,
                gpus=list(j.gpu_indices),
                port=j.spec.port or None,
                attempt=j.attempt,
                started_at=j.started_at,
                draining=str(j.id) in draining,
                health=health.get(j.id, ""),
            )
            for j in live
        ]
        if detail
        else [],
        events=[ServiceEventOut(**e) for e in s.events[-30:]] if detail else [],
        revisions=[
            RevisionOut(
                revision=r["revision"],
                created_at=r["created_at"],
                port=r["port"],
                health_path=r["health_path"],
                template=r["template"],
            )
            for r in s.revisions
        ]
        if detail
        else [],
    )
