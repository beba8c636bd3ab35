"""Node pools (pure): every node belongs to one. `static` is the implicit pool of the agents an operator runs;
`cloud` pools are declared by an admin and grow and shrink with the queue (scheduler/autoscale.py decides,
server/background/autoscaler.py acts, a provider in corral/cloud/ starts and stops the machines).

An instance type is what one new node of a cloud pool would be: its GPUs (count, model, memory), host CPUs and
memory, its price per hour and whether it is a spot (interruptible) instance. A node of a pool carries the label
`pool=NAME` and the pool's own labels and taints; a spot node also the taint `spot`, so only jobs that allow spot
(`corral submit --spot`, which tolerates it) are placed on one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from corral.core.errors import ValidationError
from corral.core.gpuspec import DEFAULT_MEMORY_GB
from corral.core.resources import GpuInfo, NodeInfo

STATIC_POOL = "static"  # the implicit pool of every node no cloud pool started
POOL_LABEL = "pool"  # the label every node carries: its pool's name (set by the server, never by the agent)
NODE_LABEL = "corral.node"  # and its own name (the scheduler's view only): a job whose input is staged there asks it
SPOT_TAINT = "spot"  # the taint of a spot node: `submit --spot` tolerates it
# An instance's state as a provider reports it (each provider maps its own onto these).
INSTANCE_PENDING = "pending"  # asked for, not running yet
INSTANCE_RUNNING = "running"
INSTANCE_STOPPING = "stopping"  # shutting down or terminating
INSTANCE_GONE = "gone"  # terminated (or never existed)
CLOUD = "cloud"
SLURM = "slurm"
KUBERNETES = "kubernetes"
CLUSTER_KINDS = (SLURM, KUBERNETES)  # an existing cluster Corral fronts: it places and runs the jobs (corral/clusters)
KINDS = (CLOUD, *CLUSTER_KINDS)  # pools an admin declares (static is implicit)
PROVIDERS = ("local", "aws")  # a cloud pool's
SOURCE_LABEL = "source"  # every node's, in the scheduler's view: `agent` (a Corral agent runs its jobs), else the
SOURCE_AGENT = "agent"  # cluster kind that does (slurm, kubernetes); jobs that need an agent (staging, web UI) ask it
NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?$")  # a DNS label of <= 32: node names are made of it
TYPE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,38}[A-Za-z0-9])?$")  # g4, p4d.24xlarge
MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._]{0,30}(?:-\d{1,4}GB)?$")
LABEL_KEY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,62}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9._-]{0,63}$")
TAINT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._/=:-]{0,126}[A-Za-z0-9])?$")
SETTING_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_TYPES = 16
MAX_NODES = 1000
MAX_LABELS = 32
MAX_TAINTS = 16
MAX_SETTINGS = 32
MAX_SETTING_VALUE = 4096
MAX_GPUS = 64
MAX_PRICE = 10_000.0  # per hour
MAX_IDLE_S = 30 * 86_400.0
MIN_JOIN_TIMEOUT_S, MAX_JOIN_TIMEOUT_S = 5.0, 3_600.0
POLICY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,7}$")  # a dotted module name
# When an instance type does not say: host CPUs and memory are not what limits its jobs (the node reports its own)
UNDECLARED_CPU_MILLI = 1_000_000_000
UNDECLARED_MEMORY_MIB = 1_000_000_000


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One kind of machine a cloud pool can start. `cpus` / `memory_gib` 0: not declared."""

    name: str
    gpus: int
    gpu_model: str  # e.g. "A100-80GB"; "" for a type without GPUs
    gpu_memory_mib: int = 0
    cpus: int = 0
    memory_gib: int = 0
    price_per_hour: float = 0.0
    spot: bool = False

    @property
    def describe(self) -> str:
        """`g4 (4 x A100-80GB, spot, 2.50/h)`."""
        gpus = f"{self.gpus} x {self.gpu_model}" if self.gpus else "no GPUs"
        extra = ", spot" if self.spot else ""
        return f"{self.name} ({gpus}{extra}, {self.price_per_hour:.2f}/h)"

    @property
    def price_per_gpu_hour(self) -> float:
        return self.price_per_hour / self.gpus if self.gpus else self.price_per_hour

    def node_info(self, name: str, labels: Mapping[str, str] = {}, taints: Sequence[str] = ()) -> NodeInfo:
        """What a node of this type would look like to the scheduler (the autoscaler's hypothetical node)."""
        gpus = tuple(
            GpuInfo(index=i, uuid=f"virtual-{name}-{i}", model=self.gpu_model, memory_mib=self.gpu_memory_mib)
            for i in range(self.gpus)
        )
        all_taints = tuple(sorted({*taints, *((SPOT_TAINT,) if self.spot else ())}))
        labels = {SOURCE_LABEL: SOURCE_AGENT, **labels}  # a cloud node runs a Corral agent
        return NodeInfo(
            name=name,
            gpus=gpus,
            cpu_milli=self.cpus * 1000 if self.cpus else UNDECLARED_CPU_MILLI,
            memory_mib=self.memory_gib * 1024 if self.memory_gib else UNDECLARED_MEMORY_MIB,
            labels=tuple(sorted(labels.items())),
            taints=all_taints,
        )

    def sim_spec(self) -> str:
        """The simulated GPUs an agent of the `local` provider reports for this type (`sim:4xA100-80GB`)."""
        return f"sim:{self.gpus}x{self.gpu_model}" if self.gpus else "none"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A cloud pool as an admin declared it. `settings`: the provider's own (AWS: ami, subnet_id, ...)."""

    name: str
    provider: str
    instance_types: tuple[InstanceType, ...]
    kind: str = "cloud"
    region: str = ""
    min_nodes: int = 0
    max_nodes: int = 1
    idle_s: float = 300.0  # a node idle (no job, GPUs quiet) this long is released
    join_timeout_s: float = 600.0  # a node that has not joined this long after its launch is terminated
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    policy: str = ""  # a module with decide(state) -> actions; "" the built-in one
    settings: dict[str, str] = field(default_factory=dict)
    paused: bool = False  # no new nodes (nodes running stay until idle)

    def node_labels(self) -> dict[str, str]:
        return {**self.labels, POOL_LABEL: self.name}

    def instance_type(self, name: str) -> InstanceType | None:
        return next((t for t in self.instance_types if t.name == name), None)

    @property
    def largest(self) -> InstanceType | None:
        """The type with the most GPUs (then memory, then the cheapest)."""
        if not self.instance_types:
            return None
        return max(self.instance_types, key=lambda t: (t.gpus, t.gpu_memory_mib, -t.price_per_hour))


# A pool node's life: launching -> running -> draining -> released; launching -> failed (no join in time, the
# provider refused, the instance vanished); running -> released when its node is lost or its instance is gone.
LAUNCHING = "launching"  # the provider was asked; the node has not joined yet
RUNNING = "running"  # joined: its agent registered and takes work
DRAINING = "draining"  # to be released: cordoned, released once its jobs ended
RELEASED = "released"  # terminated after running (history: what it cost)
FAILED = "failed"  # never ran: the launch failed or it did not join in time (terminated)
LIVE_STATES = (LAUNCHING, RUNNING, DRAINING)
STATES = (*LIVE_STATES, RELEASED, FAILED)


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node a cloud pool started, as the server last saw it. Times are epoch seconds."""

    name: str
    pool: str
    instance_type: str
    state: str
    launched_s: float
    spot: bool = False
    price_per_hour: float = 0.0
    gpus: int = 0  # its type's GPU count
    joined_s: float | None = None
    idle_since_s: float | None = None  # running, no job and its GPUs quiet since then (None: busy)
    ended_s: float | None = None  # released or failed at
    notice_at_s: float | None = None  # its provider takes it back then (a spot interruption notice)
    jobs: int = 0  # jobs placed on it now
    provider_id: str = ""
    reason: str = ""  # why it ended (or is draining)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def compute_spend(nodes: Sequence[PoolNode], now_s: float, since_s: float | None = None) -> float:
    """What these nodes cost: price per hour x hours from launch to end (or now), counted from `since_s` when
    given (this month's spend: since the month's first second)."""
    total = 0.0
    for n in nodes:
        start = n.launched_s if since_s is None else max(n.launched_s, since_s)
        end = n.ended_s if n.ended_s is not None else now_s
        if end > start:
            total += n.price_per_hour * (end - start) / 3600.0
    return total


def cluster_pool_of(node: str, labels: Mapping[str, str] | None, cluster_pools: Sequence[str]) -> str | None:
    """The Slurm or Kubernetes pool a node name belongs to: its labels say so (the inventory wrote it), or its name
    is `<cluster pool>.<node>` (a node that pool may read later). Such a name is never an agent's."""
    if labels is not None and labels.get(SOURCE_LABEL) in CLUSTER_KINDS:
        return labels.get(POOL_LABEL, "")
    return next((p for p in cluster_pools if node.startswith(f"{p}.")), None)


# ---- checks (each error names the field) --------------------------------------
def check_pool_name(name: str, field_name: str = "name") -> str:
    if name == STATIC_POOL:
        raise ValidationError(field_name, f"{STATIC_POOL!r} is the pool of the nodes no cloud pool started")
    if not NAME.fullmatch(name):
        raise ValidationError(
            field_name,
            f"{name!r} is not a pool name: lower-case letters, digits and '-', starting with a letter, at most 32",
        )
    return name


def check_instance_type(t: InstanceType, field_name: str = "instance_types") -> InstanceType:
    if not TYPE_NAME.fullmatch(t.name):
        raise ValidationError(f"{field_name}.name", f"{t.name!r}: letters, digits, '.', '_' or '-', at most 40")
    if not 0 <= t.gpus <= MAX_GPUS:
        raise ValidationError(f"{field_name}.gpus", f"{t.gpus} is not in 0..{MAX_GPUS}")
    if t.gpus and not MODEL.fullmatch(t.gpu_model):
        raise ValidationError(f"{field_name}.gpu_model", f"{t.gpu_model!r} is not a GPU model such as A100-80GB")
    if not 0 <= t.gpu_memory_mib <= 4 * 1024 * 1024:
        raise ValidationError(f"{field_name}.gpu_memory_mib", "must be in 0..4 TiB")
    if not 0 <= t.cpus <= 4096:
        raise ValidationError(f"{field_name}.cpus", "must be in 0..4096")
    if not 0 <= t.memory_gib <= 65_536:
        raise ValidationError(f"{field_name}.memory_gib", "must be in 0..65536")
    if not (math.isfinite(t.price_per_hour) and 0 <= t.price_per_hour <= MAX_PRICE):
        raise ValidationError(f"{field_name}.price_per_hour", f"must be a number in 0..{MAX_PRICE:g}")
    return t


def check_pool(spec: PoolSpec) -> PoolSpec:
    """Raise ValidationError naming the first bad field; returns the spec."""
    check_pool_name(spec.name)
    if spec.kind not in KINDS:
        raise ValidationError("kind", f"{spec.kind!r}: one of {', '.join(KINDS)} (static pools are implicit)")
    if spec.kind in CLUSTER_KINDS:
        return _check_cluster_pool(spec)
    if spec.provider not in PROVIDERS:
        raise ValidationError("provider", f"{spec.provider!r}: one of {', '.join(PROVIDERS)}")
    if not spec.instance_types:
        raise ValidationError("instance_types", "a cloud pool needs at least one instance type")
    if len(spec.instance_types) > MAX_TYPES:
        raise ValidationError("instance_types", f"at most {MAX_TYPES}")
    for t in spec.instance_types:
        check_instance_type(t)
    names = [t.name for t in spec.instance_types]
    if len(set(names)) != len(names):
        raise ValidationError("instance_types.name", "each instance type is named once")
    if len(spec.region) > 64 or not re.fullmatch(r"[A-Za-z0-9._-]*", spec.region):
        raise ValidationError("region", "letters, digits, '.', '_' or '-', at most 64")
    if not 0 <= spec.max_nodes <= MAX_NODES:
        raise ValidationError("max_nodes", f"must be in 0..{MAX_NODES}")
    if not 0 <= spec.min_nodes <= spec.max_nodes:
        raise ValidationError("min_nodes", f"must be in 0..max_nodes ({spec.max_nodes})")
    if not (math.isfinite(spec.idle_s) and 0 <= spec.idle_s <= MAX_IDLE_S):
        raise ValidationError("idle_s", f"must be in 0..{MAX_IDLE_S:g} seconds")
    if not (math.isfinite(spec.join_timeout_s) and MIN_JOIN_TIMEOUT_S <= spec.join_timeout_s <= MAX_JOIN_TIMEOUT_S):
        raise ValidationError("join_timeout_s", f"must be in {MIN_JOIN_TIMEOUT_S:g}..{MAX_JOIN_TIMEOUT_S:g} seconds")
    if len(spec.labels) > MAX_LABELS:
        raise ValidationError("labels", f"at most {MAX_LABELS}")
    for k, v in spec.labels.items():
        if not LABEL_KEY.fullmatch(k) or k == POOL_LABEL:
            raise ValidationError(
                "labels", f"{k!r} is not a label name (letters, digits, '.', '_', '/', '-'; not pool)"
            )
        if not LABEL_VALUE.fullmatch(v):
            raise ValidationError("labels", f"{k}={v!r}: a value is letters, digits, '.', '_' or '-', at most 63")
    if len(spec.taints) > MAX_TAINTS:
        raise ValidationError("taints", f"at most {MAX_TAINTS}")
    for taint in spec.taints:
        if not TAINT.fullmatch(taint):
            raise ValidationError("taints", f"{taint!r} is not a taint (letters, digits, '.', '_', '/', '=', ':', '-')")
    if spec.policy and not POLICY.fullmatch(spec.policy):
        raise ValidationError("policy", f"{spec.policy!r} is not a dotted Python module name")
    return _check_settings(spec)


def _check_cluster_pool(spec: PoolSpec) -> PoolSpec:
    """A slurm or kubernetes pool: its nodes are the cluster's (read from it), so no instance types, sizes or
    policy; its settings are its backend's (corral/clusters checks them)."""
    if spec.provider not in ("", spec.kind):
        raise ValidationError("provider", f"a {spec.kind} pool has no provider (give none, or {spec.kind!r})")
    if spec.instance_types:
        raise ValidationError("instance_types", f"a {spec.kind} pool's nodes are its cluster's: give no instance types")
    if spec.policy:
        raise ValidationError("policy", f"a {spec.kind} pool starts no nodes: it has no policy")
    if spec.labels or spec.taints:
        raise ValidationError("labels", f"a {spec.kind} pool's nodes carry the cluster's own labels")
    return _check_settings(spec)


def _check_settings(spec: PoolSpec) -> PoolSpec:
    if len(spec.settings) > MAX_SETTINGS:
        raise ValidationError("settings", f"at most {MAX_SETTINGS}")
    for k, v in spec.settings.items():
        if not SETTING_KEY.fullmatch(k):
            raise ValidationError("settings", f"{k!r} is not a setting name (lower-case letters, digits, '_')")
        if len(v) > MAX_SETTING_VALUE or any(c in v for c in "\x00\r\n"):
            raise ValidationError("settings", f"{k}: at most {MAX_SETTING_VALUE} characters on one line")
    return spec


# ---- stored form ------------------------------------------------------------------------------
def pool_to_dict(spec: PoolSpec) -> dict[str, Any]:
    d = asdict(spec)
    d["instance_types"] = [asdict(t) for t in spec.instance_types]
    d["taints"] = list(spec.taints)
    return d


def pool_from_dict(d: Mapping[str, Any]) -> PoolSpec:
    types = tuple(InstanceType(**t) for t in d.get("instance_types", ()))
    known = {f.name for f in fields(PoolSpec)} - {"instance_types", "taints"}
    rest = {k: v for k, v in d.items() if k in known}
    return PoolSpec(instance_types=types, taints=tuple(d.get("taints", ())), **rest)


# ---- the CLI's short form of an instance type -------------------------------------------------
_TYPE_SPEC = re.compile(r"^(?P<name>[^=,]+)=(?P<count>\d+)x(?P<model>[A-Za-z0-9._-]+)(?P<rest>(?:,[^,]*)*)$")


def parse_instance_type(text: str, field_name: str = "--instance-type") -> InstanceType:
    """`g4=4xA100-80GB,price=2.5,spot,cpus=32,memory=256` (memory in GiB; the model's memory from its name,
    else a known model's, else `gpu-memory=GIB`). Raises ValidationError naming `field_name`."""
    m = _TYPE_SPEC.match(text.strip())
    if not m:
        raise ValidationError(field_name, f"{text!r}: expected NAME=COUNTxMODEL[,price=P][,spot][,cpus=N][,memory=GIB]")
    model = m["model"]
    count = int(m["count"])
    values: dict[str, str] = {}
    spot = False
    for part in filter(None, m["rest"].split(",")):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if key == "spot" and not sep:
            spot = True
        elif key in ("price", "cpus", "memory", "gpu-memory") and sep:
            values[key] = value.strip()
        else:
            raise ValidationError(field_name, f"{part!r}: one of price=P, spot, cpus=N, memory=GIB, gpu-memory=GIB")
    try:
        model, gpu_mem_mib = compute_model_memory(
            model, int(values["gpu-memory"]) * 1024 if "gpu-memory" in values else 0
        )
        t = InstanceType(
            name=m["name"].strip(),
            gpus=count,
            gpu_model=model if count else "",
            gpu_memory_mib=gpu_mem_mib if count else 0,
            cpus=int(values.get("cpus", "0")),
            memory_gib=int(values.get("memory", "0")),
            price_per_hour=float(values.get("price", "0")),
            spot=spot,
        )
    except ValueError as e:
        raise ValidationError(field_name, f"{text!r}: {e}") from e
    return check_instance_type(t, field_name)


def compute_model_memory(model: str, memory_mib: int = 0) -> tuple[str, int]:
    """A GPU model as pools name it and its memory: `A100-80GB` says its own; given `memory_mib` (> 0) it is that;
    else a known model's (`A100` -> `A100-80GB`, 81920), else 16 GiB. A model without its size gets it."""
    named = re.search(r"-(\d+)GB$", model)
    gib = memory_mib // 1024 if memory_mib else int(named[1]) if named else DEFAULT_MEMORY_GB.get(model.upper(), 16)
    return (model if named else f"{model}-{gib}GB"), (memory_mib or gib * 1024)


def format_instance_type(t: InstanceType) -> str:
    """The short form parse_instance_type reads (round trip)."""
    parts = [f"{t.name}={t.gpus}x{t.gpu_model or 'none'}", f"price={t.price_per_hour:g}"]
    if t.spot:
        parts.append("spot")
    if t.cpus:
        parts.append(f"cpus={t.cpus}")
    if t.memory_gib:
        parts.append(f"memory={t.memory_gib}")
    return ",".join(parts)


__all__ = [
    "DRAINING",
    "FAILED",
    "LAUNCHING",
    "LIVE_STATES",
    "RELEASED",
    "RUNNING",
    "STATES",
    "PoolNode",
    "POOL_LABEL",
    "CLUSTER_KINDS",
    "SOURCE_AGENT",
    "SOURCE_LABEL",
    "SPOT_TAINT",
    "STATIC_POOL",
    "InstanceType",
    "PoolSpec",
    "check_instance_type",
    "compute_spend",
    "check_pool",
    "check_pool_name",
    "format_instance_type",
    "parse_instance_type",
    "pool_from_dict",
    "pool_to_dict",
]
