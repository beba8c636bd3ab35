"""`corral pools`, `corral pool create|show|update|delete NAME`: node pools; `corral budgets`, `corral budget set|
delete TENANT`: tenants' budgets; `corral report`: GPU-hours and cost per tenant, user, pool, job (docs/elastic.md).
A refused value, by the CLI or the server, is named by the flag the user typed."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from corral.api.pools import BudgetIn, InstanceTypeIn, PoolIn, PoolOut, PoolPatch
from corral.cli import light
from corral.cli.config import make_client
from corral.cli.flags import named_by_flags, validated
from corral.cli.output import print_json
from corral.core.errors import ValidationError

FLAG_OF_FIELD = {
    "name": "NAME",
    "provider": "--provider",
    "kind": "--kind",
    "region": "--region",
    "instance_types": "--instance-type",
    "min_nodes": "--min",
    "max_nodes": "--max",
    "idle_s": "--idle",
    "join_timeout_s": "--join-timeout",
    "labels": "--label",
    "taints": "--taint",
    "policy": "--policy",
    "settings": "--setting",
    "paused": "--pause",
}
EVENTS_SHOWN = 15

pool_app = typer.Typer(help="Declare and change node pools (admins); see them all with `corral pools`.")
JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Name = Annotated[str, typer.Argument(metavar="NAME", help="The pool's name.")]
Types = Annotated[
    list[str] | None,
    typer.Option(
        "--instance-type",
        help="NAME=COUNTxMODEL[,price=P][,spot][,cpus=N][,memory=GIB], e.g. g4=4xA100-80GB,price=2.5; repeatable.",
    ),
]
Provider = Annotated[str | None, typer.Option("--provider", help="local (agent processes here) or aws.")]
Region = Annotated[str | None, typer.Option("--region", help="The provider's region (aws: us-east-1 ...).")]
Min = Annotated[int | None, typer.Option("--min", help="Nodes kept even when idle (default 0).")]
Max = Annotated[int | None, typer.Option("--max", help="Most nodes at once (default 1).")]
Idle = Annotated[
    float | None, typer.Option("--idle", help="Seconds a node stays idle (no job, GPUs quiet) before its release.")
]
JoinTimeout = Annotated[
    float | None, typer.Option("--join-timeout", help="Seconds a new node has to join before it counts as failed.")
]
Labels = Annotated[list[str] | None, typer.Option("--label", help="KEY=VALUE its nodes carry; repeatable.")]
Taints = Annotated[
    list[str] | None, typer.Option("--taint", help="A taint its nodes carry (jobs need --toleration); repeatable.")
]
Policy = Annotated[
    str | None, typer.Option("--policy", help="A Python module on the server with decide(state) -> actions.")
]
Settings = Annotated[list[str] | None, typer.Option("--setting", help="KEY=VALUE for the provider; repeatable.")]


def _named_by_flags() -> AbstractContextManager[None]:
    return named_by_flags(FLAG_OF_FIELD)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str] | None:
    if items is None:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(flag, f"{item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _types(items: list[str] | None) -> list[InstanceTypeIn] | None:
    if items is None:
        return None
    from corral.core.pools import parse_instance_type

    out = []
    for text in items:
        out.append(InstanceTypeIn(**asdict(parse_instance_type(text, "--instance-type"))))
    return out


def _fields(
    instance_type: list[str] | None,
    region: str | None,
    min_nodes: int | None,
    max_nodes: int | None,
    idle: float | None,
    join_timeout: float | None,
    label: list[str] | None,
    taint: list[str] | None,
    policy: str | None,
    setting: list[str] | None,
) -> dict[str, Any]:
    """The body fields `create` and `update` share, from their flags (None: not given)."""
    return {
        "instance_types": _types(instance_type),
        "region": region,
        "min_nodes": min_nodes,
        "max_nodes": max_nodes,
        "idle_s": idle,
        "join_timeout_s": join_timeout,
        "labels": _pairs(label, "--label"),
        "taints": taint,
        "policy": policy,
        "settings": _pairs(setting, "--setting"),
    }


def _validated(model: type[Any], data: dict[str, Any]) -> Any:
    return validated(model, {k: v for k, v in data.items() if v is not None}, FLAG_OF_FIELD)


def _ago(at: datetime | None) -> str:
    if at is None:
        return "-"
    s = (datetime.now(UTC) - at).total_seconds()
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f}m ago" if s < 7200 else f"{s / 3600:.1f}h ago"


def _types_text(p: PoolOut) -> str:
    return ", ".join(
        f"{t.name} ({t.gpus}x{t.gpu_model}{' spot' if t.spot else ''} {t.price_per_hour:g}/h)" for t in p.instance_types
    )


def pools(as_json: JSON = False) -> None:
    """List node pools: kind, nodes, GPUs, pending demand and spend this month."""
    with make_client() as c:
        items = c.pools()
    if as_json:
        return print_json(items)
    rows = [
        (
            p.name,
            p.kind if p.kind == "static" else f"{p.kind}/{p.provider}" + (" (paused)" if p.paused else ""),
            f"{p.node_count}" if p.kind == "static" else f"{p.node_count}/{p.max_nodes}",
            p.gpus,
            f"{p.pending_jobs} jobs, {p.pending_gpus} GPUs" if p.pending_jobs else "-",
            "-" if p.kind == "static" else f"{p.spend_month:.2f}",
            _types_text(p) or "-",
        )
        for p in items
    ]
    light.print_table(["POOL", "KIND", "NODES", "GPUS", "PENDING", "SPEND (MONTH)", "INSTANCE TYPES"], rows)


Kind = Annotated[
    str,
    typer.Option(
        "--kind",
        help="cloud (nodes started by a provider), slurm or kubernetes (an existing cluster; its settings: "
        "docs/pools.md).",
    ),
]


@pool_app.command("create")
def create(
    name: Name,
    kind: Kind = "cloud",
    provider: Provider = None,
    instance_type: Types = None,
    region: Region = None,
    min_nodes: Min = None,
    max_nodes: Max = None,
    idle: Idle = None,
    join_timeout: JoinTimeout = None,
    label: Labels = None,
    taint: Taints = None,
    policy: Policy = None,
    setting: Settings = None,
    as_json: JSON = False,
) -> None:
    """Declare a pool (admins): corral pool create gpu-cloud --provider local --instance-type g4=4xA100 --max 2;
    an existing cluster: corral pool create hpc --kind slurm --setting slurm_conf=/etc/slurm/slurm.conf
    --setting log_dir=/shared/corral."""
    if kind == "cloud" and provider is None:
        raise ValidationError("--provider", "missing: local or aws")
    if kind == "cloud" and not instance_type:
        raise ValidationError("--instance-type", "missing: at least one, e.g. g4=4xA100-80GB,price=2.5")
    shared = _fields(instance_type, region, min_nodes, max_nodes, idle, join_timeout, label, taint, policy, setting)
    body = _validated(PoolIn, {"name": name, "kind": kind, "provider": provider, **shared})
    with make_client() as c, _named_by_flags():
        p = c.create_pool(body)
    if as_json:
        return print_json(p)
    if p.kind != "cloud":
        print(f"pool {p.name}: {p.kind} cluster; its nodes appear in `corral nodes` once read")
        return
    print(f"pool {p.name}: {p.provider}, up to {p.max_nodes} node(s) of {_types_text(p)}")


@pool_app.command("update")
def update(
    name: Name,
    instance_type: Types = None,
    region: Region = None,
    min_nodes: Min = None,
    max_nodes: Max = None,
    idle: Idle = None,
    join_timeout: JoinTimeout = None,
    label: Labels = None,
    taint: Taints = None,
    policy: Policy = None,
    setting: Settings = None,
    pause: Annotated[
        bool | None, typer.Option("--pause/--resume", help="Start no new nodes (running ones stay until idle).")
    ] = None,
    as_json: JSON = False,
) -> None:
    """Change a pool (admins); the fields not given stay."""
    shared = _fields(instance_type, region, min_nodes, max_nodes, idle, join_timeout, label, taint, policy, setting)
    patch = _validated(PoolPatch, {**shared, "paused": pause})
    with make_client() as c, _named_by_flags():
        p = c.update_pool(name, patch)
    if as_json:
        return print_json(p)
    print(f"pool {p.name} updated (version {p.version})")


@pool_app.command("show")
def show(name: Name, as_json: JSON = False) -> None:
    """A pool's types, nodes (state, type, jobs, idle since) and newest events."""
    with make_client() as c:
        p = c.pool(name)
    if as_json:
        return print_json(p)
    print(f"pool {p.name} ({p.kind}{'/' + p.provider if p.provider else ''}{', paused' if p.paused else ''})")
    if p.kind != "static":
        print(f"  types: {_types_text(p)}")
        print(f"  nodes: {p.node_count} (min {p.min_nodes}, max {p.max_nodes}); idle release after {p.idle_s:g} s")
        print(f"  pending: {p.pending_jobs} job(s), {p.pending_gpus} GPU(s); failed launches: {p.failed_launches}")
        print(f"  spend: {p.spend_month:.2f} this month, {p.spend_total:.2f} in all")
        if p.labels or p.taints:
            print(f"  labels: {p.labels or '-'}  taints: {', '.join(p.taints) or '-'}")
        if p.policy:
            print(f"  policy: {p.policy}")
    if p.nodes:
        light.print_table(
            ["NODE", "TYPE", "STATE", "JOBS", "LAUNCHED", "IDLE SINCE", "REASON"],
            [
                (n.name, n.instance_type, n.state, n.jobs, _ago(n.launched_at), _ago(n.idle_since), n.reason or "-")
                for n in p.nodes
            ],
        )
    for e in (p.events or [])[-EVENTS_SHOWN:]:
        print(f"  {e.at:%H:%M:%S} {e.kind:<14} {e.node or '-':<28} {e.message}")


@pool_app.command("interrupt")
def interrupt(
    name: Name,
    node: Annotated[str, typer.Argument(metavar="NODE", help="A node of the pool.")],
    seconds: Annotated[float, typer.Option("--in", help="Seconds of notice before the node goes.")] = 120.0,
) -> None:
    """Play a spot interruption notice on a local pool's node (admins): its jobs are told (CORRAL_NOTICE_FILE),
    stopped and requeued keeping their place; the node goes when the notice ends."""
    with make_client() as c:
        c.interrupt_pool_node(name, node, seconds)
    print(f"node {node}: interruption notice of {seconds:g} s")


@pool_app.command("delete")
def delete(name: Name) -> None:
    """Delete a cloud pool (admins): its nodes are drained (their jobs end first) and released."""
    with make_client() as c:
        c.delete_pool(name)
    print(f"pool {name} deleted; its nodes are drained and released")


# ---- budgets -------------------------------------------------------------------------------------
budget_app = typer.Typer(help="Set and delete tenants' budgets (admins); see them with `corral budgets`.")
BUDGET_FLAGS = {"period": "--period", "gpu_hours": "--gpu-hours", "money": "--money", "policy": "--policy"}


def budgets(as_json: JSON = False) -> None:
    """Budgets and this period's spend (admins: every tenant's; others: their own tenant's)."""
    with make_client() as c:
        items = c.budgets()
    if as_json:
        return print_json(items)
    if not items:
        print("no budgets (corral budget set TENANT --money 1000 --policy no-burst)")
        return
    rows = [
        (
            b.tenant,
            b.period,
            "-" if b.gpu_hours is None else f"{b.gpu_hours_used:.1f}/{b.gpu_hours:g}",
            "-" if b.money is None else f"{b.money_used:.2f}/{b.money:g}",
            f"{b.used_pct:.0f}%",
            b.state + (" (" + b.policy + " applies)" if b.enforced else ""),
            b.policy,
        )
        for b in items
    ]
    light.print_table(["TENANT", "PERIOD", "GPU-HOURS", "MONEY", "USED", "STATE", "POLICY"], rows)


@budget_app.command("set")
def budget_set(
    tenant: Annotated[str, typer.Argument(metavar="TENANT", help="The tenant whose budget this is.")],
    gpu_hours: Annotated[float | None, typer.Option("--gpu-hours", help="GPU-hours per period.")] = None,
    money: Annotated[float | None, typer.Option("--money", help="Money per period (prices: docs/elastic.md).")] = None,
    period: Annotated[str, typer.Option("--period", help="month, week or day.")] = "month",
    policy: Annotated[
        str, typer.Option("--policy", help="At 100%: notify, no-burst (no new cloud nodes) or hold (jobs wait).")
    ] = "notify",
    as_json: JSON = False,
) -> None:
    """Set (or replace) a tenant's budget (admins)."""
    fields = {"period": period, "gpu_hours": gpu_hours, "money": money, "policy": policy}
    body = validated(BudgetIn, {k: v for k, v in fields.items() if v is not None}, BUDGET_FLAGS)
    if gpu_hours is None and money is None:
        raise ValidationError("--gpu-hours", "give --gpu-hours, --money or both")
    with make_client() as c, named_by_flags(BUDGET_FLAGS):
        b = c.set_budget(tenant, body)
    if as_json:
        return print_json(b)
    print(f"budget of {b.tenant}: {b.used_pct:.0f}% used this {b.period} ({b.state}); policy {b.policy}")


@budget_app.command("delete")
def budget_delete(tenant: Annotated[str, typer.Argument(metavar="TENANT")]) -> None:
    """Delete a tenant's budget (admins)."""
    with make_client() as c:
        c.delete_budget(tenant)
    print(f"budget of {tenant} deleted")


def report(
    by: Annotated[str, typer.Option("--by", help="tenant, user, gpu_model, day, pool or job.")] = "tenant",
    start: Annotated[str | None, typer.Option("--start", help="ISO time (default: 30 days before --end).")] = None,
    end: Annotated[str | None, typer.Option("--end", help="ISO time (default: now).")] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV.")] = False,
    as_json: JSON = False,
) -> None:
    """GPU-hours, jobs, utilisation and cost per group over a time range (members: their tenant's)."""
    with make_client() as c, named_by_flags({"group_by": "--by", "start": "--start", "end": "--end"}):
        data = c.usage_report(by, start, end, csv=as_csv)
    if as_csv:
        print(data, end="")
        return
    if as_json:
        return print_json(data)
    rows = [
        (r["key"], f"{r['gpu_hours']:.2f}", r["jobs"], "-" if r["avg_util_pct"] is None else f"{r['avg_util_pct']:.0f}%",
         f"{r.get('cost', 0.0):.2f}")
        for r in data
    ]  # fmt: skip
    light.print_table([by.upper(), "GPU-HOURS", "JOBS", "AVG UTIL", "COST"], rows)
