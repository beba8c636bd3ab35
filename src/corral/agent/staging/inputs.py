"""What a stage-in order's items name, listed as InputFiles: an S3 object or prefix (through the s3 module), or a
file or a tree on the allowed shared storage. A shared source is resolved to its real path, which must lie under
one of the order's roots, then opened beneath that root without following links; a tree is walked with dir fds and
each of its files re-opened the same way when it is read. A file's identity (path, size, mtime, inode) is what the
cache knows it by.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator

from corral.agent.staging.files import READ_FLAGS, find_real_root, open_beneath, open_regular, read_fd, walk_files
from corral.agent.staging.orders import InputFile, StageFailed, StageTask, compute_parts, compute_readable
from corral.agent.staging.s3 import list_s3_input
from corral.core.staging import is_s3


def list_input(source: str, target: str, task: StageTask) -> list[InputFile]:
    target_parts = compute_parts(target)
    if target_parts is None:
        raise StageFailed(f"{target!r} would leave the stage dir")
    if is_s3(source):
        return list_s3_input(source, target, target_parts, task)
    return list_shared_input(source, target, target_parts, task)


def check_allowed(
    source: str,
    root: str,
    base: tuple[str, ...],
    found: list[tuple[tuple[str, ...], tuple[str, ...], os.stat_result]],
    task: StageTask,
) -> None:
    """The job's own user could reach and read every file itself (the agent reads as root): the directories from the
    root down to the source searchable, each file readable. Permission bits only (owner, group, others)."""
    uid, gid = task.order.uid, task.order.gid
    if uid is None:
        return
    a_file = len(found) == 1 and found[0][0] == ()
    dirs = base[:-1] if a_file else base
    for depth in range(len(dirs) + 1):
        path = os.path.join(root, *dirs[:depth])
        if not compute_searchable(os.stat(path), uid, gid):
            raise StageFailed(f"{source}: the job's user may not enter {path}")
    for rel, _, st in found:
        if not compute_readable(st, uid, gid):
            raise StageFailed(f"{'/'.join((source.rstrip('/'), *rel))} is not readable by the job's user")


def compute_searchable(st: os.stat_result, uid: int, gid: int | None) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if gid is not None and st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def list_shared_input(source: str, target: str, target_parts: tuple[str, ...], task: StageTask) -> list[InputFile]:
    real = os.path.realpath(source)
    root = find_real_root(real, task.order.roots, write=False)
    if not source.startswith("/") or root is None:
        raise StageFailed(f"{source} resolves outside the allowed shared storage")
    base = compute_parts(os.path.relpath(real, root)) if real != root else ()
    if base is None:
        raise StageFailed(f"{source} resolves outside the allowed shared storage")
    try:
        fd = open_beneath(root, base, READ_FLAGS)
    except FileNotFoundError:
        raise StageFailed(f"no such file or directory {source}") from None
    except OSError as e:
        raise StageFailed(f"{source} cannot be read safely ({e.strerror}): a link was swapped in?") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            name = base[-1] if base else ""
            parts = (*target_parts, name) if not target or target.endswith("/") else target_parts
            found: list[tuple[tuple[str, ...], tuple[str, ...], os.stat_result]] = [((), parts, st)]
        elif stat.S_ISDIR(st.st_mode):
            skipped: list[str] = []
            found = [(rel, (*target_parts, *rel), s) for rel, s in walk_files(fd, skipped)]
            if not found:
                raise StageFailed(f"nothing to stage under {source}")
        else:
            raise StageFailed(f"{source} is not a file or a directory")
    finally:
        os.close(fd)

    check_allowed(source, root, base, found, task)

    def reader(rel: tuple[str, ...]) -> Callable[[], Iterator[bytes]]:
        return lambda: read_fd(open_regular(root, (*base, *rel))[0], task.cancel)

    return [
        InputFile(
            "/".join(parts),
            s.st_size,
            json.dumps(["file", "/".join((real, *rel)), s.st_size, s.st_mtime_ns, s.st_ino]),
            reader(rel),
            "/".join((source.rstrip("/"), *rel)),
        )
        for rel, parts, s in found
    ]
