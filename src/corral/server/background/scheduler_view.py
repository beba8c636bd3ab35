"""What the scheduler tells people, handed from the process that schedules to the one that answers them.

A server of several processes (CORRAL_WORKERS, server/workers.py) runs the leader's loops (the scheduler's passes,
the alert rounds, schedules, services, cloud pools) in a process of their own, so that a pass of 0.3 s over 10,000
pending jobs never holds the interpreter that answers people's reads (bench/api_load.py). That process writes, after
each pass that changed it, why each pending job waits (its reason and code), its queue position and ETA, and the
recent submit-to-placement latencies to one file in the data dir; the people's process reads it again when it
changed (a stat every WAKE_EVERY_S). The file is replaced whole (written aside, then renamed): a reader sees the old
view or the new one, never half of one.

marshal: the fastest encoding of dicts of ints and strings CPython has (10,000 jobs: a few ms), and both ends are
this server's own processes, of the same interpreter, in its private data dir; what does not read as a view is
ignored (and logged), never half applied.
"""

from __future__ import annotations

import logging
import marshal
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("corral.scheduler")
VERSION = 2
VIEW_NAME = "scheduler-view"


@dataclass(frozen=True, slots=True)
class SchedulerView:
    reasons: dict[int, str] = field(default_factory=dict)  # job id -> why it waits (pending_reason)
    codes: dict[int, str] = field(default_factory=dict)  # job id -> its stable code (pending_code)
    info: dict[int, tuple[int, datetime | None]] = field(default_factory=dict)  # job id -> (position, ETA)
    latencies_s: tuple[float, ...] = ()  # recent submit -> placement latencies
    # what the leader's other loops know that people read: the notifiers' status (`notifiers`, a list of dicts),
    # each cloud pool's demand (`demand`, pool -> [jobs, GPUs])
    extra: dict[str, Any] = field(default_factory=dict)


def write_view(
    path: Path,
    reasons: Mapping[int, str],
    codes: Mapping[int, str],
    info: Mapping[int, tuple[int, datetime | None]],
    latencies_s: Sequence[float],
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Replace the view at `path` (atomically: a reader sees the old one or this one)."""
    data = marshal.dumps(
        (
            VERSION,
            dict(reasons),
            dict(codes),
            {k: (pos, None if eta is None else eta.timestamp()) for k, (pos, eta) in info.items()},
            [float(x) for x in latencies_s],
            dict(extra or {}),
        )
    )
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    with open(aside, "wb") as f:
        f.write(data)
    os.replace(aside, path)


MAX_PID = 1 << 22  # Linux's largest pid_max


def view_path(data_dir: Path, starter_pid: int) -> Path:
    """The view of the server process `starter_pid` on this host: `scheduler-view.HOST.PID` in the data dir.
    Several servers may share one data dir (replicas on one machine; on several, over shared storage): each has
    its own view, and each sweeps only its own host's leftovers (sweep_views), where a pid says whether its
    writer still runs."""
    return data_dir / f"{VIEW_NAME}.{host_tag()}.{starter_pid}"


def host_tag(hostname: str | None = None) -> str:
    """This host's name (or `hostname`) as a file name may hold it: its letters, digits, `-` and `_` (others as
    `_`, at most 64), then a hash of the whole name, so that two hosts whose names read alike there (`gpu.01`,
    `gpu_01`) never share a view or sweep each other's."""
    import hashlib
    import socket

    full = socket.gethostname() if hostname is None else hostname
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in full)
    return f"{name[:64]}-{hashlib.sha256(full.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def sweep_views(data_dir: Path) -> list[Path]:
    """Remove what this host's dead writers left in `data_dir`: the view of a server process that no longer runs,
    and a copy aside (`.VIEW.PID`) whose writer no longer runs (killed between its write and its rename; a loops'
    process that stopped making progress exits at once, os._exit). Other hosts' files are never touched (their
    pids mean nothing here). Answers what it removed; what it cannot read or remove is logged, never raised (a
    server must start whatever lies in its data dir)."""
    prefix = f"{VIEW_NAME}.{host_tag()}."
    removed: list[Path] = []
    try:
        names = os.listdir(data_dir)
    except OSError as e:
        log.warning("cannot list %s for old scheduler views: %s", data_dir, e)
        return removed
    for name in names:
        aside = name.startswith("." + prefix)
        if not aside and not name.startswith(prefix):
            continue
        pids = name[len(prefix) + aside :].split(".")
        if len(pids) != (2 if aside else 1) or not all(p.isascii() and p.isdigit() and int(p) < MAX_PID for p in pids):
            continue
        if _runs(int(pids[-1])):  # a view's server, or an aside's writer
            continue
        path = data_dir / name
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
                removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            log.warning("cannot remove the old scheduler view %s: %s", path, e)
    return removed


def _runs(pid: int) -> bool:
    if pid in (0, os.getpid()):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process: running; no such pid: kept, never guessed
        return True
    return True


def read_view(path: Path) -> SchedulerView | None:
    """The view at `path`; None when there is none, or what is there is not a view (logged)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        version, reasons, codes, info, latencies, extra = marshal.loads(data)
        if version != VERSION or not all(isinstance(x, dict) for x in (reasons, codes, info, extra)):
            raise ValueError(f"not a scheduler view of version {VERSION}")
        if not all(type(k) is int and type(v) is str for d in (reasons, codes) for k, v in d.items()):
            raise ValueError("a reason or code that is not an id and a text")
        at = {
            int(k): (int(pos), None if eta is None else datetime.fromtimestamp(float(eta), UTC))
            for k, (pos, eta) in info.items()
        }
        return SchedulerView(reasons, codes, at, tuple(float(x) for x in latencies), extra)
    except (EOFError, ValueError, TypeError, OverflowError, OSError) as e:
        log.warning("the scheduler's view %s could not be read: %s", path, e)
        return None


class ViewFollower:
    """The people's end: `changed()` gives the view when the file changed since the last call (else None)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None

    def changed(self) -> SchedulerView | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._seen:
            return None
        self._seen = key  # one that does not read is logged once, not every look
        return read_view(self.path)
