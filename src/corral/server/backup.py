"""`corral backup` and `corral restore`: the database and the data dir's durable files, with a manifest.

A backup is a directory (or the same directory as a .tar.gz):

    manifest.json            corral version, schema revision, database kind, time, every file's size and sha256
    database.sqlite | database.pgdump
    files/ca/...             the cluster CA (agents' certificates chain to it)
    files/secrets.key        the key that seals tenant secrets (wherever CORRAL_SECRETS_KEY_FILE puts it)
    files/admin-token, files/join-token
    files/logs/...           the job logs agents shipped

The database is dumped first, the files are copied after it: logs only grow, so the copy holds at least what the
database knew of. Everything is written 0600 in 0700 folders; a restore gives each file back the mode it had.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from corral import __version__
from corral.core.errors import ValidationError
from corral.server.bootstrap import ADMIN_TOKEN_FILE, JOIN_TOKEN_FILE
from corral.server.ca import CA_DIR
from corral.store import dump as db

MANIFEST = "manifest.json"
FORMAT = 1
FILES = "files"
SECRETS_KEY = "secrets.key"  # files/secrets.key: the secrets key, restored to the target's key file
LOGS_DIR = "logs"
# What of the data dir is durable. Not: the SQLite file (dumped instead), agent/ and jobs/ (the local agent's own
# state and its jobs' working dirs), temporary files.
DURABLE = (CA_DIR, ADMIN_TOKEN_FILE, JOIN_TOKEN_FILE, LOGS_DIR)
TARBALL_SUFFIXES = (".tar.gz", ".tgz")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # relative to the backup's root, POSIX
    size: int
    sha256: str
    mode: int  # the permission bits the file had (restored with it)


@dataclass(frozen=True, slots=True)
class Manifest:
    corral_version: str
    schema_revision: str
    database: str  # sqlite | postgresql
    created_at: str  # ISO 8601, UTC
    files: tuple[FileEntry, ...]
    format: int = FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        d = asdict(self)
        d["files"] = [dict(asdict(f), mode=f"{f.mode:04o}") for f in self.files]
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def from_json(cls, raw: str, where: str) -> Manifest:
        try:
            d = json.loads(raw)
            files = tuple(
                FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"]), int(str(f["mode"]), 8)) for f in d["files"]
            )
            m = cls(
                str(d["corral_version"]),
                str(d["schema_revision"]),
                str(d["database"]),
                str(d["created_at"]),
                files,
                int(d["format"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValidationError(where, f"{MANIFEST} is not a Corral backup manifest ({e})") from e
        if m.format != FORMAT:
            raise ValidationError(where, f"backup format {m.format} is not one this Corral reads ({FORMAT})")
        for f in files:
            p = PurePosixPath(f.path)
            if p.is_absolute() or ".." in p.parts or not p.parts:
                raise ValidationError(where, f"{MANIFEST} names a path outside the backup: {f.path!r}")
        return m


# ---- taking a backup -------------------------------------------------------------------------------------------
def take_backup(dest: Path, database_url: str, data_dir: Path, secrets_key_file: Path, now: datetime) -> Manifest:
    """Dump the database, then copy the data dir's durable files, into `dest`: a new (or empty) directory, or a
    .tar.gz file that does not exist yet. Nothing is left at `dest` when it fails."""
    tarball = dest.name.endswith(TARBALL_SUFFIXES)
    _check_dest(dest, tarball)
    kind = db.database_kind(database_url)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        dump_name = db.DUMP_FILE[kind]
        revision = db.dump_database(database_url, staging / dump_name)
        entries = [_entry(staging, dump_name)]
        entries += _copy_data_dir(data_dir, secrets_key_file, staging)
        manifest = Manifest(__version__, revision, kind, now.isoformat(), tuple(entries))
        _write_private(staging / MANIFEST, manifest.to_json().encode())
        if tarball:
            _write_tarball(staging, dest)
        else:
            os.replace(staging, dest)  # replaces an empty directory too
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_dest(dest: Path, tarball: bool) -> None:
    if not dest.parent.is_dir():
        raise ValidationError("DEST", f"the folder {dest.parent} does not exist")
    if tarball and dest.exists():
        raise ValidationError("DEST", f"{dest} exists; give a new .tar.gz path (a backup never overwrites one)")
    if not tarball and dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValidationError(
            "DEST", f"{dest} exists and is not an empty directory; give a new directory or a .tar.gz path"
        )


def _durable_files(data_dir: Path) -> Iterator[Path]:
    for name in DURABLE:
        top = data_dir / name
        if top.is_file():
            yield top
        elif top.is_dir():
            yield from sorted(p for p in top.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))


def _copy_data_dir(data_dir: Path, secrets_key_file: Path, staging: Path) -> list[FileEntry]:
    entries = []
    sources = [(secrets_key_file, SECRETS_KEY)] if secrets_key_file.is_file() else []
    sources += [(p, p.relative_to(data_dir).as_posix()) for p in _durable_files(data_dir)]
    for src, rel in sources:
        name = f"{FILES}/{rel}"
        try:
            size, digest = _copy_hashing(src, staging / name)
        except FileNotFoundError:
            continue  # removed meanwhile (a replaced join token's temporary file)
        entries.append(FileEntry(name, size, digest, src.stat().st_mode & 0o777))
    return entries


def _copy_hashing(src: Path, dest: Path) -> tuple[int, str]:
    """Copy `src` as it is now (a log may still grow: what was read is what is kept), 0600; (bytes, sha256)."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    h, size = hashlib.sha256(), 0
    with src.open("rb") as f, os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _entry(root: Path, name: str) -> FileEntry:
    size, digest = _hash(root / name)
    return FileEntry(name, size, digest, 0o600)


def _hash(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)


def _write_tarball(staging: Path, dest: Path) -> None:
    # A new file of our own (O_EXCL, 0600, a name no one can plant beforehand): the folder may be shared.
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for p in sorted(staging.rglob("*")):
                tar.add(p, arcname=p.relative_to(staging).as_posix(), recursive=False)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


# ---- restoring -------------------------------------------------------------------------------------------------
@contextmanager
def open_backup(src: Path) -> Iterator[tuple[Path, Manifest]]:
    """The backup's root folder (a .tar.gz is unpacked into a private temporary one) and its manifest."""
    if not src.exists():
        raise ValidationError("SRC", f"{src} does not exist")
    if src.is_dir():
        yield src, _read_manifest(src)
        return
    with tempfile.TemporaryDirectory(prefix="corral-restore-") as tmp:
        try:
            with tarfile.open(src, "r:*") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise ValidationError("SRC", f"{src} is neither a backup directory nor a readable .tar.gz ({e})") from e
        yield Path(tmp), _read_manifest(Path(tmp))


def _read_manifest(root: Path) -> Manifest:
    try:
        raw = (root / MANIFEST).read_text()
    except OSError as e:
        raise ValidationError("SRC", f"no {MANIFEST} in {root} (is it a Corral backup?)") from e
    return Manifest.from_json(raw, "SRC")


def check_restorable(
    root: Path, m: Manifest, database_url: str, data_dir: Path, secrets_key_file: Path, force: bool
) -> None:
    """Every reason not to restore, before anything is written: kind, schema, target not fresh, damaged files."""
    kind = db.database_kind(database_url)
    if m.database != kind:
        raise ValidationError(
            "SRC",
            f"a {m.database} backup cannot be restored into {kind} (CORRAL_DATABASE_URL); restore it into "
            f"{m.database}, then move the data with your own tools",
        )
    if m.schema_revision not in db.known_revisions():
        raise ValidationError(
            "SRC",
            f"the backup's schema revision {m.schema_revision!r} is newer than this Corral "
            f"({__version__}) knows; restore it with Corral {m.corral_version} or newer",
        )
    if tables := db.load_tables(database_url):
        raise ValidationError(
            "CORRAL_DATABASE_URL",
            f"the target database is not empty ({len(tables)} tables: "
            f"{', '.join(tables[:3])}{', ...' if len(tables) > 3 else ''}); restore into a new, empty database",
        )
    if not force and (held := _held_credentials(data_dir, secrets_key_file)):
        raise ValidationError(
            "--force",
            f"the data dir {data_dir} already holds {' and '.join(held)}; restoring replaces them "
            "(agents joined to that CA and secrets sealed with that key stop working): pass --force to replace them",
        )
    verify_files(root, m)


def _held_credentials(data_dir: Path, secrets_key_file: Path) -> list[str]:
    held = [f"a cluster CA ({CA_DIR}/ca.key)"] if (data_dir / CA_DIR / "ca.key").exists() else []
    return held + ([f"a secrets key ({secrets_key_file})"] if secrets_key_file.exists() else [])


def verify_files(root: Path, m: Manifest) -> None:
    for f in m.files:
        path = root / f.path
        if not path.is_file():
            raise ValidationError("SRC", f"{f.path} is missing from the backup")
        size, digest = _hash(path)
        if (size, digest) != (f.size, f.sha256):
            raise ValidationError("SRC", f"{f.path} does not match its sha256 in {MANIFEST} (damaged or altered)")


def apply_restore(root: Path, m: Manifest, database_url: str, data_dir: Path, secrets_key_file: Path) -> str:
    """Load the database, put the files back with their modes, migrate to this Corral's head; the revision."""
    db.restore_database(database_url, root / db.DUMP_FILE[m.database])
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(data_dir, 0o700)
    for f in m.files:
        rel = f.path.removeprefix(f"{FILES}/")
        if rel == f.path:
            continue  # the database dump
        target = secrets_key_file if rel == SECRETS_KEY else data_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = target.with_name(f".{target.name}.restore-tmp")
        tmp.unlink(missing_ok=True)  # left by a restore that was interrupted
        _copy_hashing(root / f.path, tmp)
        os.chmod(tmp, f.mode & 0o700)  # the owner's bits only: the data dir is private
        os.replace(tmp, target)
    return db.migrate_to_head(database_url)


def restore_backup(
    src: Path, database_url: str, data_dir: Path, secrets_key_file: Path, force: bool = False
) -> tuple[Manifest, str]:
    """Check, then restore; returns the manifest and the schema revision the database was migrated to."""
    with open_backup(src) as (root, manifest):
        check_restorable(root, manifest, database_url, data_dir, secrets_key_file, force)
        return manifest, apply_restore(root, manifest, database_url, data_dir, secrets_key_file)
