"""`corral secrets ...`: a tenant's secrets. Values are read from stdin or a file, never from the command line."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated

import typer

from corral.api.secrets import SecretIn, SecretKind, SecretUpdate
from corral.cli.config import make_client
from corral.cli.output import print_json, print_table, short_time
from corral.core.errors import ValidationError

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Tenant = Annotated[str | None, typer.Option(help="The tenant (admins; default: your own).")]
FromFile = Annotated[Path | None, typer.Option("--from-file", help="Read the value from this file (kept exactly).")]

secrets_app = typer.Typer(
    help="Tenant secrets for jobs (`corral submit --secret-env VAR=NAME`). Values go in from stdin or a file "
    "and never come back out: listings show names only.",
    invoke_without_command=True,
)


def read_value(from_file: Path | None, stdin_only: bool = False) -> str:
    """The value: a file's exact content, else stdin (one trailing newline dropped; a terminal asks without
    echo, unless `stdin_only`, as `docker login --password-stdin` reads). Never argv: a command line is visible
    to every user of the machine in `ps`."""
    if from_file is not None:
        try:
            return from_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValidationError("--from-file", f"cannot read {from_file}: {e}") from e
    if sys.stdin.isatty() and not stdin_only:
        return getpass.getpass("secret value (not echoed): ")
    value = sys.stdin.read()
    return value[:-1] if value.endswith("\n") else value


@secrets_app.callback()
def secrets_default(ctx: typer.Context, as_json: JSON = False, tenant: Tenant = None) -> None:
    """List your tenant's secrets when no subcommand is given."""
    if ctx.invoked_subcommand is None:
        secrets_list(as_json=as_json, tenant=tenant)


@secrets_app.command("list")
def secrets_list(as_json: JSON = False, tenant: Tenant = None) -> None:
    """Names, kinds and who made them (never a value). Admins see every tenant's unless --tenant is given."""
    with make_client() as c:
        items = c.secrets(tenant)
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["NAME", "TENANT", "KIND", "CREATED BY", "CREATED", "UPDATED"],
        [
            (
                s.name,
                s.tenant,
                s.kind.value + (f" {s.username}@{s.host}" if s.host else f" {s.username}" if s.username else ""),
                s.created_by,
                short_time(s.created_at),
                short_time(s.updated_at),
            )
            for s in items
        ],
    )


@secrets_app.command("create")
def secrets_create(
    name: Annotated[str, typer.Argument(help="Unique in the tenant: letters, digits, . _ -")],
    from_file: FromFile = None,
    tenant: Tenant = None,
    kind: Annotated[
        SecretKind, typer.Option(help="generic, or registry (a container registry login).")
    ] = SecretKind.GENERIC,
    host: Annotated[str | None, typer.Option(help="Registry host (--kind registry).")] = None,
    username: Annotated[str | None, typer.Option(help="Registry user (--kind registry or --registry).")] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            metavar="HOST",
            help="A container registry login for HOST (e.g. registry.example.com:5000): the same as --kind "
            "registry --host HOST. Jobs use it with `corral submit --image ... --registry-secret NAME`.",
        ),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the value (the registry password) from stdin.")
    ] = False,
    s3: Annotated[
        bool,
        typer.Option(
            "--s3",
            help="S3 credentials for data staging (`corral submit --stage-in s3://... --stage-secret NAME`): the "
            "value is the secret access key; give --access-key-id (and --endpoint, --region).",
        ),
    ] = False,
    access_key_id: Annotated[str | None, typer.Option("--access-key-id", help="The S3 access key id (--s3).")] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint", help="An S3-compatible endpoint URL (--s3; default AWS's own; the server must allow it)."
        ),
    ] = None,
    region: Annotated[str | None, typer.Option("--region", help="The S3 region (--s3; default us-east-1).")] = None,
    as_json: JSON = False,
) -> None:
    """Create a secret; the value comes from stdin (`printf %s "$TOKEN" | corral secrets create NAME`) or --from-file.

    A registry login: `corral secrets create NAME --registry HOST --username U --password-stdin < password-file`."""
    if registry is not None:
        if host is not None and host != registry:
            raise ValidationError("--registry", "give the registry host once (--registry or --host)")
        kind, host = SecretKind.REGISTRY, registry
    if s3:
        if registry is not None or kind is SecretKind.REGISTRY:
            raise ValidationError("--s3", "a secret is an s3 login or a registry login, not both")
        kind, host, username = SecretKind.S3, endpoint or host, access_key_id or username
    elif access_key_id or endpoint or region:
        raise ValidationError(
            "--access-key-id" if access_key_id else "--endpoint" if endpoint else "--region", "only with --s3"
        )
    if password_stdin and from_file is not None:
        raise ValidationError("--password-stdin", "read the value from stdin or from --from-file, not both")
    value = read_value(from_file, stdin_only=password_stdin)
    body = _secret_in(name, value, kind, host, username, region)
    with make_client() as c:
        s = c.create_secret(body, tenant)
    print_json(s) if as_json else print(f"secret {s.name} created in tenant {s.tenant}")


def _secret_in(
    name: str, value: str, kind: SecretKind, host: str | None, username: str | None, region: str | None = None
) -> SecretIn:
    """The body, with a schema refusal named by its flag (the CLI's words, not the API's field names)."""
    import pydantic

    try:
        return SecretIn(name=name, value=value, kind=kind, host=host, username=username, region=region)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else ""
        flags = {"name": "NAME", "value": "--password-stdin", "host": "--registry", "username": "--username"}
        if kind is SecretKind.S3:
            flags.update(host="--endpoint", username="--access-key-id", region="--region")
        fallback = {SecretKind.REGISTRY: "--username", SecretKind.S3: "--access-key-id"}.get(kind, "--kind")
        flag = flags.get(field, fallback)
        raise ValidationError(flag, str(err["msg"]).removeprefix("Value error, ")) from None


@secrets_app.command("update")
def secrets_update(
    name: str,
    from_file: FromFile = None,
    tenant: Tenant = None,
    host: Annotated[str | None, typer.Option(help="New registry host.")] = None,
    username: Annotated[str | None, typer.Option(help="New registry user.")] = None,
    as_json: JSON = False,
) -> None:
    """Give a secret a new value (stdin or --from-file); jobs started from now on get it."""
    body = SecretUpdate(value=read_value(from_file), host=host, username=username)
    with make_client() as c:
        s = c.update_secret(name, body, tenant)
    print_json(s) if as_json else print(f"secret {s.name} updated")


@secrets_app.command("delete")
def secrets_delete(name: str, tenant: Tenant = None) -> None:
    """Delete a secret; pending jobs that use it fail when they start, naming it."""
    with make_client() as c:
        c.delete_secret(name, tenant)
    print(f"secret {name} deleted")


@secrets_app.command("rotate-key")
def secrets_rotate_key(as_json: JSON = False) -> None:
    """Admins: a new key seals every stored secret again; old keys leave the key file once nothing needs them."""
    with make_client() as c:
        out = c.rotate_secrets_key()
    if as_json:
        return print_json(out)
    print(
        f"new key {out.key_id}: {out.resealed} value(s) sealed again; retired key(s): "
        f"{', '.join(out.retired_keys) or 'none'}"
    )
