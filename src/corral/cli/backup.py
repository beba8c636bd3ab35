"""`corral backup DEST` and `corral restore SRC`, on the server host, with the settings `corral server` reads."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.run import DataDir, DbUrl


def backup(
    dest: Annotated[
        Path,
        typer.Argument(
            metavar="DEST",
            help="A new (or empty) directory, or a new file ending in .tar.gz, for the backup.",
            show_default=False,
        ),
    ],
    data_dir: DataDir = None,
    database_url: DbUrl = None,
) -> None:
    """Back up the database and the data dir's CA, secrets key, tokens and job logs; safe while Corral runs."""
    from corral.server.backup import take_backup
    from corral.server.settings import build_settings

    os.umask(0o077)
    settings = build_settings(data_dir=data_dir, database_url=database_url)
    started = time.monotonic()
    m = take_backup(
        dest.expanduser().absolute(),
        settings.effective_database_url,
        settings.data_dir,
        settings.effective_secrets_key_file,
        datetime.now(UTC),
    )
    print(
        f"backup of the {m.database} database (schema {m.schema_revision}) and {len(m.files) - 1} data dir files, "
        f"{_mib(m.total_bytes)}, written to {dest} in {time.monotonic() - started:.1f} s",
        flush=True,
    )


def restore(
    src: Annotated[
        Path,
        typer.Argument(
            metavar="SRC", help="A backup made by `corral backup`: its directory or .tar.gz.", show_default=False
        ),
    ],
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a cluster CA and secrets key the data dir already holds.")
    ] = False,
) -> None:
    """Restore a backup into a fresh install (an empty database, a data dir without a CA or secrets key), then
    migrate it to this Corral's schema; start `corral server` afterwards."""
    from corral.server.backup import restore_backup
    from corral.server.settings import build_settings

    os.umask(0o077)
    settings = build_settings(data_dir=data_dir, database_url=database_url)
    started = time.monotonic()
    m, revision = restore_backup(
        src.expanduser().absolute(),
        settings.effective_database_url,
        settings.data_dir,
        settings.effective_secrets_key_file,
        force,
    )
    migrated = f", migrated to {revision}" if revision != m.schema_revision else ""
    print(
        f"restored the backup of {m.created_at} (Corral {m.corral_version}, schema {m.schema_revision}{migrated}) "
        f"into {settings.data_dir} in {time.monotonic() - started:.1f} s; start `corral server` (or `corral up`)",
        flush=True,
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
