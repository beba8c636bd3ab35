"""Node identity commands: `corral tokens join create|list|revoke` and `corral nodes revoke NODE`."""

from __future__ import annotations

import ssl
from typing import Annotated

import typer

from corral.api.schemas import JoinTokenIn
from corral.cli.config import make_client
from corral.cli.output import print_json, print_table, short_time

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

join_tokens_app = typer.Typer(
    help="Join tokens for new nodes: short-lived, limited uses, revocable (admins).", no_args_is_help=True
)


def parse_duration_s(text: str) -> int:
    """`90`, `90s`, `15m`, `1h`, `2d` -> seconds. Raises typer.BadParameter."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    factor = units.get(t[-1:], 0)
    number = t[:-1] if factor else t
    if not number.isdigit() or len(number) > 9:
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 15m, 1h or 2d", param_hint="--ttl")
    return int(number) * (factor or 1)


@join_tokens_app.command("create")
def create(
    ttl: Annotated[str, typer.Option("--ttl", help="How long it is valid: 90s, 15m, 1h, 2d (60 s to 30 d).")] = "1h",
    uses: Annotated[int, typer.Option("--uses", min=1, max=10_000, help="How many nodes may join with it.")] = 1,
    description: Annotated[str, typer.Option(help="What it is for.")] = "",
    as_json: JSON = False,
) -> None:
    """Make a join token; prints it once (it carries the CA's fingerprint). Keep it in a file: never on argv."""
    with make_client() as c:
        t = c.create_join_token(JoinTokenIn(ttl_s=parse_duration_s(ttl), uses=uses, description=description))
    print_json(t) if as_json else print(t.token)


@join_tokens_app.command("list")
def list_tokens(as_json: JSON = False) -> None:
    """Join tokens (never their secrets): uses, expiry, state."""
    with make_client() as c:
        items = c.join_tokens()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["ID", "STATE", "USES", "EXPIRES", "CREATED BY", "DESCRIPTION"],
        [
            (t.id, t.state, f"{t.uses}/{t.max_uses}", short_time(t.expires_at), t.created_by, t.description)
            for t in items
        ],
    )


@join_tokens_app.command("revoke")
def revoke(token_id: Annotated[int, typer.Argument(min=1, max=2**31)]) -> None:
    """Revoke a join token at once (nodes that already joined keep their certificates)."""
    with make_client() as c:
        c.revoke_join_token(token_id)
    print(f"join token {token_id} revoked")


def revoke_node(node: str) -> None:
    """Cut NODE off at once: its certificate is revoked, it is marked LOST and its jobs requeue (admins)."""
    with make_client() as c:
        r = c.revoke_node(node)
    print(f"node {r.node}: certificate(s) {', '.join(r.revoked_serials) or '(none live)'} revoked; jobs requeued")


def login_ca(url: str, fingerprint: str | None) -> tuple[str, ssl.SSLContext | bool]:
    """(CA PEM to save, what verifies `url`) for `corral login`. With a fingerprint, the server's CA is fetched
    and accepted only when it matches; without, the CA already saved (or CORRAL_CA_FILE, or the system's)."""
    from corral.api.tls import normalize_fingerprint
    from corral.cli.config import load_config, resolve_verify
    from corral.sdk.join import fetch_pinned_ca, trust_ssl_context

    if fingerprint is None or not url.startswith("https://"):
        if fingerprint is not None:
            raise typer.BadParameter("only an https:// server has a CA to pin", param_hint="--ca-fingerprint")
        verify = resolve_verify(url)
        return (load_config().get("ca", "") if isinstance(verify, ssl.SSLContext) else ""), verify
    try:
        pinned = normalize_fingerprint(fingerprint)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--ca-fingerprint") from e
    ca = fetch_pinned_ca(url, pinned, path="/api/v1/ca")
    return ca, trust_ssl_context(ca)
