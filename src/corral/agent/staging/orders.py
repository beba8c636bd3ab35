"""What the stage engine works with, and the pure rules over it: the errors a staging ends in, the files an order
lists (InputFile to stage in, OutputFile to ship out), the StageTask that follows one listed order through its
worker and reports its progress, and the `compute_*` helpers (paths that must not leave a dir, clashes, what makes
two orders the same, who may read a file, messages without credentials). Nothing here does I/O.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from corral.api.staging import StageOrder, StageReport, StageState
from corral.core.errors import CorralError
from corral.core.staging import GIB, format_progress, format_size

MAX_MESSAGE = 1000
Progress = Callable[[int], None]  # bytes done (negative: taken back), counted into a task under the engine's lock


class StageMissing(CorralError):
    """A job's staged input is not on this node (its manifest or cache objects were lost)."""

    code = "stage_missing"


class StageFailed(Exception):
    """A staging cannot go on; the message is for the job's owner and never holds credentials."""


class StageCancelled(Exception):
    """The order was withdrawn (or the engine closes)."""


@dataclass(frozen=True, slots=True)
class InputFile:
    """One file to stage in: its path in the stage dir, size, what identifies its content, and how to read it."""

    path: str
    size: int
    identity: str
    read: Callable[[], Iterator[bytes]]
    where: str  # the source, as messages name it
    # Before a copy in the node's cache serves this file: proof that the job's own credentials may read it (an S3
    # object listed under a prefix: listing and reading are separate permissions). None: listing it proved that.
    check: Callable[[], object] | None = None


@dataclass(frozen=True, slots=True)
class OutputFile:
    parts: tuple[str, ...]  # path from the stage dir
    rel: tuple[str, ...]  # path from the item's source (empty: the source is this file)
    size: int


@dataclass(eq=False)
class StageTask:
    """One listed order and how it goes (its fields change under the engine's lock)."""

    outward: bool
    order: StageOrder
    key: str
    cancel: threading.Event = field(default_factory=threading.Event)
    state: StageState = "running"
    done_bytes: int = 0
    total_bytes: int = 0
    files: int = 0
    message: str = ""
    future: Future[None] | None = None
    shas: set[str] = field(default_factory=set)  # cache objects its input uses (kept from eviction)

    def report(self) -> StageReport:
        message = self.message
        if self.state == "running" and self.total_bytes:
            message = format_progress(
                self.done_bytes, self.total_bytes, "staging output" if self.outward else "staging input"
            )
        return StageReport(
            state=self.state,
            done_bytes=min(max(self.done_bytes, 0), self.total_bytes) if self.total_bytes else max(self.done_bytes, 0),
            total_bytes=self.total_bytes,
            files=self.files,
            message=message[:MAX_MESSAGE],
        )


def compute_parts(path: str) -> tuple[str, ...] | None:
    """The parts of a path relative to a dir ("" is the dir itself; one trailing / allowed), or None when it could
    leave that dir or is ambiguous: absolute, `..`, `.` or empty parts."""
    if path.startswith("/"):
        return None
    path = path[:-1] if path.endswith("/") else path
    if not path:
        return ()
    parts = tuple(path.split("/"))
    return None if any(p in ("", ".", "..") for p in parts) else parts


def compute_order_key(order: StageOrder) -> str:
    """What makes an order the same one across syncs (not its credentials, which may be refreshed)."""
    items = [[i.source, i.target] for i in order.items]
    roots = [[r.path, r.writable] for r in order.roots]
    return json.dumps([order.attempt, items, roots, order.uid, order.gid])


def compute_clashes(paths: Sequence[str]) -> str | None:
    """The first path that is also the directory of another, or None."""
    files = set(paths)
    for p in paths:
        parts = p.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                return f"{'/'.join(parts[:i])} is both a file and the directory of {p}"
    return None


def compute_readable(st: os.stat_result, uid: int | None, gid: int | None) -> bool:
    """Whether the job's identity could read this file itself (a hard link to a file it may not read is skipped)."""
    if uid is None:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if gid is not None and st.st_gid == gid:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def compute_redacted(message: str, order: StageOrder) -> str:
    if order.s3 is not None:
        for secret in (order.s3.secret_access_key, order.s3.access_key_id):
            if secret:
                message = message.replace(secret, "***")
    return message[:MAX_MESSAGE]


def compute_count(files: int) -> str:
    return f"{files} file" if files == 1 else f"{files} files"


def compute_gib(n: int) -> str:
    return f"{format_size(n, GIB)} GiB"
