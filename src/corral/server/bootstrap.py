"""First start: an admin user, its API token, the cluster CA and a first join token (listed, expiring), kept in
the data dir (0600)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from corral.api.paths import cli_config_path
from corral.core.tenancy import DEFAULT_TENANT
from corral.server.auth import hash_token, new_token
from corral.server.ca import CertificateAuthority
from corral.store.base import StateStore

ADMIN_TOKEN_FILE = "admin-token"
JOIN_TOKEN_FILE = "join-token"
FIRST_JOIN_TOKEN_TTL_S = 86400.0  # the convenience token of the first start: a day, ten nodes
FIRST_JOIN_TOKEN_USES = 10


@dataclass(frozen=True, slots=True)
class Credentials:
    admin_token: str
    join_token: str  # the join token written at first start ("" afterwards: make one with `corral tokens join create`)


def write_secret(path: Path, value: str) -> None:
    """Write `value` to `path` readable by the owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _ensure_token(store: StateStore, path: Path, kind: str, name: str, user_id: int | None) -> str:
    if path.exists():
        token = path.read_text().strip()
        if store.find_token(hash_token(token)) is not None:
            return token
    token = new_token(kind)
    store.create_token(hash_token(token), kind, name, user_id, datetime.now(UTC))
    write_secret(path, token)
    return token


def ensure_credentials(store: StateStore, data_dir: Path) -> Credentials:
    """Create the admin user and tokens on first start; reuse them afterwards. Idempotent."""
    from corral.server.services.identity import JoinTokenStore, create_local_join_token

    now = datetime.now(UTC)
    tenant = store.find_tenant(DEFAULT_TENANT) or store.create_tenant(DEFAULT_TENANT, now)
    admin_id = 1
    first_start = store.count_users() == 0
    if first_start:
        admin_id = store.create_user("admin", "admin", now, tenant_id=tenant.id).id
    admin = _ensure_token(store, data_dir / ADMIN_TOKEN_FILE, "user", "admin (first start)", admin_id)
    ca = CertificateAuthority.load_or_create(data_dir)
    join = ""
    if first_start:
        if not isinstance(store, JoinTokenStore):
            raise TypeError("the store keeps no join tokens")
        join = create_local_join_token(store, ca, FIRST_JOIN_TOKEN_TTL_S, FIRST_JOIN_TOKEN_USES)
        write_secret(data_dir / JOIN_TOKEN_FILE, join)
    return Credentials(admin_token=admin, join_token=join)


def write_cli_config(url: str, token: str, ca_pem: str = "") -> Path:
    """Point the `corral` CLI of this user at this server (mode 0600: it holds a token); `ca_pem`: the
    cluster CA, which the CLI and SDK verify an https:// server against."""
    path = cli_config_path()
    config = {"url": url, "token": token} | ({"ca": ca_pem} if ca_pem else {})
    write_secret(path, json.dumps(config, indent=2))
    return path
