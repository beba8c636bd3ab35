"""Default locations on disk shared by the server, the agent and the CLI (from the environment or home dir).

The data dir holds the database, logs, credentials and agent state; the CLI config file holds the server URL
and token that `corral up` writes and the CLI reads.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing's, and pathlib only where a Path is made: the CLI's light path loads neither
if TYPE_CHECKING:
    from pathlib import Path


def default_data_dir() -> Path:
    from pathlib import Path

    return Path.home() / ".local" / "share" / "corral"


def cli_config_file() -> str:
    """The CLI config file's path (os.path: the light CLI path does not load pathlib, ~2.5 ms a call)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "corral", "config.json")


def cli_config_path() -> Path:
    from pathlib import Path

    return Path(cli_config_file())


def secure_data_dir(path: Path, skip: tuple[Path, ...] = ()) -> None:
    """Make `path` a private data dir: the dir 0700 and nothing under it readable or writable by group or others
    (fixes installs made before; `skip`: trees left as they are, e.g. jobs' own dirs). Symlinks are not followed."""
    from pathlib import Path

    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    skipped = {p.resolve() for p in skip}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if (Path(root) / d).resolve() not in skipped]
        for name in (*dirs, *files):
            _strip_group_other(Path(root) / name)


def _strip_group_other(p: Path) -> None:
    try:
        st = p.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o077)
    except FileNotFoundError:
        pass  # removed meanwhile
