"""ContainerExecutor: each job a container of its image on a Docker Engine (or Podman's compatible socket).

The engine keeps the containers alive across agent restarts; the containers' labels (run, job, attempt, node) tell
a new ContainerExecutor which are its own, so an agent killed -9 and restarted re-adopts those that still run and
reports those that ended meanwhile with their exit codes. Per run a small state dir keeps what the engine does
not: that a launch began, a pending cancel, the log position and, once the container is gone, the exit record.
A finished container is removed as soon as its exit is recorded; `ack` forgets the run.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from requests.exceptions import RequestException

from corral.core.errors import ValidationError
from corral.executors.base import (
    EXIT_CANNOT_EXECUTE,
    EXIT_COMMAND_NOT_FOUND,
    EXIT_LOST,
    ExitRecord,
    LaunchSpec,
    PublishedPort,
    RegistryLogin,
)
from corral.executors.container_config import (
    LABEL_NODE,
    LABEL_RUN,
    compute_container_name,
    compute_create_kwargs,
    compute_published,
    compute_user,
    find_mount_refusal,
)
from corral.executors.container_logs import LogFollower, prepare_agent_log
from corral.executors.image_cache import ImageCache
from corral.executors.image_pull import PullCancelled, PullFailed, check_access, pull_image
from corral.executors.jobdir import check_job_id, load_json
from corral.executors.shim import write_json_atomic

log = logging.getLogger("corral.agent")
EXIT_ENGINE_REFUSED = 125  # as `docker run`: the container could not be created or started
_LAUNCH, _CANCEL, _EXIT = "launch.json", "cancel.json", "exit"
_ENGINE_ERRORS = (DockerException, RequestException)
_LIST_EVERY_S = 0.2
_LOG_DRAIN_S = 10.0
# States of a container that has not ended: Docker's, and Podman's "stopping" (its exit code is not known yet).
_LIVE_STATES = ("running", "created", "restarting", "paused", "stopping")
_CATATONIT_EXEC = re.compile(
    rb"\(catatonit:[0-9]+\): failed to exec pid1: (No such file or directory|Permission denied)"
)


@dataclass
class _Run:
    """What the executor knows of one run (guarded by the executor's lock)."""

    key: str
    dir: Path
    log_path: Path
    starting: bool = False  # the launch thread has not created and started the container yet
    container_id: str = ""
    follower: LogFollower | None = None
    cancel_deadline: float | None = None  # wall clock: survives a restart
    exit: ExitRecord | None = None
    digest: str = ""
    phase: str = ""  # before its command starts: "pulling 43%"
    log_max_bytes: int = 0  # the log's limit (LaunchSpec.log_max_bytes)


class ContainerExecutor:
    """Executor for container jobs (LaunchSpec.container set). Thread-safe; no method blocks on a job.

    `client`: a docker-py client of the engine; `node`: this node's name (containers carry it: several agents may
    share an engine); `allowed_mounts`: host path prefixes a job may mount (checked again here with links resolved);
    `nvidia`: add a device request for the NVIDIA driver with the job's GPU UUIDs (nodes whose GPUs are real).
    """

    def __init__(
        self,
        client: docker.DockerClient,
        state_dir: Path,
        node: str,
        *,
        allowed_mounts: tuple[str, ...] = (),
        nvidia: bool = False,
        engine_socket: str = "",
        image_cache: ImageCache | None = None,
        web_bind_host: str = "",
    ) -> None:
        self._client = client
        self._state_dir = state_dir
        self._node = node
        self._allowed = allowed_mounts
        self._nvidia = nvidia
        self._socket = engine_socket
        self._bind_host = web_bind_host  # where a web UI's node port is published ("": every address)
        # Always one: it is also what keeps a private image to the jobs that may pull it (no limit by default).
        self._cache = image_cache or ImageCache(client, state_dir.parent / f"{state_dir.name}-images", None)
        self._init = _engine_has_init(client)  # a tiny init as PID 1 passes SIGTERM on
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._listed: dict[str, dict[str, Any]] = {}
        self._listed_at = 0.0
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._recover()

    @property
    def isolation(self) -> str:
        return "users" if os.geteuid() == 0 else "single-user"

    def knows(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._runs

    def image_digests(self) -> dict[str, str]:
        """Run key -> the image its container runs or ran (repo digest when pulled from a registry, else the image
        id), until its exit is acknowledged: a job that ends at once still shows what it ran."""
        with self._lock:
            return {k: r.digest for k, r in self._runs.items() if r.digest}

    def phases(self) -> dict[str, str]:
        """Run key -> what a starting run does before its command runs ("pulling 43%"); runs without one absent."""
        with self._lock:
            return {k: r.phase for k, r in self._runs.items() if r.phase and r.exit is None}

    def cached_images(self) -> list[str]:
        """The (public) images this node keeps, most recently used first."""
        return self._cache.cached()

    # ----- Executor -----
    def launch(self, spec: LaunchSpec) -> None:
        check_job_id(spec.job_id)
        if spec.container is None:
            raise ValidationError("container", "the container executor runs only jobs with an image")
        with self._lock:
            if spec.job_id in self._runs:
                return
            run = _Run(
                spec.job_id,
                self._state_dir / spec.job_id,
                spec.log_path,
                starting=True,
                log_max_bytes=spec.log_max_bytes,
            )
            self._runs[spec.job_id] = run
            run.dir.mkdir(mode=0o700, exist_ok=True)
            write_json_atomic(
                run.dir / _LAUNCH,
                {"log_path": str(spec.log_path), "image": spec.container.image, "log_max_bytes": spec.log_max_bytes},
            )
        threading.Thread(target=self._start, args=(run, spec), name=f"corral-start-{spec.job_id}", daemon=True).start()

    def running(self) -> list[str]:
        with self._lock:
            self._refresh()
            return [k for k, r in self._runs.items() if r.exit is None]

    def leader_pid(self, job_id: str) -> int | None:
        return None  # a container's processes live in their own PID namespace: see published_port

    def published_port(self, job_id: str) -> PublishedPort | None:
        with self._lock:
            run = self._runs.get(job_id)
            ident = run.container_id if run is not None and run.exit is None and not run.starting else ""
        if not ident:
            return None
        try:  # the engine's word now, not a listing's: a container that ended a moment ago publishes nothing
            return compute_published(self._client.api.inspect_container(ident), job_id)
        except _ENGINE_ERRORS as e:
            log.debug("inspecting container %s: %s", ident, _engine_message(e))
            return None

    def collect_exits(self) -> list[ExitRecord]:
        with self._lock:
            self._refresh()
            return [r.exit for r in self._runs.values() if r.exit is not None]

    def ack(self, job_id: str) -> None:
        with self._lock:
            run = self._runs.get(job_id)
            if run is None or run.exit is None:
                return
            del self._runs[job_id]
            shutil.rmtree(run.dir, ignore_errors=True)

    def cancel(self, job_id: str, grace_s: float) -> None:
        with self._lock:
            run = self._runs.get(job_id)
            if run is None or run.exit is not None or run.cancel_deadline is not None:
                return
            run.cancel_deadline = time.time() + max(grace_s, 0.0)
            write_json_atomic(run.dir / _CANCEL, {"deadline": run.cancel_deadline})
            if not run.starting:
                self._stop_later(run)

    def close(self) -> None:
        """Containers keep running (a new executor re-adopts them); only the client's connections close."""
        self._client.close()

    # ----- launching (a thread per launch: pulling and creating take a while) -----
    def _start(self, run: _Run, spec: LaunchSpec) -> None:
        code, reason, container = self._create_and_start(run, spec)
        if container is None:  # as a process job's shim does: the reason is in the job's log too
            try:
                prepare_agent_log(spec.log_path)
                with open(spec.log_path, "ab") as f:
                    f.write(f"corral: {reason}\n".encode())
            except OSError:
                pass
        with self._lock:
            run.starting = False
            run.phase = ""
            if container is None:
                self._finish(run, ExitRecord(run.key, code, reason))
                return
            run.container_id = container.id or ""
            run.digest = _digest_of(container)
            run.follower = LogFollower(container, run.log_path, run.dir, run.log_max_bytes)
            run.follower.start()
            self._listed_at = 0.0  # the next refresh lists it
            if run.cancel_deadline is not None:  # cancelled while it was being created
                self._stop_later(run)

    def _create_and_start(self, run: _Run, spec: LaunchSpec) -> tuple[int, str, Container | None]:
        assert spec.container is not None
        c = spec.container
        refusal = find_mount_refusal(c, self._allowed, self._socket)
        if refusal:
            return EXIT_CANNOT_EXECUTE, refusal, None
        user = compute_user(c, spec, (os.getuid(), os.getgid()))
        if os.geteuid() == 0 and 0 in (int(x) for x in user.split(":")):
            return EXIT_CANNOT_EXECUTE, "refused: a job never runs as uid or gid 0", None
        try:
            prepare_agent_log(spec.log_path)
            self._ensure_image(run, c.image, spec.registry_login)
        except (PullFailed, PullCancelled) as e:
            return _pull_outcome(e)
        except _ENGINE_ERRORS as e:  # first: requests' errors are OSErrors too
            return EXIT_ENGINE_REFUSED, f"cannot start: image {c.image}: {_engine_message(e)}", None
        except OSError as e:
            return 1, f"cannot start: {e}", None
        kwargs = compute_create_kwargs(
            spec,
            c,
            node=self._node,
            user=user,
            nvidia=self._nvidia,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            bind_host=self._bind_host,
        )
        kwargs["init"] = self._init or None
        container: Container | None = None
        try:
            self._remove_leftover(str(kwargs["name"]))
            try:
                container = self._client.containers.create(**kwargs)
            except ImageNotFound:  # evicted between its check and now (another start's eviction): once more
                self._ensure_image(run, c.image, spec.registry_login, pull=True)
                container = self._client.containers.create(**kwargs)
            container.start()
            self._evict_later()  # now that its container holds its image, the cache may shrink
            return 0, "", container
        except (PullFailed, PullCancelled) as e:
            return _pull_outcome(e)
        except _ENGINE_ERRORS as e:
            if container is not None:
                _remove_quietly(container)
            code, reason = _start_failure(spec, e)
            return code, reason, None

    def _ensure_image(self, run: _Run, image: str, login: RegistryLogin | None, pull: bool = False) -> None:
        """The image is on this node. A cached image starts at once, unless it came with a registry login: then
        the registry is asked again (with this job's login, or none), so a job that could not pull a private image
        cannot run it from another tenant's cached copy either. A job with a login always asks the registry (the
        layers it has are not fetched again). Raises PullFailed or PullCancelled."""
        cached = self._cache.has(image)
        if cached and not pull:
            if login is not None or self._cache.is_private(image):
                try:  # the registry decides, even for a digest the node holds (a pull of one asks nobody)
                    check_access(self._client, image, login)
                except NotImplementedError:
                    pull = True
            if login is None and not pull:
                self._cache.touch(image)
                return

        def on_phase(phase: str) -> None:
            with self._lock:
                run.phase = phase

        def cancelled() -> bool:
            with self._lock:
                return run.cancel_deadline is not None

        pull_image(self._client, image, login, on_phase, cancelled)
        self._cache.record_pull(image, private=login is not None)

    def _evict_later(self) -> None:
        """Keep the image cache within its limit, off the launch path (removing images takes a while)."""
        cache = self._cache

        def evict() -> None:
            try:
                removed = cache.evict()
                if removed:
                    log.info("image cache: removed %s (least recently used)", ", ".join(removed))
            except Exception:  # never let housekeeping kill the agent
                log.exception("image cache eviction failed")

        threading.Thread(target=evict, name="corral-image-evict", daemon=True).start()

    def _remove_leftover(self, name: str) -> None:
        """A container of the same name left by a launch that was interrupted before it recorded anything."""
        try:
            self._client.containers.get(name).remove(force=True, v=True)
        except NotFound:
            pass

    # ----- watching -----
    def _refresh(self) -> None:
        """Passive sync with the engine: note runs whose container ended (or vanished). Engine errors change nothing."""
        active = [r for r in self._runs.values() if r.exit is None and not r.starting]
        if not active:
            return
        try:
            listed = self._list()
            for run in active:
                info = listed.get(run.key)
                if info is None:
                    self._lost_or_listed_late(run)
                elif info.get("State") not in _LIVE_STATES:
                    self._collect(run)
        except _ENGINE_ERRORS as e:
            log.warning("container engine: %s", _engine_message(e))

    def _list(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        if now - self._listed_at >= _LIST_EVERY_S:
            found = self._client.api.containers(all=True, filters={"label": f"{LABEL_NODE}={self._node}"})
            self._listed = {c["Labels"].get(LABEL_RUN, ""): c for c in found}
            self._listed_at = now
        return self._listed

    def _lost_or_listed_late(self, run: _Run) -> None:
        try:
            self._client.containers.get(run.container_id or compute_container_name(self._node, run.key))
            self._listed_at = 0.0  # it exists after all: the listing was older than it
        except NotFound:
            self._finish(run, ExitRecord(run.key, EXIT_LOST, "lost: its container is gone"))

    def _collect(self, run: _Run) -> None:
        """The container ended: its whole log first, then its exit code, then the container goes."""
        container = self._client.containers.get(run.container_id or compute_container_name(self._node, run.key))
        if run.follower is None:  # ended while no agent watched: copy what it wrote since
            run.follower = LogFollower(container, run.log_path, run.dir, run.log_max_bytes)
            run.follower.start()
        if not run.follower.join(_LOG_DRAIN_S):
            log.warning("run %s: its log was still being copied after %.0f s", run.key, _LOG_DRAIN_S)
        state = container.attrs.get("State", {})
        code = int(state.get("ExitCode", EXIT_LOST))
        reason = ""
        if run.cancel_deadline is not None:
            reason = "cancelled: killed after grace period" if code == 137 else "cancelled"
        elif state.get("OOMKilled"):
            reason = "out of memory: the container reached its memory limit"
        elif code == 1 and self._init and (failure := _init_exec_failure(container, run.log_path)):
            code, reason = failure
            _note_in_log(run.log_path, reason)  # the init's own line does not name the program
        self._finish(run, ExitRecord(run.key, code, reason))
        _remove_quietly(container)

    def _finish(self, run: _Run, record: ExitRecord) -> None:
        if not (run.dir / _EXIT).exists():
            run.dir.mkdir(mode=0o700, exist_ok=True)
            write_json_atomic(run.dir / _EXIT, {"exit_code": record.exit_code, "reason": record.reason})
        run.exit = record

    # ----- cancelling -----
    def _stop_later(self, run: _Run) -> None:
        """SIGTERM now, SIGKILL when the grace period ends: the engine's stop, on a thread (it blocks that long)."""
        grace = max((run.cancel_deadline or 0.0) - time.time(), 0.0)
        ident = run.container_id or compute_container_name(self._node, run.key)
        threading.Thread(target=self._stop, args=(ident, grace), name=f"corral-stop-{run.key}", daemon=True).start()

    def _stop(self, ident: str, grace_s: float) -> None:
        try:
            self._client.api.stop(ident, timeout=math.ceil(grace_s))
        except NotFound:
            pass  # ended and removed meanwhile
        except _ENGINE_ERRORS as e:
            log.warning("stopping container %s: %s", ident, _engine_message(e))

    # ----- recovery -----
    def _recover(self) -> None:
        """Rebuild the run table from the state dir and the engine's containers labelled with this node."""
        try:
            containers = self._client.containers.list(all=True, filters={"label": f"{LABEL_NODE}={self._node}"})
        except _ENGINE_ERRORS as e:
            raise ValidationError("docker_host", f"the container engine did not answer: {_engine_message(e)}") from e
        by_key = {c.labels.get(LABEL_RUN, ""): c for c in containers}
        for path in sorted(p for p in self._state_dir.iterdir() if p.is_dir()):
            launch = load_json(path / _LAUNCH)
            if not isinstance(launch, dict):
                continue
            run = _Run(
                path.name, path, Path(str(launch["log_path"])), log_max_bytes=int(launch.get("log_max_bytes", 0))
            )
            self._runs[run.key] = run
            cancel = load_json(path / _CANCEL)
            run.cancel_deadline = float(cancel["deadline"]) if isinstance(cancel, dict) else None
            done = load_json(path / _EXIT)
            container = by_key.pop(run.key, None)
            if isinstance(done, dict):
                run.exit = ExitRecord(run.key, int(done.get("exit_code", EXIT_LOST)), str(done.get("reason", "")))
                if container is not None:
                    _remove_quietly(container)
            elif container is None:
                self._finish(run, ExitRecord(run.key, EXIT_LOST, "lost: launch interrupted before its container"))
            else:
                self._adopt(run, container)
        for container in by_key.values():  # ours by label, unknown to the state dir (acknowledged, or foreign)
            log.warning("removing container %s: no run of this node's agent owns it", container.name)
            _remove_quietly(container)

    def _adopt(self, run: _Run, container: Container) -> None:
        run.container_id = container.id or ""
        run.digest = _digest_of(container)
        if container.status == "created":  # the agent died between creating and starting it
            container.start()
            container.reload()
        if container.status == "running":
            run.follower = LogFollower(container, run.log_path, run.dir, run.log_max_bytes)
            run.follower.start()
            if run.cancel_deadline is not None:
                self._stop_later(run)
        log.info("re-adopted container %s (%s)", container.name, container.status)


def _pull_outcome(e: PullFailed | PullCancelled) -> tuple[int, str, None]:
    """A launch that ended in its pull: cancelled meanwhile (as a SIGTERM), or the image could not be had."""
    if isinstance(e, PullCancelled):
        return 143, "cancelled while its image was being pulled", None
    return EXIT_ENGINE_REFUSED, str(e), None


def _engine_has_init(client: docker.DockerClient) -> bool:
    """Docker names its init binary in /info; Podman's compatible API leaves it out, though Podman runs one (its
    catatonit) for `init` as Docker does: it says it is Podman in /version."""
    try:
        info = client.info()
        if isinstance(info, dict) and info.get("InitBinary"):
            return True
        version = client.version()
        components = version.get("Components") if isinstance(version, dict) else None
        return any(isinstance(c, dict) and c.get("Name") == "Podman Engine" for c in components or ())
    except _ENGINE_ERRORS:
        return False


def _digest_of(container: Container) -> str:
    """The image the container runs: its registry digest when it came from one, else the engine's image id."""
    try:
        image = container.image
    except _ENGINE_ERRORS:
        return str(container.attrs.get("Image", ""))
    if image is None:
        return str(container.attrs.get("Image", ""))
    digests = image.attrs.get("RepoDigests") or []
    return str(digests[0]) if digests else str(image.id or "")


def _init_exec_failure(container: Container, log_path: Path) -> tuple[int, str] | None:
    """The command could not be run by Podman's init (catatonit), which exits 1 where Docker's (tini) exits 127 or
    126: as a shell would report it, from the one line catatonit leaves on stderr. None when that is not it. The
    engine's log may not hold that line yet when the exit is seen (Podman): then the end of the job's own log, which
    the follower copied whole before this, is looked at."""
    try:
        tail = container.logs(stdout=False, stderr=True, tail=1)
    except _ENGINE_ERRORS:
        tail = b""
    found = _CATATONIT_EXEC.search(tail) if isinstance(tail, bytes) else None
    if found is None:
        try:
            with open(log_path, "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - 4096, 0))
                found = _CATATONIT_EXEC.search(f.read())
        except OSError:
            return None
    if found is None:
        return None
    config = container.attrs.get("Config") or {}
    program = str((config.get("Cmd") or [""])[0])
    if found.group(1) == b"Permission denied":
        return EXIT_CANNOT_EXECUTE, f"permission denied: {program}"
    return EXIT_COMMAND_NOT_FOUND, f"command not found: {program} (in image {config.get('Image', '')})"


def _note_in_log(path: Path, reason: str) -> None:
    try:
        with open(path, "ab") as f:
            f.write(f"corral: {reason}\n".encode())
    except OSError:
        pass


def _start_failure(spec: LaunchSpec, e: Exception) -> tuple[int, str]:
    """An engine refusal as a shell would report it: 127 command not found, 126 not executable, else 125."""
    message = _engine_message(e)
    program = spec.command[0] if spec.command else ""
    if "executable file not found" in message or "no such file or directory" in message:
        return (
            EXIT_COMMAND_NOT_FOUND,
            f"command not found: {program} (in image {spec.container.image if spec.container else ''})",
        )
    if "permission denied" in message:
        return EXIT_CANNOT_EXECUTE, f"permission denied: {program}"
    return EXIT_ENGINE_REFUSED, f"cannot start: {message}"


def _engine_message(e: Exception) -> str:
    if isinstance(e, APIError):
        return str(e.explanation or e)
    return str(e) or type(e).__name__


def _remove_quietly(container: Container) -> None:
    try:
        container.remove(force=True, v=True)  # and its anonymous volumes (an image's VOLUME): nothing left behind
    except _ENGINE_ERRORS:
        pass  # already gone (or the engine is away: the next agent removes it as an orphan)
