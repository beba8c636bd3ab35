"""Tenancy commands: `corral tenants|quotas|queues|users|tokens ...`, `corral login`, `corral whoami`."""

from __future__ import annotations

import getpass
import json
import os
import sys
from typing import Annotated

import typer

from corral.api.paths import cli_config_path
from corral.api.schemas import QueueIn, QuotaIn, TenantIn, TokenIn, UnixIdentityIn, UserIn, UserPatch
from corral.cli.config import make_client, resolve_target
from corral.cli.output import print_json, print_table, short_time
from corral.sdk.client import CorralAPIError, CorralClient

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

# Every noun lists when bare (`corral tenants` as `corral nodes`), as `list` does.
tenants_app = typer.Typer(
    help="Tenants (teams, departments), their quotas and queues: list them (no subcommand), create, quota, queue.",
    invoke_without_command=True,
)
users_app = typer.Typer(
    help="Users and their roles: list them (no subcommand), create, set.", invoke_without_command=True
)
tokens_app = typer.Typer(help="API tokens: list them (no subcommand), create, revoke.", invoke_without_command=True)


@tenants_app.command("list")
def tenants_list(as_json: JSON = False) -> None:
    """List tenants (members see their own)."""
    with make_client() as c:
        items = c.tenants()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["TENANT", "PARENT", "WEIGHT", "CREATED"],
        [(t.name, t.parent, f"{t.weight:g}", short_time(t.created_at)) for t in items],
    )


@tenants_app.command("create")
def tenants_create(
    name: str,
    parent: Annotated[str | None, typer.Option(help="Parent tenant (department).")] = None,
    weight: Annotated[float, typer.Option(help="Fair-share weight.")] = 1.0,
    as_json: JSON = False,
) -> None:
    """Create a tenant (admins)."""
    with make_client() as c:
        t = c.create_tenant(TenantIn(name=name, parent=parent, weight=weight))
    print_json(t) if as_json else print(f"tenant {t.name} created")


@tenants_app.command("quota")
def tenants_quota(
    tenant: str,
    guaranteed: Annotated[int, typer.Option("--guaranteed", help="GPUs guaranteed to the tenant.")],
    max_gpus: Annotated[int | None, typer.Option("--max", help="Most GPUs it may hold by borrowing.")] = None,
    gpu_model: Annotated[str, typer.Option(help="GPU model the quota counts (default: all).")] = "",
    as_json: JSON = False,
) -> None:
    """Set a tenant's quota (admins)."""
    with make_client() as c:
        q = c.set_quota(tenant, QuotaIn(gpu_model=gpu_model, guaranteed_gpus=guaranteed, max_gpus=max_gpus))
    if as_json:
        return print_json(q)
    print(f"{q.tenant} {q.gpu_model or 'all models'}: guaranteed {q.guaranteed_gpus}, max {q.max_gpus or 'pool'}")


@tenants_app.command("quotas")
def tenants_quotas(tenant: Annotated[str | None, typer.Argument()] = None, as_json: JSON = False) -> None:
    """List quotas."""
    with make_client() as c:
        items = c.quotas(tenant)
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["TENANT", "GPU MODEL", "GUARANTEED", "MAX"],
        [(q.tenant, q.gpu_model or "(all)", q.guaranteed_gpus, q.max_gpus or "pool") for q in items],
    )


@tenants_app.command("queue")
def tenants_queue(
    tenant: str,
    name: str,
    strict: Annotated[bool, typer.Option("--strict/--best-effort", help="A blocked head blocks the queue.")] = False,
    priority: Annotated[int, typer.Option(help="Queue priority.")] = 0,
    as_json: JSON = False,
) -> None:
    """Create or change a queue of a tenant (admins, tenant admins)."""
    with make_client() as c:
        q = c.set_queue(tenant, QueueIn(name=name, mode="strict" if strict else "best-effort", priority=priority))
    print_json(q) if as_json else print(f"queue {q.tenant}/{q.name}: {q.mode}, priority {q.priority}")


@tenants_app.command("queues")
def tenants_queues(tenant: Annotated[str | None, typer.Argument()] = None, as_json: JSON = False) -> None:
    """List queues."""
    with make_client() as c:
        items = c.queues(tenant)
    if as_json:
        return print_json(items)
    print_table(None, ["TENANT", "QUEUE", "MODE", "PRIORITY"], [(q.tenant, q.name, q.mode, q.priority) for q in items])


@users_app.command("list")
def users_list(as_json: JSON = False) -> None:
    """List users (tenant admins: of their tenant)."""
    with make_client() as c:
        items = c.users()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["USER", "ROLE", "TENANT", "PASSWORD", "UNIX", "CREATED"],
        [
            (
                u.name,
                u.role + (" (disabled)" if u.disabled else ""),
                u.tenant,
                "set" if u.has_password else "",
                _unix_column(u.unix_uid, u.unix_gid),
                short_time(u.created_at),
            )
            for u in items
        ],
    )


def _unix_column(uid: int | None, gid: int | None) -> str:
    return "range" if uid is None else f"{uid}:{gid if gid is not None else uid}"


@users_app.command("unix")
def users_unix(
    name: str,
    uid: Annotated[
        int | None,
        typer.Option(
            "--uid", help="Map the user to this existing account's uid (admins; >= 1000, outside CORRAL_JOB_UIDS)."
        ),
    ] = None,
    gid: Annotated[int | None, typer.Option("--gid", help="Its gid (default: the uid).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the mapping: a UID from the range again.")] = False,
    as_json: JSON = False,
) -> None:
    """Show or set the Unix identity a user's jobs run as on every node."""
    if clear and (uid is not None or gid is not None):
        raise typer.BadParameter("--clear takes no --uid or --gid", param_hint="--clear")
    if gid is not None and uid is None:
        raise typer.BadParameter("--gid needs --uid", param_hint="--gid")
    with make_client() as c:
        if clear:
            out = c.clear_unix_identity(name)
        elif uid is not None:
            out = c.set_unix_identity(name, UnixIdentityIn(uid=uid, gid=gid))
        else:
            out = c.unix_identity(name)
    if as_json:
        return print_json(out)
    print(f"user {out.user}: jobs run as uid {out.uid}, gid {out.gid} ({out.source})")


def _password(prompt: bool) -> str | None:
    if os.environ.get("CORRAL_PASSWORD"):
        return os.environ["CORRAL_PASSWORD"]
    return getpass.getpass("password: ") if prompt else None


@users_app.command("create")
def users_create(
    name: str,
    role: Annotated[str, typer.Option(help="admin, tenant-admin, member or viewer.")] = "member",
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: yours).")] = None,
    password: Annotated[
        bool, typer.Option("--password", help="Set a password for web login (asked, or from CORRAL_PASSWORD).")
    ] = False,
    as_json: JSON = False,
) -> None:
    """Create a user."""
    with make_client() as c:
        u = c.create_user(UserIn(name=name, role=role, tenant=tenant, password=_password(password)))
    print_json(u) if as_json else print(f"user {u.name} ({u.role}) created in {u.tenant}")


@users_app.command("set")
def users_set(
    name: str,
    role: Annotated[str | None, typer.Option(help="New role.")] = None,
    password: Annotated[
        bool, typer.Option("--password", help="Set a new password (ends the user's other login sessions).")
    ] = False,
    disabled: Annotated[
        bool | None,
        typer.Option(
            "--disable/--enable", help="Disable the user (no login, its tokens stop working) or enable it again."
        ),
    ] = None,
) -> None:
    """Change a user's role or password, or disable it. The last admin keeps the role. Your own new password
    takes your current one (asked, or from CORRAL_CURRENT_PASSWORD)."""
    patch = UserPatch(role=role, password=_password(password), disabled=disabled)
    with make_client() as c:
        try:
            u = c.update_user(name, patch)
        except CorralAPIError as e:
            current = os.environ.get("CORRAL_CURRENT_PASSWORD")
            if e.field != "current_password" or not (current or sys.stdin.isatty()):
                raise  # the server's one line: what is missing or wrong
            current = current or getpass.getpass("current password: ")
            u = c.update_user(name, patch.model_copy(update={"current_password": current}))
    print(f"user {u.name}: {u.role}" + (" (disabled)" if u.disabled else ""))


@tokens_app.command("list")
def tokens_list(as_json: JSON = False) -> None:
    """List API tokens (never their secrets)."""
    with make_client() as c:
        items = c.tokens()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["ID", "NAME", "KIND", "USER", "CREATED", "EXPIRES", "REVOKED"],
        [
            (
                t.id,
                t.name,
                t.kind,
                t.user,
                short_time(t.created_at),
                short_time(t.expires_at),
                "yes" if t.revoked else "",
            )
            for t in items
        ],
    )


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Option(help="What the token is for.")] = "api",
    user: Annotated[str | None, typer.Option(help="Whose token (default: yours).")] = None,
    expires_in: Annotated[int | None, typer.Option(help="Seconds until it expires.")] = None,
    metrics: Annotated[
        bool, typer.Option("--metrics", help="A token that can only scrape /metrics (for Prometheus; admins).")
    ] = False,
    as_json: JSON = False,
) -> None:
    """Create an API token; prints the secret once."""
    with make_client() as c:
        t = c.create_token(TokenIn(name=name, user=user, expires_in_s=expires_in, metrics=metrics))
    print_json(t) if as_json else print(t.token)


@tokens_app.command("revoke")
def tokens_revoke(token_id: int) -> None:
    """Revoke a token at once."""
    with make_client() as c:
        c.revoke_token(token_id)
    print(f"token {token_id} revoked")


def login(
    username: str,
    url: Annotated[str | None, typer.Option(help="Server URL [env CORRAL_URL].")] = None,
    ca_fingerprint: Annotated[
        str | None,
        typer.Option(
            "--ca-fingerprint",
            help="SHA-256 of the cluster CA (sha256:..., printed by `corral up`): trust an "
            "https:// server whose CA the CLI does not know yet.",
        ),
    ] = None,
) -> None:
    """Log in with a password; saves the session token (and the server's CA) in the CLI's config."""
    from corral.cli.config import check_urls
    from corral.cli.identity import login_ca

    target = url or os.environ.get("CORRAL_URL")
    if target is not None:  # one server's URL, or several replicas' (comma-separated): each checked
        check_urls(target, "--url" if url else "CORRAL_URL")
    if target is None:
        try:
            target, _ = resolve_target(token="unused")
        except Exception:  # no config yet: the default URL
            target = "http://127.0.0.1:8600"
    ca_pem, verify = login_ca(target, ca_fingerprint)
    with CorralClient(target, "", verify=verify) as c:
        t = c.login(username, _password(True) or "")
    path = cli_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": target, "token": t.token} | ({"ca": ca_pem} if ca_pem else {}), f, indent=2)
    print(f"logged in as {username}; token saved in {path} (expires {short_time(t.expires_at)})")


def whoami(as_json: JSON = False) -> None:
    """Who the CLI's token belongs to."""
    with make_client() as c:
        me = c.whoami()
    print_json(me) if as_json else print(f"{me.user} ({me.role}) in tenant {me.tenant}")


@tenants_app.callback()
def _tenants(ctx: typer.Context, as_json: JSON = False) -> None:
    if ctx.invoked_subcommand is None:
        tenants_list(as_json)


@users_app.callback()
def _users(ctx: typer.Context, as_json: JSON = False) -> None:
    if ctx.invoked_subcommand is None:
        users_list(as_json)


@tokens_app.callback()
def _tokens(ctx: typer.Context, as_json: JSON = False) -> None:
    if ctx.invoked_subcommand is None:
        tokens_list(as_json)
