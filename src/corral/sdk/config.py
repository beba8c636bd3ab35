"""Where the CLI's saved server URL and token live (written by `corral up`, read by the CLI)."""

from __future__ import annotations

import os
from pathlib import Path


def cli_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "corral" / "config.json"
