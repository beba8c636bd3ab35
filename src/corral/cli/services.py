"""`corral services`, `corral service create|show|update|scale|rollback|delete NAME`: long-running services behind
the gateway (docs/services.md). A refused value, by the CLI or the server, is named by the flag the user typed."""

from __future__ import annotations

import os
import shlex
from contextlib import AbstractContextManager
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import typer
from typer._click import exceptions as click_exc  # typer vendors click; its errors live here

from corral.api.services import ServiceIn, ServiceOut, ServicePatch
from corral.cli import light
from corral.cli.config import load_config, make_client
from corral.cli.flags import named_by_flags, validated
from corral.cli.output import print_json
from corral.core.errors import ValidationError
from corral.sdk.client import CorralClient

# ServiceIn's and ServicePatch's fields as `corral service create|update|scale` spell them
FLAG_OF_FIELD = {
    "name": "NAME",
    "command": "COMMAND",
    "image": "--image",
    "port": "--port",
    "replicas": "--replicas",
    "health_path": "--health-path",
    "gpus": "--gpus",
    "gpu_model": "--gpu-model",
    "env": "--env",
    "secret_env": "--secret-env",
    "queue": "--queue",
    "priority": "--priority",
    "public": "--public",
    "min_replicas": "--min",
    "max_replicas": "--max",
    "target_rps": "--target-rps",
    "max_surge": "--max-surge",
    "max_unavailable": "--max-unavailable",
    "queue_limit": "--queue-limit",
}
GATEWAY_PORT_OFFSET = 3  # the server's default gateway port: the API port + 3 (CORRAL_GATEWAY_PORT)
EVENTS_SHOWN = 10

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Name = Annotated[str, typer.Argument(metavar="NAME", help="The service's name (it is served at /services/NAME/).")]
Command = Annotated[
    list[str] | None,
    typer.Argument(metavar="-- COMMAND ...", help="What each replica runs, after -- (with --image: run in it)."),
]
Image = Annotated[str | None, typer.Option("--image", help="Run each replica in a container of this image.")]
Port = Annotated[
    int | None,
    typer.Option(
        "--port",
        help="The port each replica listens on: inside its container with --image; a command listens on $PORT, "
        "which is this port when it is free on the node.",
    ),
]
Gpus = Annotated[int | None, typer.Option("--gpus", help="Whole GPUs per replica.")]
GpuModel = Annotated[str | None, typer.Option("--gpu-model", help="Allowed GPU models, e.g. A100|H100.")]
HealthPath = Annotated[
    str | None, typer.Option("--health-path", help="A replica takes traffic once GET on it answers 2xx (default /).")
]
Env = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable (not secret).")]
SecretEnv = Annotated[
    list[str] | None, typer.Option("--secret-env", help="VAR=NAME, repeatable: VAR gets the tenant secret NAME.")
]
Queue = Annotated[str | None, typer.Option("--queue", help="One of your tenant's queues.")]
Priority = Annotated[int | None, typer.Option("--priority", help="Higher runs first.")]
Min = Annotated[int | None, typer.Option("--min", help="With --target-rps: the fewest replicas (0: scale to zero).")]
Max = Annotated[int | None, typer.Option("--max", help="With --target-rps: the most replicas.")]
TargetRps = Annotated[
    float | None,
    typer.Option("--target-rps", help="Autoscale on request rate: requests per second one replica serves (0: off)."),
]
MaxSurge = Annotated[int | None, typer.Option("--max-surge", help="A rollout's replicas beyond the count (1).")]
MaxUnavailable = Annotated[
    int | None, typer.Option("--max-unavailable", help="A rollout's ready replicas below the count (0).")
]
QueueLimit = Annotated[
    int | None, typer.Option("--queue-limit", help="Requests in flight beyond which the gateway answers 503 (100).")
]

service_app = typer.Typer(
    help="Long-running services behind the gateway: create, show, update, scale, rollback, delete "
    "(list them with `corral services`).",
    no_args_is_help=True,
)
M = TypeVar("M", ServiceIn, ServicePatch)


def _named_by_flags() -> AbstractContextManager[None]:
    return named_by_flags(FLAG_OF_FIELD)


def _validated(model: type[M], data: dict[str, Any]) -> M:
    return validated(model, data, FLAG_OF_FIELD)


def compute_gateway_url(api_url: str) -> str | None:
    """The gateway's base URL: CORRAL_GATEWAY_URL (as the server's setting) > the CLI config's `gateway_url` > the
    API's host on its port + 3 (the server's default). None when the API URL names no port (behind a proxy)."""
    given = os.environ.get("CORRAL_GATEWAY_URL") or load_config().get("gateway_url")
    if given:
        return given.rstrip("/")
    parts = urlsplit(api_url)
    if parts.port is None or parts.port + GATEWAY_PORT_OFFSET > 65535:
        return None
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}:{parts.port + GATEWAY_PORT_OFFSET}"


def _url(base: str | None, s: ServiceOut) -> str:
    """The server's own full URL of the service (it knows its gateway port and CORRAL_GATEWAY_URL); older servers
    give the path only, completed from CORRAL_GATEWAY_URL or the API port + 3."""
    if s.endpoint and not os.environ.get("CORRAL_GATEWAY_URL"):
        return s.endpoint
    return (base or "") + s.url


def _rollout(s: ServiceOut) -> str:
    return "deleting" if s.deleting else s.rollout.state


def services(as_json: JSON = False) -> None:
    """List services: revision, ready replicas, rollout, request rate and URL."""
    with make_client() as c:
        items = c.services()
        base = compute_gateway_url(c.url)
    if as_json:
        return print_json(items)
    if not items:
        print("no services (corral service create NAME --port P -- COMMAND ...)")
        return
    rows = [
        (
            s.name,
            s.revision,
            f"{s.ready}/{s.desired}",
            _rollout(s),
            "-" if s.traffic is None else f"{s.traffic.rps:.1f}",
            _url(base, s),
        )
        for s in items
    ]
    light.print_table(["NAME", "REVISION", "READY/DESIRED", "ROLLOUT", "RPS", "URL"], rows)


def _check_autoscaling(target_rps: float | None, min_replicas: int | None, max_replicas: int | None) -> None:
    if target_rps is not None and target_rps < 0:
        raise ValidationError("--target-rps", f"{target_rps:g} requests per second: give a rate above 0 (0: off)")
    if min_replicas is not None and max_replicas is not None and min_replicas > max_replicas:
        raise ValidationError("--min", f"{min_replicas} is above --max {max_replicas}")


def _template(
    command: list[str] | None,
    image: str | None,
    gpus: int | None,
    gpu_model: str | None,
    queue: str | None,
    priority: int | None,
) -> dict[str, Any]:
    given: dict[str, Any] = {"image": image, "gpus": gpus, "gpu_model": gpu_model, "queue": queue, "priority": priority}
    data = {k: v for k, v in given.items() if v is not None}
    if command:
        data["command"] = command
    return data


def _settings(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


@service_app.command("create")
def create(
    name: Name,
    command: Command = None,
    image: Image = None,
    port: Port = None,
    gpus: Gpus = None,
    gpu_model: GpuModel = None,
    replicas: Annotated[int | None, typer.Option("--replicas", help="Replicas to run (without --target-rps).")] = None,
    health_path: HealthPath = None,
    min_replicas: Min = None,
    max_replicas: Max = None,
    target_rps: TargetRps = None,
    public: Annotated[bool, typer.Option("--public", help="The gateway serves it without a token.")] = False,
    env: Env = None,
    secret_env: SecretEnv = None,
    queue: Queue = None,
    priority: Priority = None,
    max_surge: MaxSurge = None,
    max_unavailable: MaxUnavailable = None,
    queue_limit: QueueLimit = None,
    as_json: JSON = False,
) -> None:
    """Create a service: its replicas are jobs of your tenant, served at /services/NAME/ once healthy."""
    if not command and not image:  # with an image, the image's own command runs
        raise ValidationError(
            "COMMAND", "missing: what each replica runs after --, e.g. -- python -m http.server $PORT"
        )
    if port is None:
        raise ValidationError("--port", "missing: the port each replica listens on")
    _check_autoscaling(target_rps, min_replicas, max_replicas)
    autoscaled = bool(target_rps)
    if not autoscaled and (min_replicas is not None or max_replicas is not None):
        raise ValidationError("--min", "--min and --max bound autoscaling: add --target-rps R")
    if autoscaled and replicas is not None:
        raise ValidationError("--replicas", "with --target-rps the autoscaler sets the count: give --min and --max")
    data: dict[str, Any] = {"name": name, "port": port, **_template(command, image, gpus, gpu_model, queue, priority)}
    data |= _settings(
        replicas=replicas,
        health_path=health_path,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_rps=target_rps or None,
        max_surge=max_surge,
        max_unavailable=max_unavailable,
        queue_limit=queue_limit,
    )
    if public:
        data["public"] = True
    if env:
        data["env"] = light.parse_env(env)
    if secret_env:
        data["secret_env"] = light.parse_pairs(secret_env, "--secret-env", "VAR=NAME")
    body = _validated(ServiceIn, data)
    with make_client() as c, _named_by_flags():
        s = c.create_service(body)
        base = compute_gateway_url(c.url)
    if as_json:
        return print_json(s)
    print(f"service {s.name} created: revision {s.revision}, {s.desired} replica(s), at {_url(base, s)}")


@service_app.command("show")
def show(name: Name, as_json: JSON = False) -> None:
    """Show a service: settings, rollout, traffic, replicas and its last events."""
    with make_client() as c:
        s = c.service(name)
        base = compute_gateway_url(c.url)
    if as_json:
        return print_json(s)
    print_service(s, _url(base, s))


def _autoscaling(s: ServiceOut) -> str:
    if not s.autoscaled:
        return "off"
    st = s.settings
    return (
        f"{st.get('min_replicas')}..{st.get('max_replicas')} replicas at {st.get('target_rps'):g} req/s each "
        f"(down after {st.get('scale_down_delay_s'):g} s; to zero after {st.get('idle_timeout_s'):g} s idle)"
        if st.get("min_replicas") == 0
        else f"{st.get('min_replicas')}..{st.get('max_replicas')} replicas at {st.get('target_rps'):g} req/s each "
        f"(down after {st.get('scale_down_delay_s'):g} s)"
    )


def _traffic(s: ServiceOut) -> str:
    t = s.traffic
    if t is None:
        return "-"
    ms = "/".join("-" if v is None else f"{v:.0f}" for v in (t.p50_ms, t.p99_ms))
    return f"{t.rps:.1f} req/s, {t.error_rate:.1%} errors, p50/p99 {ms} ms, {t.in_flight} in flight"


def print_service(s: ServiceOut, url: str) -> None:
    revision = str(s.revision)
    if s.stable_revision and s.stable_revision != s.revision:
        revision += f" (revision {s.stable_revision} completed its rollout)"
    fields: list[tuple[str, Any]] = [
        ("name", s.name),
        ("url", url + ("" if s.public else "  (bearer token)")),
        ("tenant", s.tenant),
        ("owner", s.owner),
        ("revision", revision),
        ("rollout", f"{_rollout(s)}: {s.rollout.message}" if s.rollout.message else _rollout(s)),
        ("replicas", f"{s.ready} ready of {s.desired} desired ({s.running} running, {s.pending} pending)"),
        ("autoscaling", _autoscaling(s)),
        ("command", shlex.join(s.command) if s.command else "(the image's own)"),
        ("image", s.image),
        ("port", s.port),
        ("health path", s.health_path),
        ("gpus", s.gpus if s.gpu_milli == 1000 else f"{s.gpus} ({s.gpu_milli} milli)"),
        ("rolling", f"max surge {s.settings.get('max_surge')}, max unavailable {s.settings.get('max_unavailable')}"),
        ("queue limit", s.settings.get("queue_limit")),
        ("traffic", _traffic(s)),
    ]
    light.print_fields([(k, v) for k, v in fields if v is not None], 11)
    if s.replicas:
        print()
        light.print_table(
            ["JOB", "REV", "STATE", "READY", "NODE", "GPUS", "PORT", "HEALTH"],
            [
                (
                    r.job_id,
                    r.revision,
                    r.state + (" (draining)" if r.draining else ""),
                    "yes" if r.ready else "no",
                    r.node,
                    ",".join(map(str, r.gpus)),
                    r.port,
                    r.health,
                )
                for r in s.replicas
            ],
        )
    if s.events:
        print()
        for e in s.events[-EVENTS_SHOWN:]:
            print(f"  {light.short_time(e.at)}  {e.kind:<16} {e.message}")


def _merged_env(c: CorralClient, name: str, env: list[str], unset: list[str]) -> dict[str, str]:
    """The current revision's environment with `--env` set and `--unset-env` removed (PATCH replaces it whole)."""
    s = c.service(name)
    current: dict[str, Any] = next((r.template for r in s.revisions if r.revision == s.revision), {})
    merged = dict(current.get("env") or {}) | light.parse_env(env)
    for key in unset:
        if key not in merged:
            raise ValidationError("--unset-env", f"{key!r} is not in the environment of revision {s.revision}")
        del merged[key]
    return merged


@service_app.command("update")
def update(
    name: Name,
    command: Command = None,
    image: Image = None,
    port: Port = None,
    gpus: Gpus = None,
    gpu_model: GpuModel = None,
    health_path: HealthPath = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable: set in the replicas' environment.")
    ] = None,
    unset_env: Annotated[
        list[str] | None, typer.Option("--unset-env", help="KEY, repeatable: remove from the environment.")
    ] = None,
    queue: Queue = None,
    priority: Priority = None,
    min_replicas: Min = None,
    max_replicas: Max = None,
    target_rps: TargetRps = None,
    public: Annotated[
        bool | None, typer.Option("--public/--private", help="Served without a token, or with one.")
    ] = None,
    max_surge: MaxSurge = None,
    max_unavailable: MaxUnavailable = None,
    queue_limit: QueueLimit = None,
    as_json: JSON = False,
) -> None:
    """Change a service: what replicas run (command, image, env, GPUs, port, health path) is a new revision,
    rolled out replica by replica; settings (autoscaling, public, rollout limits, queue limit) change at once."""
    _check_autoscaling(target_rps, min_replicas, max_replicas)
    data = _template(command, image, gpus, gpu_model, queue, priority)
    data |= _settings(
        port=port,
        health_path=health_path,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        public=public,
        max_surge=max_surge,
        max_unavailable=max_unavailable,
        queue_limit=queue_limit,
    )
    if target_rps is not None:
        data["target_rps"] = target_rps or None  # 0: autoscaling off (null)
    if not data and not env and not unset_env:
        raise click_exc.UsageError("nothing to change: give a flag (see --help) or a new command after --")
    with make_client() as c, _named_by_flags():
        if env or unset_env:
            data["env"] = _merged_env(c, name, env or [], unset_env or [])
        s = c.update_service(name, _validated(ServicePatch, data))
    if as_json:
        return print_json(s)
    print(f"service {s.name}: revision {s.revision}, rollout {_rollout(s)}: {s.rollout.message}")


@service_app.command("scale")
def scale(
    name: Name,
    replicas: Annotated[int, typer.Argument(metavar="N", help="Replicas to run.", min=0)],
    as_json: JSON = False,
) -> None:
    """Run N replicas (a service without autoscaling; an autoscaled one: `service update --min/--max`)."""
    with make_client() as c:
        s = c.scale_service(name, replicas)
    if as_json:
        return print_json(s)
    print(f"service {s.name}: {s.desired} replica(s) desired, {s.ready} ready")


@service_app.command("rollback")
def rollback(name: Name, as_json: JSON = False) -> None:
    """Back to the last revision whose rollout completed (or the one before the current)."""
    with make_client() as c:
        s = c.rollback_service(name)
    if as_json:
        return print_json(s)
    print(f"service {s.name}: rolling back to revision {s.revision}")


@service_app.command("delete")
def delete(name: Name) -> None:
    """Delete a service: its replicas stop, then it is removed (the name is free again)."""
    with make_client() as c:
        c.delete_service(name)
    print(f"service {name} deleting: its replicas stop, then it is removed")
