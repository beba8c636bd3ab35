"""`corral alerts [--json]`, `corral alerts rules|add-rule|delete-rule|silence|silences|unsilence`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from corral.cli.config import make_client
from corral.cli.output import print_json, print_table

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
alerts_app = typer.Typer(help="Alerts: list them (no subcommand), rules, silences.", invoke_without_command=True)


@alerts_app.callback()
def alerts(
    ctx: typer.Context,
    as_json: JSON = False,
    state: Annotated[list[str] | None, typer.Option(help="firing, pending or resolved (repeatable).")] = None,
    history: Annotated[bool, typer.Option("--history", help="Every state change, newest first.")] = False,
) -> None:
    """List alerts with their state."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client() as c:
        items = c.alerts(state, history)
    if as_json:
        return print_json(items)
    rows = [(a.get("at") or a.get("started_at", ""))[:19] for a in items]
    print_table(
        None,
        ["STATE", "SEVERITY", "RULE", "MESSAGE", "SINCE"],
        [(a["state"], a["severity"], a["rule"], a["message"], t) for a, t in zip(items, rows)],
    )


@alerts_app.command("rules")
def rules(as_json: JSON = False) -> None:
    """List alert rules (built-in and custom)."""
    with make_client() as c:
        items = c.alert_rules()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["ID", "NAME", "CONDITION", "FOR", "SEVERITY", "SCOPE"],
        [
            (
                r["id"] or "built-in",
                r["name"],
                f"{r['metric']}{{{r['selector']}}} {r['comparison']} {r['threshold']:g}",
                f"{r['for_s']:g}s",
                r["severity"],
                r["tenant"] or r["scope"],
            )
            for r in items
        ],
    )


@alerts_app.command("add-rule")
def add_rule(
    name: str,
    metric: str,
    comparison: Annotated[str, typer.Option("--op", help="> >= < <= == !=")] = ">",
    threshold: Annotated[float, typer.Option(help="The value compared against.")] = 0.0,
    for_s: Annotated[float, typer.Option("--for", help="Seconds the condition must hold.")] = 0.0,
    severity: Annotated[str, typer.Option(help="info, warning or critical.")] = "warning",
    selector: Annotated[str, typer.Option(help='Label selector, e.g. node="n1",gpu=~"0|1".')] = "",
    action: Annotated[list[str] | None, typer.Option(help="cordon_node or stop_job (repeatable).")] = None,
    summary: Annotated[str, typer.Option(help="Message template over labels, {value}, {threshold}.")] = "",
    as_json: JSON = False,
) -> None:
    """Create an alert rule."""
    body: dict[str, Any] = {
        "name": name,
        "metric": metric,
        "comparison": comparison,
        "threshold": threshold,
        "for_s": for_s,
        "severity": severity,
        "selector": selector,
        "actions": action or [],
        "summary": summary,
    }
    with make_client() as c:
        rule = c.create_alert_rule(body)
    print_json(rule) if as_json else print(f"rule {rule['name']} created (id {rule['id']})")


@alerts_app.command("delete-rule")
def delete_rule(rule_id: int) -> None:
    """Delete a custom alert rule."""
    with make_client() as c:
        c.delete_alert_rule(rule_id)
    print(f"rule {rule_id} deleted")


@alerts_app.command("silence")
def silence(
    matchers: Annotated[str, typer.Argument(help='e.g. alertname="gpu_temperature",node="n1"')],
    duration: Annotated[float, typer.Option(help="Seconds.")] = 3600.0,
    comment: Annotated[str, typer.Option(help="Why.")] = "",
) -> None:
    """Mute notifications of matching alerts for a while."""
    with make_client() as c:
        s = c.create_silence({"matchers": matchers, "duration_s": duration, "comment": comment})
    print(f"silence {s['id']} until {s['ends_at']:.0f}")


@alerts_app.command("silences")
def silences(as_json: JSON = False) -> None:
    """List active silences."""
    with make_client() as c:
        items = c.silences()
    if as_json:
        return print(json.dumps(items, indent=2))
    print_table(
        None,
        ["ID", "MATCHERS", "BY", "COMMENT"],
        [(s["id"], s["matchers"], s["created_by"], s["comment"]) for s in items],
    )


@alerts_app.command("unsilence")
def unsilence(silence_id: str) -> None:
    """End a silence now."""
    with make_client() as c:
        c.delete_silence(silence_id)
    print(f"silence {silence_id} ended")
