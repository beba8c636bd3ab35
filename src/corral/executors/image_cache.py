"""A node's container image cache: which images Corral pulled and when each was last used (an index in the agent's
state dir that survives restarts), and eviction of the least recently used beyond `CORRAL_IMAGE_CACHE_GB`.

Only images Corral pulled (`record_pull`) count toward the limit and may be removed; an image an operator built or
pulled by hand is listed (`touch`, `cached`) but never removed. An image that any container on the engine uses (any
state) is never removed, even when that leaves the cache over its limit; nor one a launch has just pulled or touched
and whose container may not exist yet (in flight, until an eviction pass sees a container of it, or IN_FLIGHT_S).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from corral.executors.jobdir import load_json
from corral.executors.shim import write_json_atomic

log = logging.getLogger("corral.agent")
_ENGINE_ERRORS = (DockerException, RequestException)
INDEX_FILE = "images.json"
MAX_REPORTED = 200  # images a node reports (api.schemas.MAX_NODE_IMAGES)
SETTING = "CORRAL_IMAGE_CACHE_GB"
DEFAULT_CACHE_GB = 100
MAX_CACHE_GB = 1_000_000
GB = 10**9  # decimal, as the engine reports sizes (`docker images` shows MB of 10^6 bytes)
_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)")
_NO_LIMIT = ("none", "unlimited")
IN_FLIGHT_S = 120.0  # how long a pulled or touched image waits for its container before it may be evicted


def parse_cache_gb(text: str) -> int | None:
    """The cache limit in bytes from `CORRAL_IMAGE_CACHE_GB`: a positive number of GB (10^9 bytes; decimals allowed,
    e.g. "0.005" or "100"), at most MAX_CACHE_GB; "" (unset) is the default of 100 GB; "none" (or "unlimited") is no
    limit (None). "0" is refused rather than guessed at (no cache, or no limit?). Raises ValueError naming the
    setting and what is wrong."""
    value = text.strip()
    if not value:
        return DEFAULT_CACHE_GB * GB
    if value.lower() in _NO_LIMIT:
        return None
    if not _NUMBER.fullmatch(value):
        raise ValueError(f"{SETTING}={text!r}: not a number of GB (e.g. 100 or 0.5), nor 'none' for no limit")
    gb = float(value)
    if not math.isfinite(gb) or gb > MAX_CACHE_GB:
        raise ValueError(f"{SETTING}={text!r}: at most {MAX_CACHE_GB:,} GB")
    limit = round(gb * GB)
    if limit < 1:
        raise ValueError(f"{SETTING}={text!r}: must be more than 0 GB (write 'none' for no limit)")
    return limit


@dataclass(frozen=True, slots=True)
class _Entry:
    """One image ref in the index. `pulled`: Corral pulled it (only those count toward the limit and are removed)."""

    id: str
    size: int
    last_used: float  # wall clock: survives a restart
    private: bool  # pulled with registry credentials
    pulled: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "size": self.size,
            "last_used": self.last_used,
            "private": self.private,
            "pulled": self.pulled,
        }


def _load_index(path: Path) -> dict[str, _Entry]:
    """The index file's entries; a missing, torn or foreign file (or entry) is left out, never an error."""
    data = load_json(path)
    index: dict[str, _Entry] = {}
    if not isinstance(data, dict):
        return index
    for ref, e in data.items():
        try:
            index[str(ref)] = _Entry(
                str(e["id"]), int(e["size"]), float(e["last_used"]), bool(e["private"]), bool(e.get("pulled", True))
            )
        except (KeyError, TypeError, ValueError):
            log.warning("image cache: ignoring a malformed index entry for %r in %s", ref, path)
    return index


class ImageCache:
    """The image index of one node's engine. Thread-safe: launch threads call it at once (one lock; `evict` holds it
    for its whole pass, so a `touch` waits for a running eviction rather than race it).

    Callers `record_pull` or `touch` an image before creating a job's container with it; from then on `evict` keeps
    it: as in flight for up to `in_flight_s` (monotonic, this process only), then as long as a container uses it (an
    eviction pass that sees a container of it ends the in-flight wait early). So `evict` may run at any time, also
    right after a pull and before the container exists.
    """

    def __init__(
        self, client: docker.DockerClient, state_dir: Path, limit_bytes: int | None, *, in_flight_s: float = IN_FLIGHT_S
    ) -> None:
        self._client = client
        self._limit = limit_bytes
        self._in_flight_s = in_flight_s
        self._in_flight: dict[str, float] = {}  # ref -> when a launch pulled or touched it (time.monotonic)
        self._lock = threading.Lock()
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._path = state_dir / INDEX_FILE
        self._index = _load_index(self._path)

    # ----- reading -----
    def has(self, image: str) -> bool:
        """The engine has this ref now. Engine errors other than not-found raise (the caller cannot tell)."""
        try:
            self._client.images.get(image)
        except ImageNotFound:
            return False
        return True

    def is_private(self, image: str) -> bool:
        """Whether the image the engine has under this name is one Corral pulled with a registry login, by image id:
        the same image named another way (by digest, another tag, another spelling of its repository) is as
        private. Fails closed: a name the engine cannot resolve now counts as private (the caller pulls)."""
        with self._lock:
            entry = self._index.get(image)
            if entry is not None and entry.private:
                return True
            private_ids = {e.id for e in self._index.values() if e.private}
        if not private_ids:
            return False
        try:
            image_id = str(self._client.images.get(image).id)
        except ImageNotFound:
            return False  # not on the node: it is pulled anyway
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot inspect %s (%s); treating it as private", image, e)
            return True
        return image_id in private_ids

    def cached(self) -> list[str]:
        """Refs in the index that the engine still has, most recently used first, at most MAX_REPORTED (one list of
        the engine's images). Never a private image (pulled with a registry login): the node reports these for
        placement, and a tenant must not learn where another tenant's private image is by where its job lands. On
        an engine error: the index as it stands, unchecked (logged)."""
        with self._lock:
            order = sorted(
                ((ref, e) for ref, e in self._index.items() if not e.private),
                key=lambda kv: kv[1].last_used,
                reverse=True,
            )
        try:
            ids, refs = self._engine_images()
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot list the engine's images (%s); reporting the index unchecked", e)
            return [ref for ref, _ in order[:MAX_REPORTED]]
        return [ref for ref, e in order if e.id in ids or ref in refs][:MAX_REPORTED]

    # ----- recording -----
    def record_pull(self, image: str, private: bool) -> None:
        """After a successful pull: the image's id and size from the engine, last used now, counted toward the limit.
        An engine error is logged and the pull left unrecorded (the image is then treated as an operator's)."""
        try:
            img = self._client.images.get(image)
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot inspect %s after pulling it (%s); not recorded", image, e)
            return
        with self._lock:
            self._index[image] = _Entry(str(img.id), _size_of(img.attrs), time.time(), private, True)
            self._in_flight[image] = time.monotonic()
            self._save()

    def touch(self, image: str) -> None:
        """A job starts with this image: last used now. An image Corral did not pull is added (not counted toward
        the limit, never removed); one the engine no longer has is dropped. Engine errors are logged."""
        try:
            img = self._client.images.get(image)
        except ImageNotFound:
            with self._lock:
                if self._index.pop(image, None) is not None:
                    self._save()
            return
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot inspect %s (%s); only its last use is recorded", image, e)
            img = None
        with self._lock:
            old = self._index.get(image)
            if img is None and old is None:
                return
            self._in_flight[image] = time.monotonic()
            now = time.time()
            if img is None:
                assert old is not None
                self._index[image] = _Entry(old.id, old.size, now, old.private, old.pulled)
            elif old is not None and old.id == img.id:
                self._index[image] = _Entry(old.id, _size_of(img.attrs), now, old.private, old.pulled)
            else:
                # New to the index, or the ref now names another image (retagged by hand): not Corral's pull.
                self._index[image] = _Entry(str(img.id), _size_of(img.attrs), now, False, False)
            self._save()

    # ----- evicting -----
    def evict(self) -> list[str]:
        """Drop entries the engine no longer has; then, while the images Corral pulled exceed the limit, remove the
        least recently used one that no container uses (by id, not forced; an engine refusal skips it). Returns the
        refs removed. Never raises on engine errors (logged); without the list of containers it removes nothing."""
        with self._lock:
            try:
                removed = self._evict()
            finally:
                self._save()
            return removed

    def _evict(self) -> list[str]:
        if not self._refresh():
            return []
        # Size per image id, as the engine reports it: layers shared between images are counted once per image, so
        # the total overstates the disk used and eviction errs toward removing more, never less.
        groups: dict[str, tuple[int, float, list[str]]] = {}  # pulled image id -> (size, last used, refs)
        for ref, e in self._index.items():
            if e.pulled:
                size, last, refs = groups.get(e.id, (e.size, e.last_used, []))
                groups[e.id] = (size, max(last, e.last_used), [*refs, ref])
        total = sum(size for size, _, _ in groups.values())
        if self._limit is None or total <= self._limit:
            return []
        try:
            in_use = {str(c.get("ImageID", "")) for c in self._client.api.containers(all=True)}
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot list containers (%s); nothing evicted", e)
            return []
        in_flight = self._update_in_flight(in_use)
        removed: list[str] = []
        for image_id, (size, _, refs) in sorted(groups.items(), key=lambda kv: kv[1][1]):
            if total <= self._limit:
                break
            if image_id in in_use or in_flight.intersection(refs):
                continue  # a container uses it (any state), or a launch is about to: kept, even over the limit
            try:
                # By name, not by id: an id with several names is refused without force ("referenced in multiple
                # repositories"); removing Corral's names frees the image once it has no other (an operator's tag
                # keeps it, as it should).
                for ref in refs:
                    try:
                        self._client.images.remove(image=ref, force=False)
                    except NotFound:  # Docker says ImageNotFound; Podman a plain 404 ("image not known")
                        pass  # gone meanwhile: its space is free all the same
            except _ENGINE_ERRORS as e:
                log.warning("image cache: not removing %s (%s): %s", ", ".join(refs), image_id, e)
                continue
            total -= size
            for ref in refs:
                del self._index[ref]
            removed.extend(refs)
            log.info("image cache: removed %s (%d bytes, least recently used)", ", ".join(refs), size)
        return removed

    def _update_in_flight(self, in_use: set[str]) -> set[str]:
        """The refs still in flight: neither expired nor seen in use (a container protects those from now on)."""
        now = time.monotonic()
        for ref, since in list(self._in_flight.items()):
            entry = self._index.get(ref)
            if now - since >= self._in_flight_s or entry is None or entry.id in in_use:
                del self._in_flight[ref]
        return set(self._in_flight)

    def _refresh(self) -> bool:
        """Drop the entries whose image (by id: a ref retagged since names another image) the engine no longer has;
        False when the engine's images cannot be listed."""
        try:
            ids, _ = self._engine_images()
        except _ENGINE_ERRORS as e:
            log.warning("image cache: cannot list the engine's images (%s); nothing evicted", e)
            return False
        for ref in [r for r, e in self._index.items() if e.id not in ids]:
            del self._index[ref]
        return True

    def _engine_images(self) -> tuple[set[str], set[str]]:
        """(image ids, tags and digests) of every image the engine has (one call)."""
        ids: set[str] = set()
        refs: set[str] = set()
        for img in self._client.api.images():
            ids.add(str(img.get("Id", "")))
            refs.update(img.get("RepoTags") or ())
            refs.update(img.get("RepoDigests") or ())
        return ids, refs

    def _save(self) -> None:
        try:
            write_json_atomic(self._path, {ref: e.to_dict() for ref, e in self._index.items()})
        except OSError as e:
            log.warning("image cache: cannot write its index %s (%s)", self._path, e)


def _size_of(attrs: dict[str, Any]) -> int:
    size = attrs.get("Size")
    return size if isinstance(size, int) and size >= 0 else 0
