"""Symlink-safe file-system operations for the root agent. Everything a job or a tenant wrote (the stage dir, the
shared storage) is reached through dir fds, every step opened with O_NOFOLLOW, so a symlink planted there is never
followed: opening a path beneath a trusted dir, reading a regular file in chunks (a withdrawn order stops it), walking
a tree while naming what was skipped, making dirs and writing a file under a root (a temp name renamed into place),
placing a cache object in a job's dir, and the cache's own small JSON files (written atomically).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from corral.agent.staging.orders import Progress, StageCancelled, StageFailed
from corral.api.staging import SharedRootWire
from corral.core.unix_identity import JobIdentity

CHUNK_BYTES = 1 << 20
PRIVATE_DIR_MODE = 0o700
SHARED_ROOT_MODE = 0o711
CACHE_OBJECT_MODE = 0o444
COPY_MODE = 0o644
SUBDIR_MODE = 0o755
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs us
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def open_beneath(base: str | int, parts: Sequence[str], last_flags: int = DIR_FLAGS) -> int:
    """An fd of `parts` under `base` (a trusted real path, or a dir fd), every step opened with O_NOFOLLOW."""
    fd = os.open(base, DIR_FLAGS) if isinstance(base, str) else os.dup(base)
    try:
        for i, name in enumerate(parts):
            nxt = os.open(name, last_flags if i == len(parts) - 1 else DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_fd(fd: int, cancel: threading.Event) -> Iterator[bytes]:
    """The content of an open file, in chunks; closes it."""
    try:
        while chunk := os.read(fd, CHUNK_BYTES):
            if cancel.is_set():
                raise StageCancelled
            yield chunk
    finally:
        os.close(fd)


def open_regular(base: str | int, parts: Sequence[str]) -> tuple[int, os.stat_result]:
    fd = open_beneath(base, parts, READ_FLAGS)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise StageFailed(f"{'/'.join(parts)} is not a regular file")
    os.set_blocking(fd, True)
    return fd, st


def walk_files(fd: int, skipped: list[str]) -> Iterator[tuple[tuple[str, ...], os.stat_result]]:
    """Regular files under an open dir (paths relative to it); symlinks and other kinds are skipped and named."""
    for dirpath, dirs, files, dfd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        sub = tuple(p for p in dirpath.split("/") if p not in ("", "."))
        for name in dirs:
            if stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                skipped.append("/".join((*sub, name)))
        for name in files:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                yield (*sub, name), st
            else:
                skipped.append("/".join((*sub, name)))


def find_real_root(real: str, roots: Sequence[SharedRootWire], write: bool) -> str | None:
    """The real path of the root `real` (a resolved path) lies under, or None."""
    for root in roots:
        if write and not root.writable:
            continue
        base = os.path.realpath(root.path)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return base
    return None


WRITE_DIR = (stat.S_IWUSR | stat.S_IXUSR, stat.S_IWGRP | stat.S_IXGRP, stat.S_IWOTH | stat.S_IXOTH)
SEARCH_DIR = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def check_may(st: os.stat_result, owner: tuple[int, int] | None, bits: tuple[int, int, int], name: str) -> None:
    """Whether `owner` (the job's uid, gid) may do this in a directory itself, by its permission bits (the agent
    writes as root: a job must not write where its own user could not). None: the agent's own user writes."""
    if owner is None:
        return
    uid, gid = owner
    mask = bits[0] if st.st_uid == uid else bits[1] if gid >= 0 and st.st_gid == gid else bits[2]
    if st.st_mode & mask != mask:
        raise PermissionError(errno.EACCES, f"the job's user may not write where {name} goes")


def make_dirs(root: str, parts: Sequence[str], owner: tuple[int, int] | None) -> int:
    """An fd of `parts` under `root`, each missing dir made (and given `owner`) on the way, links never followed."""
    fd = os.open(root, DIR_FLAGS)
    try:
        for name in parts:
            exists = os.path.lexists(os.path.join(f"/proc/self/fd/{fd}", name))
            check_may(os.fstat(fd), owner, SEARCH_DIR if exists else WRITE_DIR, name)
            try:
                os.mkdir(name, SUBDIR_MODE, dir_fd=fd)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file(
    src: int, dfd: int, name: str, owner: tuple[int, int] | None, cancel: threading.Event, progress: Progress
) -> None:
    """The content of `src` as `name` in the dir `dfd`: written to a temp name, then renamed over it."""
    check_may(os.fstat(dfd), owner, WRITE_DIR, name)
    try:
        there = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        there = None
    if owner is not None and there is not None and there.st_uid != owner[0]:
        raise PermissionError(errno.EACCES, f"{name} exists and belongs to another user: not replaced")
    tmp = f".{name}.{uuid.uuid4().hex[:12]}.corral-tmp"
    out = os.open(tmp, NEW_FILE_FLAGS, COPY_MODE, dir_fd=dfd)
    try:
        try:
            for chunk in read_fd(os.dup(src), cancel):
                write_all(out, chunk)
                progress(len(chunk))
            os.fchmod(out, COPY_MODE)
            if owner is not None:
                os.fchown(out, *owner)
        finally:
            os.close(out)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def place_file(obj: Path, dest: Path, link: bool, identity: JobIdentity | None) -> None:
    """One staged file in a job's dir: a hard link to the root-owned 0444 cache object, else a 0644 copy."""
    if link:
        try:
            os.link(obj, dest, follow_symlinks=False)
            return
        except OSError:
            pass
    with open(obj, "rb") as src, open(os.open(dest, NEW_FILE_FLAGS, COPY_MODE), "wb") as out:
        shutil.copyfileobj(src, out, CHUNK_BYTES)
        os.fchmod(out.fileno(), COPY_MODE)
        if identity is not None:
            os.fchown(out.fileno(), identity.uid, identity.gid)


def remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write_json(path: Path, data: object) -> None:
    """Write atomically (a temp file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
