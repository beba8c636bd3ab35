"""What a stage-out order ships: the files of a job's stage dir an item names, listed and then uploaded one by
one to S3 (through the s3 module) or to a writable root of the shared storage. Links the job planted and files its
user could not read itself are skipped and named; each file is re-opened without following links and re-checked
just before it is sent. A shared target must resolve (through its nearest existing parent) under a writable root;
dirs are made and the file written beneath that root with dir fds, and given the order's uid/gid when the agent is
root.
"""

from __future__ import annotations

import errno
import os
import stat

from corral.agent.staging.files import (
    READ_FLAGS,
    find_real_root,
    make_dirs,
    open_beneath,
    open_regular,
    walk_files,
    write_file,
)
from corral.agent.staging.orders import (
    OutputFile,
    Progress,
    StageFailed,
    StageTask,
    compute_parts,
    compute_readable,
)
from corral.agent.staging.s3 import upload_s3
from corral.api.staging import StageOrder
from corral.core.staging import is_s3


def list_output(top: int, source: str, order: StageOrder, skipped: list[str]) -> tuple[list[OutputFile], bool]:
    """The files `source` names under the stage dir `top`, and whether it is a dir; what is skipped goes to
    `skipped`."""
    parts = compute_parts(source)
    if parts is None:
        raise StageFailed(f"{source!r} would leave the stage dir")
    shown = source or "."
    try:
        fd = open_beneath(top, parts, READ_FLAGS) if parts else os.dup(top)
    except FileNotFoundError:
        raise StageFailed(f"{shown}: no such file or directory in the stage dir") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StageFailed(f"{shown} is (or passes through) a symlink: not uploaded") from None
        raise StageFailed(f"{shown}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if not compute_readable(st, order.uid, order.gid):
                raise StageFailed(f"{shown}: not readable by the job's user")
            return [OutputFile(parts, (), st.st_size)], False
        if not stat.S_ISDIR(st.st_mode):
            raise StageFailed(f"{shown} is not a file or a directory")
        files: list[OutputFile] = []
        for rel, s in walk_files(fd, skipped):
            if compute_readable(s, order.uid, order.gid):
                files.append(OutputFile(parts, rel, s.st_size))
            else:
                skipped.append("/".join(rel))
        return files, True
    finally:
        os.close(fd)


def upload(top: int, f: OutputFile, target: str, is_dir: bool, task: StageTask, progress: Progress) -> None:
    """One file of the stage dir to its remote target (re-opened without following links, and re-checked)."""
    where = "/".join((*f.parts, *f.rel))
    try:
        fd, st = open_regular(top, (*f.parts, *f.rel))
    except OSError as e:
        raise StageFailed(f"{where}: {e.strerror} (changed while uploading?)") from None
    if not compute_readable(st, task.order.uid, task.order.gid):
        os.close(fd)
        raise StageFailed(f"{where}: not readable by the job's user")
    name = f.parts[-1] if f.parts else ""
    if is_s3(target):
        upload_s3(fd, f, target, is_dir, name, task, progress)
    else:
        upload_shared(fd, f, target, is_dir, name, task, progress)


def upload_shared(
    fd: int, f: OutputFile, target: str, is_dir: bool, name: str, task: StageTask, progress: Progress
) -> None:
    """Written under a writable root: directories made (O_NOFOLLOW all the way), the file written to a temp
    name then renamed, and given the order's uid/gid when the agent is root."""
    order = task.order
    try:
        root, parts = resolve_target(target, order)
        if is_dir:
            parts = (*parts, *f.rel)
        elif target.endswith("/") or not parts or os.path.isdir(target):
            parts = (*parts, name)
        owner = (order.uid, order.gid if order.gid is not None else -1) if order.uid is not None else None
        if os.geteuid() != 0:
            owner = None
        dfd = make_dirs(root, parts[:-1], owner)
        try:
            write_file(fd, dfd, parts[-1], owner, task.cancel, progress)
        finally:
            os.close(dfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StageFailed(f"{target} passes through a symlink or a file: not written") from None
        raise StageFailed(f"{target}: {e.strerror}") from None
    finally:
        os.close(fd)


def resolve_target(target: str, order: StageOrder) -> tuple[str, tuple[str, ...]]:
    """The writable root a shared target lies under (its nearest existing parent's real path checked) and
    the target's parts below it."""
    if not target.startswith("/"):
        raise StageFailed(f"{target} is not an absolute path")
    existing, rest = target.rstrip("/") or "/", list[str]()
    while not os.path.lexists(existing):
        existing, tail = os.path.split(existing)
        rest.insert(0, tail)
    real = os.path.realpath(existing)
    root = find_real_root(real, order.roots, write=True)
    below = compute_parts(os.path.relpath(real, root)) if root is not None and real != root else ()
    tail_parts = compute_parts("/".join(rest))
    if root is None or below is None or tail_parts is None:
        missing = [r.path for r in order.roots if r.writable and target.startswith(r.path.rstrip("/") + "/")]
        if missing and not os.path.isdir(missing[0]):  # the admin has not made the tenant's dir on this storage
            raise StageFailed(f"{missing[0]} (the shared storage {target} lies under) does not exist on this node")
        raise StageFailed(f"{target} resolves outside the writable shared storage")
    return root, (*below, *tail_parts)
