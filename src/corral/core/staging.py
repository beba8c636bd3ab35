"""Data staging (issue 19): a job's input brought to its node before its GPUs are taken, its output shipped back
after it ends. Pure: what a stage item is, how `SRC:DST` is read and checked, the shared storage a tenant may use,
and how progress reads. The agent does the copying (agent/staging/); the server decides when (its sync).

A stage-in item copies a remote SOURCE (`s3://bucket/key`, `s3://bucket/prefix/`, or a path on the server's
allowed shared storage) to a TARGET relative to the job's stage dir (CORRAL_STAGE_DIR). A stage-out item copies a
SOURCE relative to the stage dir (a file or a directory) to a remote TARGET. The job's own side never holds a
colon, so `SRC:DST` splits at the last colon for stage-in and at the first for stage-out.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.errors import ValidationError

S3_SCHEME = "s3://"
MAX_STAGE_ITEMS = 16  # per direction, per job
MAX_LOCATION_CHARS = 1024
MAX_SHARED_ROOTS = 32
TENANT_PLACEHOLDER = "{tenant}"
GIB = 1 << 30
MIB = 1 << 20
# S3's rules for bucket names (3-63 lower-case letters, digits, dots and hyphens; starting and ending alphanumeric)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Stage states: of a job's input (stage_state) and of its output (stage_out_state)
IN_STAGING = "staging"  # its node copies the input now; the job waits with its GPUs free
IN_STAGED = "staged"  # the input is on that node: the job is placed there only
OUT_PENDING = "pending"  # the job has output to ship once it ends
OUT_RUNNING = "running"
OUT_DONE = "done"
OUT_FAILED = "failed"
OUT_STATES = (OUT_PENDING, OUT_RUNNING, OUT_DONE, OUT_FAILED)
CODE_STAGING = "staging"  # pending_code of a job whose input is being staged


@dataclass(frozen=True, slots=True)
class StageItem:
    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.source}:{self.target}"


@dataclass(frozen=True, slots=True)
class StagingRules:
    """The server's staging settings: CORRAL_STAGE_PATHS (templates: parse_shared_roots) and the S3-compatible
    endpoints tenants may name (CORRAL_STAGE_S3_ENDPOINTS; AWS's own always)."""

    shared_paths: str = ""
    s3_endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SharedRoot:
    """A directory of the server's allowed shared storage (the same path on every node); `writable`: stage-out may
    write under it (a root given with `:ro` is for input only)."""

    path: str
    writable: bool = True


def is_s3(location: str) -> bool:
    return location.startswith(S3_SCHEME)


def split_s3(url: str, field: str = "stage") -> tuple[str, str]:
    """(bucket, key or prefix) of an `s3://bucket/key` URL; the key may be empty (the whole bucket) or end in `/`
    (every object under that prefix). Raises ValidationError naming `field`."""
    if not is_s3(url):
        raise ValidationError(field, f"{url!r} is not an s3:// URL")
    rest = url[len(S3_SCHEME) :]
    bucket, _, key = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValidationError(field, f"{bucket!r} is not a valid S3 bucket name (in {url})")
    if any(part in (".", "..") for part in key.split("/")[:-1]) or "//" in key:
        raise ValidationError(field, f"the key of {url} has an empty, . or .. part")
    return bucket, key


def check_relative(path: str, field: str) -> str:
    """A path inside the job's stage dir, normalised ("" or "." is the dir itself). No absolute path, no `..`."""
    _check_text(path, field)
    if path.startswith("/"):
        raise ValidationError(field, f"{path!r} must be relative to the job's stage dir (CORRAL_STAGE_DIR)")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValidationError(field, f"{path!r} must stay inside the job's stage dir (no ..)")
    norm = "/".join(parts)
    return norm + "/" if path.endswith("/") and norm else norm


def check_absolute(path: str, field: str) -> str:
    """A shared-storage path: absolute, no `..` (normalised lexically; the agent checks it again with links
    resolved)."""
    _check_text(path, field)
    if not path.startswith("/"):
        raise ValidationError(field, f"{path!r} must be an s3:// URL or an absolute path on shared storage")
    if ".." in path.split("/"):
        raise ValidationError(field, f"{path!r} must not contain ..")
    norm = posixpath.normpath(path)
    return norm + "/" if path.endswith("/") and norm != "/" else norm


def _check_text(path: str, field: str) -> None:
    if len(path) > MAX_LOCATION_CHARS:
        raise ValidationError(field, f"a path of at most {MAX_LOCATION_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValidationError(field, "a path without control characters")


def parse_stage_in(text: str, field: str = "stage_in") -> StageItem:
    """`SRC:DST`: SRC an s3:// URL or a shared path, DST relative to the stage dir (a SRC ending in `/` is a
    directory or prefix copied into DST)."""
    source, sep, target = text.rpartition(":")
    if not sep or not source:
        raise ValidationError(field, f"{text!r} is not SRC:DST (e.g. s3://bucket/data/:data)")
    source = source if is_s3(source) else check_absolute(source, field)
    if is_s3(source):
        split_s3(source, field)
    return StageItem(source, check_relative(target, field))


def parse_stage_out(text: str, field: str = "stage_out") -> StageItem:
    """`SRC:DST`: SRC relative to the stage dir (a file or a directory), DST an s3:// URL or a shared path."""
    source, sep, target = text.partition(":")
    if not sep or not target:
        raise ValidationError(field, f"{text!r} is not SRC:DST (e.g. results/:s3://bucket/out/)")
    if is_s3(target):
        split_s3(target, field)
    else:
        target = check_absolute(target, field)
    return StageItem(check_relative(source, field), target)


def parse_stage_items(texts: Sequence[str], field: str, outward: bool) -> tuple[StageItem, ...]:
    if len(texts) > MAX_STAGE_ITEMS:
        raise ValidationError(field, f"at most {MAX_STAGE_ITEMS} items")
    parse = parse_stage_out if outward else parse_stage_in
    return tuple(parse(t, field) for t in texts)


def parse_shared_roots(text: str, tenant: str) -> tuple[SharedRoot, ...]:
    """The server's CORRAL_STAGE_PATHS for one tenant: comma-separated absolute directories, `{tenant}` standing
    for the tenant's name, `:ro` after one for input only; e.g. `/srv/shared/{tenant},/srv/datasets:ro`."""
    roots: list[SharedRoot] = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        path, ro = (raw[:-3], True) if raw.endswith(":ro") else (raw, False)
        if TENANT_PLACEHOLDER in path and not tenant:
            continue  # a job of no tenant has no tenant directory
        path = path.replace(TENANT_PLACEHOLDER, tenant)
        roots.append(SharedRoot(check_absolute(path, "CORRAL_STAGE_PATHS").rstrip("/") or "/", not ro))
    return tuple(roots[:MAX_SHARED_ROOTS])


def find_root(path: str, roots: Sequence[SharedRoot], write: bool) -> SharedRoot | None:
    """The allowed root `path` lies under (lexically; writable ones only when `write`), else None."""
    for root in roots:
        if write and not root.writable:
            continue
        base = root.path.rstrip("/")
        if path.rstrip("/") == base or path.startswith(base + "/"):
            return root
    return None


def check_shared(item: StageItem, roots: Sequence[SharedRoot], outward: bool, field: str) -> None:
    """The shared-storage side of `item` lies under a root the job's tenant may use (for writing, when outward)."""
    location = item.target if outward else item.source
    if is_s3(location):
        return
    if find_root(location, roots, write=outward) is None:
        allowed = ", ".join(r.path + ("" if r.writable else " (read-only)") for r in roots) or "none"
        how = "writable " if outward else ""
        raise ValidationError(field, f"{location} is not under the {how}shared storage this tenant may use: {allowed}")


def format_size(n: int, unit: int) -> str:
    value = n / unit
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def format_bytes(n: int) -> str:
    """ "1.2 GiB", "340 MiB", "12 KiB", "7 bytes"."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (1024, "KiB")):
        if n >= unit:
            return f"{format_size(n, unit)} {name}"
    return f"{n} bytes"


def format_progress(done: int, total: int, verb: str = "staging input") -> str:
    """ "staging input: 3.1 of 12 GiB" (MiB below one GiB)."""
    unit, name = (GIB, "GiB") if total >= GIB else (MIB, "MiB")
    return f"{verb}: {format_size(min(done, total), unit)} of {format_size(total, unit)} {name}"
