"""The StageEngine: the agent's side of data staging. Each sync hands it the server's complete lists of stage-in
and stage-out orders; new ones start on worker threads, withdrawn ones are cancelled, the rest go on, and their
reports go back with the next sync. A stage-in copies the items' files into the node's object cache and records
the job's manifest; `materialize` then lays that input out in a fresh stage dir owned by the job's identity when
the job launches. A stage-out ships the stage dir's output after the job ends, records its result (so a restarted
agent reports it again) and removes the stage dir.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corral.agent.staging.cache import ObjectCache
from corral.agent.staging.files import (
    DIR_FLAGS,
    PRIVATE_DIR_MODE,
    SHARED_ROOT_MODE,
    SUBDIR_MODE,
    load_json,
    place_file,
    write_json,
)
from corral.agent.staging.inputs import list_input
from corral.agent.staging.orders import (
    InputFile,
    OutputFile,
    StageCancelled,
    StageFailed,
    StageMissing,
    StageTask,
    compute_clashes,
    compute_count,
    compute_order_key,
    compute_parts,
    compute_redacted,
)
from corral.agent.staging.outputs import list_output, upload
from corral.agent.staging.s3 import call_s3
from corral.api.staging import StageOrder, StageReport, StageState
from corral.core.staging import format_bytes
from corral.core.unix_identity import JobIdentity
from corral.executors.jobhome import remove_tree

log = logging.getLogger("corral.agent.staging")

MANIFEST_KEEP_S = 7 * 86400  # a staged job's input is kept this long for its start at most

STAGE_DIRS = "stage"  # under the executor's work root


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
        self._lock = threading.Lock()
        self._cache = ObjectCache(cache_dir, cache_max_bytes, self._lock)
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
            place_file(self.objects / sha, parent / parts[-1], link, identity)
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
        if task.outward:
            # The result is stored before the stage dir goes (an agent that dies in between does not upload again)
            # and told after it went (whoever reads "done" finds the node's copy gone).
            with self._lock:
                if task.cancel.is_set():
                    return
                report = task.report().model_copy(update={"state": state, "message": message}).model_dump()
                write_json(self.results / f"{task.order.job_id}.json", {"key": task.key, "report": report})
            remove_tree(self.stage_root / str(task.order.job_id))
            (self.manifests / f"{task.order.job_id}.json").unlink(missing_ok=True)
        with self._lock:
            if task.cancel.is_set():
                return
            task.state, task.message = state, message

    def _progress(self, task: StageTask, n: int) -> None:
        with self._lock:
            task.done_bytes += n

    # ---- stage in ------------------------------------------------------------------------------------------------
    def _stage_in(self, task: StageTask) -> str:
        order = task.order
        planned: dict[str, InputFile] = {}
        for item in order.items:
            for f in list_input(item.source, item.target, task):
                planned[f.path] = f  # a later item wins the same path
        clash = compute_clashes(list(planned))
        if clash:
            raise StageFailed(clash)
        inputs = list(planned.values())
        with self._lock:
            task.total_bytes, task.files = sum(f.size for f in inputs), len(inputs)
        self._cache.check_space(inputs)
        progress = functools.partial(self._progress, task)
        files: list[tuple[str, str, int]] = []
        for f in inputs:
            if task.cancel.is_set():
                raise StageCancelled
            sha = self._cache.lookup(f.identity, task)
            if sha is not None and f.check is not None:
                call_s3(f.check, f.where, task.cancel)  # may this job read it? (the cache holds another's copy)
            if sha is not None:
                self._progress(task, f.size)
            else:
                sha = call_s3(functools.partial(self._cache.store, f, task, progress), f.where, task.cancel)
                self._cache.remember(f.identity, sha, task)
            files.append((f.path, sha, f.size))
        total = sum(size for _p, _s, size in files)
        message = f"staged {compute_count(len(files))}, {format_bytes(total)}"
        with self._lock:
            if task.cancel.is_set():
                raise StageCancelled
            manifest = {"key_items": json.loads(task.key)[1], "files": files, "message": message}
            write_json(self.manifests / f"{order.job_id}.json", manifest)
            self._cache.save_index()
        self._cache.evict(self._pinned)
        return message

    def _pinned(self) -> set[str]:
        """Objects that may not go (under the lock): a listed order's, and a staged job's that has not started yet
        (its manifest, kept for MANIFEST_KEEP_S: a job cancelled while staged does not pin the cache for ever)."""
        keep: set[str] = set().union(*(t.shas for t in self._in.values()))
        cutoff = time.time() - MANIFEST_KEEP_S
        for path in self.manifests.glob("*.json"):
            try:
                if path.stat().st_mtime < cutoff:
                    continue
                keep.update(str(sha) for _path, sha, _size in load_json(path).get("files", ()))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
        return keep

    # ---- stage out -----------------------------------------------------------------------------------------------
    def _stage_out(self, task: StageTask) -> str:
        """Every item is tried; one failing makes the order failed (the message names it)."""
        order = task.order
        try:
            top = os.open(self.stage_root / str(order.job_id), DIR_FLAGS)
        except OSError:
            raise StageFailed(f"the stage dir of job {order.job_id} is not on this node") from None
        progress = functools.partial(self._progress, task)
        try:
            skipped: list[str] = []
            errors: list[str] = []
            planned: list[tuple[int, list[OutputFile], bool]] = []
            for i, item in enumerate(order.items):
                try:
                    files, is_dir = list_output(top, item.source, order, skipped)
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
                        upload(top, f, item.target, is_dir, task, progress)
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
