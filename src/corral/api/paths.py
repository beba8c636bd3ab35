"""Default locations on disk shared by the server, the agent and the CLI (from the environment or home dir).

The data dir holds the database, logs, credentials and agent state; the CLI config file holds the server URL
and token that `corral up` writes and the CLI reads.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "corral"


def cli_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "corral" / "config.json"
