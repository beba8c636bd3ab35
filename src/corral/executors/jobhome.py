"""A job's own files and environment: its run dir (HOME and default workdir), checkpoints and log, owned by the
job's Unix identity, and the clean environment it starts with (never the agent's).

Layout when the executor switches users (the work root sits beside, never inside, the 0700 data dir):
    <work root>/                0711 root: jobs can reach their own dir by name but cannot list the others
        <job>.<attempt>/        0700 the job's uid: HOME (unless its account has one) and default workdir
        checkpoints/            0711 root
            <job id>/           0700 the job's uid: CORRAL_CHECKPOINT_DIR, kept across attempts
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

from corral.core.errors import ValidationError
from corral.core.unix_identity import JobIdentity
from corral.executors.base import LaunchSpec

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WORK_ROOT_MODE = 0o711  # traverse, not list
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
CHECKPOINTS = "checkpoints"


def find_unreachable_parent(path: Path) -> Path | None:
    """The first of `path` and its parents that other users may not traverse (no o+x), or None."""
    for p in (path, *path.parents):
        if not p.stat().st_mode & stat.S_IXOTH:
            return p
    return None


def prepare_work_root(root: Path, shared: bool) -> None:
    """Create the work root. `shared` (jobs run as other users): 0711, as are the parents it creates, and
    reachable by them, else ValidationError naming the directory in the way; otherwise 0700."""
    mode = WORK_ROOT_MODE if shared else PRIVATE_DIR_MODE
    for d in [*reversed(root.parents), root, root / CHECKPOINTS]:
        if not d.exists():  # one by one: mkdir(parents=True) would give the parents the umask's mode
            d.mkdir(mode=mode)
            os.chmod(d, mode)
    for d in (root, root / CHECKPOINTS):
        os.chmod(d, mode)
    if shared:
        blocked = find_unreachable_parent(root)
        if blocked is not None:
            raise ValidationError(
                "jobs_dir",
                f"{root} cannot be reached by the users jobs run as: {blocked} is "
                f"mode {stat.S_IMODE(blocked.stat().st_mode):04o}; set CORRAL_JOBS_DIR "
                "to a directory whose parents others may traverse",
            )


def prepare_owned_dir(path: Path, identity: JobIdentity | None, fresh: bool) -> None:
    """`path` as a 0700 directory of `identity` (None: of this process). A leftover that is not a directory
    of that identity (or any leftover, when `fresh`) is removed first: a job never inherits another's files."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        owner_ok = identity is None or (st.st_uid == identity.uid and st.st_gid == identity.gid)
        if fresh or not stat.S_ISDIR(st.st_mode) or not owner_ok:
            _remove(path)
    path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)  # a directory just made or checked (its root-owned parent keeps it so)
    if identity is not None:
        os.chown(path, identity.uid, identity.gid, follow_symlinks=False)


def prepare_log(path: Path, identity: JobIdentity | None) -> None:
    """Create (or keep) the job's log: 0600, owned by the job's identity, in a directory only the agent reads."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        if identity is not None:
            os.fchown(fd, identity.uid, identity.gid)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a job's dir; safe against symlinks a job left in it (shutil's fd-based rmtree)."""
    _remove(path)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def compute_home_and_user(uid: int, fallback_user: str, run_dir: Path) -> tuple[str, str]:
    """HOME and USER of a job running as `uid`: its account's when this node has one (shared homes, as
    Slurm does), else the job's run dir and the Corral user name."""
    try:
        account = pwd.getpwuid(uid)
    except KeyError:
        return str(run_dir), fallback_user
    home = account.pw_dir if os.path.isdir(account.pw_dir) else str(run_dir)
    return home, account.pw_name


def compute_child_env(spec: LaunchSpec, home: str, user: str) -> dict[str, str]:
    """The job's whole environment: a minimal base, the job's own env, then Corral's per-job variables
    (which the job's env cannot override). Nothing comes from the agent's environment."""
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": home, "USER": user, "LOGNAME": user}
    env.update(spec.env)
    env.update(
        {
            # An empty list hides every GPU: a job without GPUs must not see the node's GPUs.
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in spec.gpu_indices),
            "NVIDIA_VISIBLE_DEVICES": ",".join(spec.gpu_uuids) if spec.gpu_uuids else "void",
            "CORRAL_JOB_ID": spec.job_id,
        }
    )
    if spec.checkpoint_dir is not None:
        env["CORRAL_CHECKPOINT_DIR"] = str(spec.checkpoint_dir)
        # A spot interruption notice: the agent writes `CORRAL_NOTICE_S=<seconds left>` here before it signals
        # the job (`. "$CORRAL_NOTICE_FILE"` in a SIGTERM handler); absent until then.
        env["CORRAL_NOTICE_FILE"] = str(compute_notice_file(spec.checkpoint_dir))
    if spec.stage_dir is not None:  # its staged input is here, and what it leaves here is its output to ship
        env["CORRAL_STAGE_DIR"] = str(spec.stage_dir)
    return env


def compute_notice_file(checkpoint_dir: Path) -> Path:
    return checkpoint_dir / ".corral-notice"


def write_notice(checkpoint_dir: Path, seconds: float) -> None:
    """Write a notice's seconds to the job's CORRAL_NOTICE_FILE (readable by the job; written by the agent)."""
    path = compute_notice_file(checkpoint_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"CORRAL_NOTICE_S={max(int(seconds), 0)}\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
