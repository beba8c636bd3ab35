"""The agent's data staging (issue 19): copies a job's input into the node's content-addressed cache before its
GPUs are taken, lays it out in the job's stage dir at launch, and ships the stage dir's output after the job ends.
The server decides when (each sync lists the orders); this engine does the copying on worker threads.

Layout:
    <cache_dir>/        0700 the agent: objects/<sha256> (root-owned 0444), index.json (source -> sha256, last
                        use), manifests/<job>.json (a job's staged input), out/<job>.json (a stage-out's result)
    <stage_root>/       0711 root when jobs run as other users (traverse, not list), else 0700
        <job>/          0700 the job's identity: CORRAL_STAGE_DIR

Everything a job or a tenant wrote (the stage dir, the shared storage) is walked with dir fds and O_NOFOLLOW: a
symlink planted there is never followed by the root agent. Credentials are passed to boto3 explicitly and never
appear in a message.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib
import json
import logging
import os
import posixpath
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from corral.api.staging import SharedRootWire, StageOrder, StageReport, StageState
from corral.core.errors import CorralError
from corral.core.staging import GIB, format_bytes, format_progress, format_size, is_s3, split_s3
from corral.core.unix_identity import JobIdentity
from corral.executors.jobhome import remove_tree

log = logging.getLogger("corral.agent.staging")
T = TypeVar("T")

STAGE_DIRS = "stage"  # under the executor's work root
CHUNK_BYTES = 1 << 20
RETRIES = 3  # transient S3 errors (connection, 5xx): retried this many times
RETRY_BACKOFF_S = 0.3
MAX_MESSAGE = 1000
PRIVATE_DIR_MODE = 0o700
SHARED_ROOT_MODE = 0o711
CACHE_OBJECT_MODE = 0o444
COPY_MODE = 0o644
SUBDIR_MODE = 0o755
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs us
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NO_BOTO3 = "boto3 is not installed on this node (pip install corral[aws])"


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


# ---- pure helpers ------------------------------------------------------------------------------------------------
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


# ---- file-system helpers (never following a link) ----------------------------------------------------------------
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


# ---- S3 ----------------------------------------------------------------------------------------------------------
def make_s3_client(order: StageOrder) -> Any:
    """A boto3 S3 client with the order's credentials only (never the agent's own), retries left to us."""
    if order.s3 is None:
        raise StageFailed("no S3 credentials: give --stage-secret")
    try:
        boto3 = importlib.import_module("boto3")
        config = importlib.import_module("botocore.config")
    except ImportError as e:
        raise StageFailed(NO_BOTO3) from e
    return boto3.client(
        "s3",
        endpoint_url=order.s3.endpoint,
        region_name=order.s3.region or "us-east-1",
        aws_access_key_id=order.s3.access_key_id,
        aws_secret_access_key=order.s3.secret_access_key,
        aws_session_token=None,
        config=config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=60
        ),
    )


def compute_s3_message(e: Exception, where: str) -> str:
    """A boto3 error as a message naming `where` (botocore's own texts hold no credentials)."""
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return f"{where}: {e}"
    error = response.get("Error", {})
    code = str(error.get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
        return f"access denied to {where}"
    if code in ("NoSuchKey", "404", "NotFound"):
        return f"no object {where}"
    if code == "NoSuchBucket":
        return f"no bucket {where}"
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"S3 refused the credentials for {where} ({code})"
    return f"{where}: {code} {error.get('Message', '')}".strip()


def is_transient(e: Exception) -> bool:
    try:
        exc = importlib.import_module("botocore.exceptions")
    except ImportError:
        return False
    kinds = (exc.ConnectionError, exc.HTTPClientError, exc.ResponseStreamingError, exc.IncompleteReadError)
    if isinstance(e, kinds):
        return True
    if isinstance(e, exc.ClientError):
        return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)) >= 500
    return False


def call_s3(fn: Callable[[], T], where: str, cancel: threading.Event) -> T:
    """fn() retried on transient errors with a short backoff; other S3 errors become StageFailed naming `where`."""
    for attempt in range(RETRIES + 1):
        try:
            return fn()
        except (StageFailed, StageCancelled):
            raise
        except Exception as e:  # botocore's timeouts are OSErrors too: is_transient tells them from local errors
            if attempt == RETRIES or not is_transient(e):
                if type(e).__module__.startswith(("botocore", "boto3", "s3transfer", "urllib3")):
                    raise StageFailed(compute_s3_message(e, where)) from None
                raise
            if cancel.wait(RETRY_BACKOFF_S * 2**attempt):
                raise StageCancelled from None
    raise AssertionError("unreachable")


class CountingReader:
    """A file read by an upload: counts bytes into the task, stops when the order is withdrawn."""

    def __init__(self, fd: int, progress: Callable[[int], None], cancel: threading.Event) -> None:
        self._file = os.fdopen(fd, "rb")
        self._progress = progress
        self._cancel = cancel

    def read(self, n: int = -1) -> bytes:
        if self._cancel.is_set():
            raise StageCancelled
        data = self._file.read(n)
        self._progress(len(data))
        return data

    def close(self) -> None:
        self._file.close()


class StageEngine:
    """Stages the orders the server lists for this node, on at most `workers` threads. Thread-safe."""

    def __init__(
        self, cache_dir: Path, stage_root: Path, cache_max_bytes: int, *, shared_dirs: bool, workers: int = 2
    ) -> None:
        self.cache_dir = cache_dir
        self.stage_root = stage_root
        self.cache_max_bytes = cache_max_bytes
        self.objects = cache_dir / "objects"
        self.manifests = cache_dir / "manifests"
        self.results = cache_dir / "out"
        self.tmp = cache_dir / "tmp"
        cache_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        for d in (cache_dir, self.objects, self.manifests, self.results, self.tmp):
            d.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
            os.chmod(d, PRIVATE_DIR_MODE)
        shutil.rmtree(self.tmp, ignore_errors=True)  # partial downloads of a previous agent
        self.tmp.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
        stage_root.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        os.chmod(stage_root, SHARED_ROOT_MODE if shared_dirs else PRIVATE_DIR_MODE)
        index = load_json(cache_dir / "index.json") or {}
        self._sources: dict[str, str] = dict(index.get("sources", {}))
        self._used: dict[str, int] = dict(index.get("used", {}))
        self._lock = threading.Lock()
        self._in: dict[int, StageTask] = {}
        self._out: dict[int, StageTask] = {}
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="corral-stage")

    # ---- the agent's side ----------------------------------------------------------------------------------------
    def set_orders(self, stage_in: list[StageOrder], stage_out: list[StageOrder]) -> None:
        """The server's complete lists: new orders start, withdrawn ones are cancelled, the others go on."""
        with self._lock:
            if self._closed:
                return
            self._sync_orders(self._in, stage_in, outward=False)
            self._sync_orders(self._out, stage_out, outward=True)

    def reports(self) -> tuple[dict[str, StageReport], dict[str, StageReport]]:
        with self._lock:
            return (
                {str(j): t.report() for j, t in self._in.items()},
                {str(j): t.report() for j, t in self._out.items()},
            )

    def materialize(self, job_id: int, identity: JobIdentity | None, staged_in: bool) -> Path:
        """A fresh stage dir for the job holding its staged input, owned by `identity`. Raises StageMissing."""
        files: list[tuple[tuple[str, ...], str]] = []
        if staged_in:
            manifest = load_json(self.manifests / f"{job_id}.json")
            if not isinstance(manifest, dict):
                raise StageMissing(f"the staged input of job {job_id} is not on this node (its agent lost it)")
            for path, sha, _size in manifest["files"]:
                parts = compute_parts(path)
                if not parts or not (self.objects / sha).is_file():
                    raise StageMissing(f"the staged input of job {job_id} is not whole on this node ({path})")
                files.append((parts, sha))
        top = self.stage_root / str(job_id)
        remove_tree(top)
        top.mkdir(mode=PRIVATE_DIR_MODE)
        os.chmod(top, PRIVATE_DIR_MODE)
        link = os.geteuid() == 0 and self.objects.stat().st_dev == self.stage_root.stat().st_dev
        dirs = [top]
        for parts, sha in files:
            parent = top
            for name in parts[:-1]:
                parent = parent / name
                if not parent.is_dir():
                    parent.mkdir(mode=SUBDIR_MODE)
                    dirs.append(parent)
            self._place(self.objects / sha, parent / parts[-1], link, identity)
        if identity is not None:
            for d in reversed(dirs):
                os.chown(d, identity.uid, identity.gid, follow_symlinks=False)
        os.chmod(top, PRIVATE_DIR_MODE)
        return top

    def discard(self, job_id: int) -> None:
        remove_tree(self.stage_root / str(job_id))
        (self.manifests / f"{job_id}.json").unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for task in (*self._in.values(), *self._out.values()):
                self._withdraw(task)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- orders --------------------------------------------------------------------------------------------------
    def _sync_orders(self, tasks: dict[int, StageTask], orders: list[StageOrder], outward: bool) -> None:
        wanted = {o.job_id: o for o in orders}
        for job_id, task in list(tasks.items()):
            order = wanted.get(job_id)
            if order is None or compute_order_key(order) != task.key:
                self._withdraw(task)
                del tasks[job_id]
                if outward:
                    (self.results / f"{job_id}.json").unlink(missing_ok=True)
        for job_id, order in wanted.items():
            if job_id not in tasks:
                tasks[job_id] = self._start(order, outward)

    def _start(self, order: StageOrder, outward: bool) -> StageTask:
        task = StageTask(outward, order, compute_order_key(order))
        if outward:
            self._restore_result(task)
        else:
            self._restore_manifest(task)
        if task.state == "running":
            task.future = self._pool.submit(self._work, task)
        return task

    def _withdraw(self, task: StageTask) -> None:
        task.cancel.set()
        if task.future is not None:
            task.future.cancel()

    def _restore_manifest(self, task: StageTask) -> None:
        """A manifest for these very items (an agent restarted after staging them) makes the order done."""
        manifest = load_json(self.manifests / f"{task.order.job_id}.json")
        if not isinstance(manifest, dict) or manifest.get("key_items") != json.loads(task.key)[1]:
            return
        files = manifest.get("files", [])
        if not all((self.objects / sha).is_file() for _p, sha, _s in files):
            return
        task.shas = {sha for _p, sha, _s in files}
        task.total_bytes = task.done_bytes = sum(size for _p, _sha, size in files)
        task.files = len(files)
        task.state = "done"
        task.message = manifest.get("message", "")

    def _restore_result(self, task: StageTask) -> None:
        stored = load_json(self.results / f"{task.order.job_id}.json")
        if isinstance(stored, dict) and stored.get("key") == task.key:
            report = StageReport.model_validate(stored["report"])
            task.state, task.message, task.files = report.state, report.message, report.files
            task.done_bytes, task.total_bytes = report.done_bytes, report.total_bytes

    def _work(self, task: StageTask) -> None:
        if task.cancel.is_set():
            return
        state: StageState = "done"
        try:
            message = self._stage_out(task) if task.outward else self._stage_in(task)
        except StageCancelled:
            return
        except StageFailed as e:
            state, message = "failed", str(e)
        except OSError as e:
            state, message = "failed", f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
        except Exception as e:
            log.exception("staging job %s failed unexpectedly", task.order.job_id)
            state, message = "failed", f"internal error: {type(e).__name__}: {e}"
        message = compute_redacted(message, task.order)
        direction = "output" if task.outward else "input"
        log.info("staging %s of job %s %s: %s", direction, task.order.job_id, state, message)
        with self._lock:
            if task.cancel.is_set():
                return
            task.state, task.message = state, message
            if task.outward:
                write_json(
                    self.results / f"{task.order.job_id}.json", {"key": task.key, "report": task.report().model_dump()}
                )
        if task.outward:
            remove_tree(self.stage_root / str(task.order.job_id))
            (self.manifests / f"{task.order.job_id}.json").unlink(missing_ok=True)

    def _progress(self, task: StageTask, n: int) -> None:
        with self._lock:
            task.done_bytes += n

    # ---- stage in ------------------------------------------------------------------------------------------------
    def _stage_in(self, task: StageTask) -> str:
        order = task.order
        planned: dict[str, InputFile] = {}
        for item in order.items:
            for f in self._list_input(item.source, item.target, task):
                planned[f.path] = f  # a later item wins the same path
        clash = compute_clashes(list(planned))
        if clash:
            raise StageFailed(clash)
        inputs = list(planned.values())
        with self._lock:
            task.total_bytes, task.files = sum(f.size for f in inputs), len(inputs)
        self._check_space(inputs)
        files: list[tuple[str, str, int]] = []
        for f in inputs:
            if task.cancel.is_set():
                raise StageCancelled
            sha = self._cache_hit(f.identity, task)
            if sha is not None:
                self._progress(task, f.size)
            else:
                sha = call_s3(functools.partial(self._store, f, task), f.where, task.cancel)
                self._remember(f.identity, sha, task)
            files.append((f.path, sha, f.size))
        total = sum(size for _p, _s, size in files)
        message = f"staged {compute_count(len(files))}, {format_bytes(total)}"
        with self._lock:
            if task.cancel.is_set():
                raise StageCancelled
            manifest = {"key_items": json.loads(task.key)[1], "files": files, "message": message}
            write_json(self.manifests / f"{order.job_id}.json", manifest)
            self._save_index()
        self._evict()
        return message

    def _list_input(self, source: str, target: str, task: StageTask) -> list[InputFile]:
        target_parts = compute_parts(target)
        if target_parts is None:
            raise StageFailed(f"{target!r} would leave the stage dir")
        if is_s3(source):
            return self._list_s3(source, target, target_parts, task)
        return self._list_shared(source, target, target_parts, task)

    def _list_s3(self, source: str, target: str, target_parts: tuple[str, ...], task: StageTask) -> list[InputFile]:
        try:
            bucket, key = split_s3(source)
        except CorralError as e:
            raise StageFailed(e.message) from None
        client = make_s3_client(task.order)
        endpoint = task.order.s3.endpoint if task.order.s3 is not None else None
        found: list[tuple[str, tuple[str, ...], int, str]] = []  # key, path parts, size, etag
        if key and not key.endswith("/"):
            head = call_s3(lambda: client.head_object(Bucket=bucket, Key=key), source, task.cancel)
            name = posixpath.basename(key)
            parts = (*target_parts, name) if not target or target.endswith("/") else target_parts
            if compute_parts(name) is None or not parts:
                raise StageFailed(f"the key of {source} would leave the stage dir")
            found.append((key, parts, int(head["ContentLength"]), str(head.get("ETag", ""))))
        else:
            for obj in call_s3(lambda: self._list_prefix(client, bucket, key), source, task.cancel):
                rel = compute_parts(obj["Key"][len(key) :])
                if not rel:
                    raise StageFailed(f"the key {obj['Key']!r} under {source} would leave the stage dir")
                found.append((obj["Key"], (*target_parts, *rel), int(obj["Size"]), str(obj.get("ETag", ""))))
            if not found:
                raise StageFailed(f"nothing under {source}")

        def reader(k: str, etag: str) -> Callable[[], Iterator[bytes]]:
            def read() -> Iterator[bytes]:
                match = {"IfMatch": etag} if etag else {}  # the content the index will name, or an error
                body = client.get_object(Bucket=bucket, Key=k, **match)["Body"]
                try:
                    for chunk in body.iter_chunks(CHUNK_BYTES):
                        if task.cancel.is_set():
                            raise StageCancelled
                        yield chunk
                finally:
                    body.close()

            return read

        return [
            InputFile(
                "/".join(parts),
                size,
                json.dumps(["s3", endpoint or "", bucket, k, etag, size]),
                reader(k, etag),
                f"s3://{bucket}/{k}",
            )
            for k, parts, size, etag in found
        ]

    @staticmethod
    def _list_prefix(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            objects.extend(o for o in page.get("Contents", []) if not o["Key"].endswith("/"))
        return objects

    def _list_shared(self, source: str, target: str, target_parts: tuple[str, ...], task: StageTask) -> list[InputFile]:
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

    def _check_space(self, inputs: list[InputFile]) -> None:
        with self._lock:
            needed = sum(f.size for f in inputs if self._sources.get(f.identity) is None)
        free = shutil.disk_usage(self.cache_dir).free
        if needed > free:
            raise StageFailed(f"needs {compute_gib(needed)}, {compute_gib(free)} free on this node")

    def _cache_hit(self, identity: str, task: StageTask) -> str | None:
        with self._lock:
            sha = self._sources.get(identity)
            if sha is None or not (self.objects / sha).is_file():
                return None
            task.shas.add(sha)
            self._used[sha] = time.time_ns()
            return sha

    def _remember(self, identity: str, sha: str, task: StageTask) -> None:
        with self._lock:
            self._sources[identity] = sha
            self._used[sha] = time.time_ns()
            task.shas.add(sha)

    def _store(self, f: InputFile, task: StageTask) -> str:
        """Copy one source into the cache (hashing it on the way); its sha256."""
        tmp = self.tmp / uuid.uuid4().hex
        digest = hashlib.sha256()
        written = 0
        try:
            with open(os.open(tmp, NEW_FILE_FLAGS, 0o600), "wb") as out:
                for chunk in f.read():
                    digest.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
                    self._progress(task, len(chunk))
                os.fchmod(out.fileno(), CACHE_OBJECT_MODE)
            sha = digest.hexdigest()
            with self._lock:
                task.shas.add(sha)  # kept from eviction from now on
                if (self.objects / sha).exists():
                    remove_quietly(tmp)
                else:
                    os.rename(tmp, self.objects / sha)
            return sha
        except BaseException:
            self._progress(task, -written)
            remove_quietly(tmp)
            raise

    def _save_index(self) -> None:
        write_json(self.cache_dir / "index.json", {"sources": self._sources, "used": self._used})

    def _evict(self) -> None:
        """Least recently used objects go until the cache is under its limit; an object a listed order's input
        or a job dir (a hard link) uses stays."""
        with self._lock:
            pinned = set().union(*(t.shas for t in self._in.values()))
            objects: list[tuple[int, str, int]] = []
            total = 0
            for entry in os.scandir(self.objects):
                st = entry.stat(follow_symlinks=False)
                total += st.st_size
                if entry.name not in pinned and st.st_nlink == 1:
                    objects.append((self._used.get(entry.name, st.st_mtime_ns), entry.name, st.st_size))
            if total <= self.cache_max_bytes:
                return
            for _used, sha, size in sorted(objects):
                (self.objects / sha).unlink(missing_ok=True)
                self._used.pop(sha, None)
                total -= size
                if total <= self.cache_max_bytes:
                    break
            self._sources = {k: v for k, v in self._sources.items() if (self.objects / v).exists()}
            self._save_index()

    def _place(self, obj: Path, dest: Path, link: bool, identity: JobIdentity | None) -> None:
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

    # ---- stage out -----------------------------------------------------------------------------------------------
    def _stage_out(self, task: StageTask) -> str:
        """Every item is tried; one failing makes the order failed (the message names it)."""
        order = task.order
        try:
            top = os.open(self.stage_root / str(order.job_id), DIR_FLAGS)
        except OSError:
            raise StageFailed(f"the stage dir of job {order.job_id} is not on this node") from None
        try:
            skipped: list[str] = []
            errors: list[str] = []
            planned: list[tuple[int, list[OutputFile], bool]] = []
            for i, item in enumerate(order.items):
                try:
                    files, is_dir = self._list_output(top, item.source, order, skipped)
                    planned.append((i, files, is_dir))
                except StageFailed as e:
                    errors.append(str(e))
            with self._lock:
                task.total_bytes = sum(f.size for _i, files, _d in planned for f in files)
                task.files = sum(len(files) for _i, files, _d in planned)
            sent_files, sent_bytes, targets = 0, 0, []
            for i, files, is_dir in planned:
                item = order.items[i]
                try:
                    for f in files:
                        self._upload(top, f, item.target, is_dir, task)
                        sent_files, sent_bytes = sent_files + 1, sent_bytes + f.size
                    targets.append(item.target)
                except StageFailed as e:
                    errors.append(f"{item.source or '.'} to {item.target}: {e}")
        finally:
            os.close(top)
        message = f"uploaded {compute_count(sent_files)}, {format_bytes(sent_bytes)}" + (
            f" to {', '.join(targets)}" if targets else ""
        )
        if skipped:
            message += f"; skipped {len(skipped)} links or unreadable or special files: {', '.join(skipped[:5])}"
        if errors:
            raise StageFailed("; ".join([*errors, message]))
        return message

    def _list_output(
        self, top: int, source: str, order: StageOrder, skipped: list[str]
    ) -> tuple[list[OutputFile], bool]:
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

    def _upload(self, top: int, f: OutputFile, target: str, is_dir: bool, task: StageTask) -> None:
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
            self._upload_s3(fd, f, target, is_dir, name, task)
        else:
            self._upload_shared(fd, f, target, is_dir, name, task)

    def _upload_s3(self, fd: int, f: OutputFile, target: str, is_dir: bool, name: str, task: StageTask) -> None:
        try:
            bucket, key = split_s3(target)
        except CorralError as e:
            os.close(fd)
            raise StageFailed(e.message) from None
        if is_dir:
            key = (key if not key or key.endswith("/") else key + "/") + "/".join(f.rel)
        elif not key or key.endswith("/"):
            key += name
        where = f"s3://{bucket}/{key}"
        try:
            client = make_s3_client(task.order)
            transfer = importlib.import_module("boto3.s3.transfer")
            config = transfer.TransferConfig(use_threads=False)

            def send() -> None:
                os.lseek(fd, 0, os.SEEK_SET)
                sent = 0

                def count(n: int) -> None:
                    nonlocal sent
                    sent += n
                    self._progress(task, n)

                reader = CountingReader(os.dup(fd), count, task.cancel)
                try:
                    client.upload_fileobj(reader, bucket, key, Config=config)
                except BaseException:
                    self._progress(task, -sent)
                    raise
                finally:
                    reader.close()

            call_s3(send, where, task.cancel)
        except ImportError:
            raise StageFailed(NO_BOTO3) from None
        finally:
            os.close(fd)

    def _upload_shared(self, fd: int, f: OutputFile, target: str, is_dir: bool, name: str, task: StageTask) -> None:
        """Written under a writable root: directories made (O_NOFOLLOW all the way), the file written to a temp
        name then renamed, and given the order's uid/gid when the agent is root."""
        order = task.order
        try:
            root, parts = self._resolve_target(target, order)
            if is_dir:
                parts = (*parts, *f.rel)
            elif target.endswith("/") or not parts or os.path.isdir(target):
                parts = (*parts, name)
            owner = (order.uid, order.gid if order.gid is not None else -1) if order.uid is not None else None
            if os.geteuid() != 0:
                owner = None
            dfd = self._make_dirs(root, parts[:-1], owner)
            try:
                self._write_file(fd, dfd, parts[-1], owner, task)
            finally:
                os.close(dfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StageFailed(f"{target} passes through a symlink or a file: not written") from None
            raise StageFailed(f"{target}: {e.strerror}") from None
        finally:
            os.close(fd)

    @staticmethod
    def _resolve_target(target: str, order: StageOrder) -> tuple[str, tuple[str, ...]]:
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
            raise StageFailed(f"{target} resolves outside the writable shared storage")
        return root, (*below, *tail_parts)

    @staticmethod
    def _make_dirs(root: str, parts: Sequence[str], owner: tuple[int, int] | None) -> int:
        fd = os.open(root, DIR_FLAGS)
        try:
            for name in parts:
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

    def _write_file(self, src: int, dfd: int, name: str, owner: tuple[int, int] | None, task: StageTask) -> None:
        tmp = f".{name}.{uuid.uuid4().hex[:12]}.corral-tmp"
        out = os.open(tmp, NEW_FILE_FLAGS, COPY_MODE, dir_fd=dfd)
        try:
            try:
                for chunk in read_fd(os.dup(src), task.cancel):
                    self._write_all(out, chunk)
                    self._progress(task, len(chunk))
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

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


__all__ = ["STAGE_DIRS", "StageEngine", "StageFailed", "StageMissing", "compute_clashes", "compute_parts"]
