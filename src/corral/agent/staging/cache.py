"""The node's content-addressed cache of staged input: objects/<sha256> (root-owned 0444, one per content) and
index.json, which maps what identifies a source's content (a shared file's path, size, mtime and inode; an S3
object's ETag) to its object and records when each object was last used. A source already in the cache is never
read again; a new one is copied in through tmp/ while it is hashed. Eviction drops the least recently used objects
until the cache is under its limit, keeping any a listed order's input or a job's dir (a hard link) still uses.
The cache's state is guarded by the engine's lock, which it is given.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from corral.agent.staging.files import CACHE_OBJECT_MODE, NEW_FILE_FLAGS, load_json, remove_quietly, write_json
from corral.agent.staging.orders import InputFile, Progress, StageFailed, StageTask, compute_gib


class ObjectCache:
    """The objects under `cache_dir` and their index (loaded at start, saved by `save_index`)."""

    def __init__(self, cache_dir: Path, max_bytes: int, lock: threading.Lock) -> None:
        self.cache_dir = cache_dir
        self.max_bytes = max_bytes
        self.objects = cache_dir / "objects"
        self.tmp = cache_dir / "tmp"
        self._lock = lock
        index = load_json(cache_dir / "index.json") or {}
        self._sources: dict[str, str] = dict(index.get("sources", {}))
        self._used: dict[str, int] = dict(index.get("used", {}))

    def check_space(self, inputs: list[InputFile]) -> None:
        """Raises StageFailed when the sources not yet cached would not fit on the cache's disk."""
        with self._lock:
            needed = sum(f.size for f in inputs if self._sources.get(f.identity) is None)
        free = shutil.disk_usage(self.cache_dir).free
        if needed > free:
            raise StageFailed(f"needs {compute_gib(needed)}, {compute_gib(free)} free on this node")

    def lookup(self, identity: str, task: StageTask) -> str | None:
        """The object already holding this source's content (now kept for `task`), or None."""
        with self._lock:
            sha = self._sources.get(identity)
            if sha is None or not (self.objects / sha).is_file():
                return None
            task.shas.add(sha)
            self._used[sha] = time.time_ns()
            return sha

    def remember(self, identity: str, sha: str, task: StageTask) -> None:
        with self._lock:
            self._sources[identity] = sha
            self._used[sha] = time.time_ns()
            task.shas.add(sha)

    def store(self, f: InputFile, task: StageTask, progress: Progress) -> str:
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
                    progress(len(chunk))
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
            progress(-written)
            remove_quietly(tmp)
            raise

    def save_index(self) -> None:
        """Write the index (the caller holds the lock)."""
        write_json(self.cache_dir / "index.json", {"sources": self._sources, "used": self._used})

    def evict(self, pinned: Callable[[], set[str]]) -> None:
        """Least recently used objects go until the cache is under its limit; an object `pinned()` names (called
        under the lock) or a job dir (a hard link) uses stays."""
        with self._lock:
            kept = pinned()
            objects: list[tuple[int, str, int]] = []
            total = 0
            for entry in os.scandir(self.objects):
                st = entry.stat(follow_symlinks=False)
                total += st.st_size
                if entry.name not in kept and st.st_nlink == 1:
                    objects.append((self._used.get(entry.name, st.st_mtime_ns), entry.name, st.st_size))
            if total <= self.max_bytes:
                return
            for _used, sha, size in sorted(objects):
                (self.objects / sha).unlink(missing_ok=True)
                self._used.pop(sha, None)
                total -= size
                if total <= self.max_bytes:
                    break
            self._sources = {k: v for k, v in self._sources.items() if (self.objects / v).exists()}
            self.save_index()
