"""The Kubernetes pool's pure half: its settings, and Kubernetes objects (Nodes, Pods, quantities, names) read
into Corral's and made from them. No client calls here (kubernetes.py makes those)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from corral.clusters.base import (
    FAILED,
    QUEUED,
    STARTED,
    SUCCEEDED,
    ClusterError,
    ClusterJob,
    ClusterNode,
    parse_job_name,
)
from corral.core.errors import ValidationError

SETTINGS = ("kubeconfig", "context", "namespace_prefix", "gpu_resource", "model_label", "memory_label")
DEFAULTS = {
    "namespace_prefix": "corral-",
    "gpu_resource": "nvidia.com/gpu",
    "model_label": "nvidia.com/gpu.product",
    "memory_label": "nvidia.com/gpu.memory",
}
MANAGED = ("app.kubernetes.io/managed-by", "corral")
CONTAINER = "job"
CALL_TIMEOUT_S = 30.0
WATCH_TIMEOUT_S = 50  # a watch is renewed this often (from where it was), as informers do
DELETE_GRACE_S = 5
FORGET_AFTER_S = 600.0  # a Pod gone from the cluster is still reported (cancelled, failed) this long
# Waiting reasons a Pod never leaves by itself (it would retry for ever): the job fails with the reason
STUCK_REASONS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z][-a-z0-9]{0,29}$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX: dict[str, Decimal] = {k: Decimal(v) for k, v in _BINARY.items()}
_SUFFIX |= {k: Decimal(10) ** e for k, e in _DECIMAL.items()}


def check_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """A kubernetes pool's settings, checked (ValidationError naming `settings.<key>`); returns them."""
    for key in settings:
        if key not in SETTINGS:
            raise ValidationError(f"settings.{key}", f"not a kubernetes pool setting: one of {', '.join(SETTINGS)}")
    path = settings.get("kubeconfig", "")
    if not path.startswith("/") or "\n" in path or ".." in path.split("/"):
        raise ValidationError("settings.kubeconfig", "give the absolute path of the kubeconfig the server uses")
    context = settings.get("context", "")
    if context and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@:/-]{0,252}", context):
        raise ValidationError("settings.context", f"{context!r} is not a kubeconfig context name")
    prefix = settings.get("namespace_prefix", DEFAULTS["namespace_prefix"])
    if not _PREFIX.fullmatch(prefix):
        raise ValidationError(
            "settings.namespace_prefix", f"{prefix!r}: a lowercase letter, then a-z, 0-9, '-' (30 at most)"
        )
    for key in ("gpu_resource", "model_label", "memory_label"):
        value = settings.get(key, DEFAULTS[key])
        if not _QUALIFIED.fullmatch(value):
            raise ValidationError(f"settings.{key}", f"{value!r} is not a Kubernetes name such as {DEFAULTS[key]}")
    return dict(settings)


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity: `16`, `15500m`, `64Gi`, `128974848Ki`, `1e3`, `1.5G`. ValueError otherwise."""
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)", text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a quantity")
    try:
        return Decimal(m[1]) * _SUFFIX[m[2]]
    except InvalidOperation as e:
        raise ValueError(f"{text!r} is not a quantity") from e


def _quantity(values: Mapping[str, str], key: str, unit: int = 1) -> int:
    try:
        return int(parse_quantity(values.get(key) or "0") / unit)
    except ValueError:
        return 0


def short_hash(text: str, n: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def compute_namespace(prefix: str, tenant: str) -> str:
    """The tenant's namespace: prefix + its name when that is a DNS label as given; else a DNS-safe form of the name
    and a hash of it (so two names that read alike never share a namespace), 63 characters at most."""
    name = prefix + tenant
    if len(name) <= 63 and _DNS_LABEL.fullmatch(name):
        return name
    safe = re.sub(r"[^a-z0-9]+", "-", tenant.lower()).strip("-")
    return f"{prefix}{safe[: 63 - len(prefix) - 11]}".rstrip("-") + "-" + short_hash(tenant)


def compute_label_value(value: str) -> str:
    """`value` as a label value (63 characters of A-Za-z0-9._-), with a hash of it when it had to change."""
    if LABEL_VALUE.fullmatch(value):
        return value
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-._")[:52]
    return f"{safe}-{short_hash(value)}".lstrip("-")


def compute_toleration(text: str) -> dict[str, str]:
    """`key`, `key=value`, `key:Effect` or `key=value:Effect` as a Pod toleration."""
    kv, _, effect = text.partition(":")
    key, eq, value = kv.partition("=")
    if not key or not _QUALIFIED.fullmatch(key) or (effect and effect not in _EFFECTS):
        raise ClusterError(f"toleration {text!r}: key, key=value or key=value:Effect ({', '.join(_EFFECTS)})")
    out = {"key": key, "operator": "Equal" if eq else "Exists"} | ({"value": value} if eq else {})
    return out | ({"effect": effect} if effect else {})


def compute_node(node: Any, gpu_resource: str, model_label: str, memory_label: str) -> ClusterNode:
    """A Node object (the client's V1Node) as Corral reads it."""
    allocatable = node.status.allocatable or {}
    labels = dict(node.metadata.labels or {})
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    taints = tuple(f"{t.key}={t.value or ''}:{t.effect}" for t in node.spec.taints or [])
    memory = labels.get(memory_label, "")
    return ClusterNode(
        name=node.metadata.name,
        gpus=_quantity(allocatable, gpu_resource),
        gpu_model=labels.get(model_label, ""),
        gpu_memory_mib=int(memory) if memory.isdigit() else 0,
        cpus=_quantity(allocatable, "cpu"),
        memory_mib=_quantity(allocatable, "memory", 2**20),
        state="down" if not ready else "drain" if node.spec.unschedulable else "up",
        labels=labels,
        taints=taints,
    )


def compute_job(pod: Any) -> ClusterJob | None:
    """A Pod (the client's V1Pod) as a ClusterJob; None for a Pod whose name Corral did not give."""
    ids = parse_job_name(pod.metadata.name or "")
    if ids is None:
        return None
    status = pod.status
    phase = (status.phase if status else None) or "Pending"
    cstatus = (status.container_statuses or [None])[0] if status else None
    state = cstatus.state if cstatus is not None else None
    created = pod.metadata.creation_timestamp
    common: dict[str, Any] = {
        "external_id": f"{pod.metadata.namespace}/{pod.metadata.name}",
        "job_id": ids[0],
        "attempt": ids[1],
        "placement": {pod.spec.node_name: ()} if pod.spec and pod.spec.node_name else {},
        "submitted_s": created.timestamp() if created is not None else None,
    }
    if phase == "Pending":
        waiting = state.waiting if state is not None else None
        if waiting is not None and waiting.reason in STUCK_REASONS:
            return ClusterJob(state=FAILED, detail=f"{waiting.reason}: {waiting.message or ''}".strip(": "), **common)
        return ClusterJob(state=QUEUED, detail=_pending_detail(status, waiting), **common)
    if phase in ("Running", "Unknown"):  # Unknown: its node stopped reporting; the node's state says more
        return ClusterJob(state=STARTED, detail="" if phase == "Running" else "Unknown", **common)
    term = state.terminated if state is not None else None
    code = term.exit_code if term is not None else None
    if phase == "Succeeded":
        return ClusterJob(state=SUCCEEDED, exit_code=0 if code is None else code, **common)
    if status is not None and status.reason:  # Evicted, DeadlineExceeded, ...: the Pod's reason before its container's
        detail = f"{status.reason}: {status.message}" if status.message else status.reason
    else:
        detail = (term.reason or "") if term is not None else (phase if phase != "Failed" else "")
    return ClusterJob(state=FAILED, exit_code=code, detail=detail, **common)


def _pending_detail(status: Any, waiting: Any) -> str:
    """Why a Pending Pod waits: its container's reason ("ContainerCreating") or the scheduler's ("Unschedulable:
    0/2 nodes are available: ...")."""
    if waiting is not None and waiting.reason:
        return f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
    for cond in (status.conditions if status else None) or []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return f"{cond.reason}: {cond.message}" if cond.message else (cond.reason or "")
    return "Pending"
