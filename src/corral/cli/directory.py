"""`corral directory groups|map|unmap`: which LDAP / OpenID Connect groups give which tenant and role."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.api.schemas import GroupMappingIn
from corral.cli.config import make_client
from corral.cli.output import print_json, print_table

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

directory_app = typer.Typer(
    help="Directory login (LDAP, OpenID Connect): group -> tenant and role mappings.", no_args_is_help=True
)


@directory_app.command("groups")
def groups(as_json: JSON = False) -> None:
    """List the group mappings (admins)."""
    with make_client() as c:
        items = c.group_mappings()
    if as_json:
        return print_json(items)
    print_table(None, ["ID", "GROUP", "TENANT", "ROLE"], [(m.id, m.group, m.tenant, m.role) for m in items])


@directory_app.command("map")
def map_group(
    group: Annotated[str, typer.Argument(help="Group name (LDAP cn or DN, or an OIDC groups value).")],
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant its members belong to.")],
    role: Annotated[str, typer.Option("--role", help="admin, tenant-admin, member or viewer.")] = "member",
    as_json: JSON = False,
) -> None:
    """Map a directory group to a tenant and role (admins). Highest role wins; see docs/directory-login.md."""
    with make_client() as c:
        m = c.create_group_mapping(GroupMappingIn(group=group, tenant=tenant, role=role))
    print_json(m) if as_json else print(f"group {m.group} -> tenant {m.tenant} as {m.role} (mapping {m.id})")


@directory_app.command("unmap")
def unmap_group(mapping_id: Annotated[int, typer.Argument(help="Mapping id (see `corral directory groups`).")]) -> None:
    """Remove a mapping: its members lose access at their next login, unless another group maps them."""
    with make_client() as c:
        c.delete_group_mapping(mapping_id)
    print(f"mapping {mapping_id} removed")
