"""Pulling a job's image: with the job's registry login (or none, never the agent's own), reporting progress as a
phase ("pulling 43%") and stopping when the job is cancelled meanwhile.

A private image stays usable only by jobs that could pull it: the image cache remembers which images came with a
login, and a job without one never starts from such an image without asking the registry again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import docker
from docker.utils import parse_repository_tag

from corral.core.containers import registry_host, same_registry
from corral.executors.base import RegistryLogin

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Per-layer statuses of the engine's pull stream that mean the layer needs no more bytes.
_DONE = frozenset({"Download complete", "Pull complete", "Already exists", "Verifying Checksum", "Extracting"})


class PullFailed(Exception):
    """The image could not be had: str() names the image, its registry and the registry's (engine's) answer."""


class PullCancelled(Exception):
    """The job was cancelled while its image was being pulled."""


class PullProgress:
    """Bytes downloaded over bytes to download, across the layers the engine reports; `phase` is what the job
    shows meanwhile: "pulling" until sizes are known, then "pulling N%"."""

    def __init__(self) -> None:
        self._layers: dict[str, tuple[int, int]] = {}  # layer id -> (bytes done, bytes total)
        self._done: set[str] = set()

    def feed(self, item: Mapping[str, Any]) -> None:
        layer = str(item.get("id") or "")
        status = str(item.get("status") or "")
        if not layer:
            return
        detail = item.get("progressDetail") or {}
        if status == "Downloading" and isinstance(detail, Mapping):
            total, current = int(detail.get("total") or 0), int(detail.get("current") or 0)
            if total > 0:
                self._layers[layer] = (min(current, total), total)
        elif status in _DONE or status.startswith("Pulling fs layer") or status == "Waiting":
            if status in _DONE:
                self._done.add(layer)
            self._layers.setdefault(layer, (0, 0))

    @property
    def percent(self) -> int | None:
        known = {k: v for k, v in self._layers.items() if v[1] > 0}
        if not known and not self._done:
            return None
        total = sum(t for _, t in known.values())
        done = sum(t if k in self._done else c for k, (c, t) in known.items())
        if total == 0:
            return 100 if self._done and len(self._done) >= len(self._layers) else None
        waiting = [k for k, (_, t) in self._layers.items() if t == 0 and k not in self._done]
        pct = int(100 * done / total)
        return min(pct, 99) if waiting else min(pct, 100)

    @property
    def phase(self) -> str:
        pct = self.percent
        return "pulling" if pct is None else f"pulling {pct}%"


def pull_image(
    client: docker.DockerClient,
    image: str,
    login: RegistryLogin | None,
    on_phase: Callable[[str], None],
    cancelled: Callable[[], bool],
) -> None:
    """Pull `image` through the engine, with `login` (none: anonymously, never with the agent's own Docker
    config). Calls `on_phase` as progress changes. Raises PullFailed or PullCancelled."""
    _check_login_host(image, login)
    repo, tag = parse_repository_tag(image)
    auth = {"username": login.username, "password": login.password} if login else {}
    progress = PullProgress()
    on_phase(progress.phase)
    try:
        stream: Iterable[dict[str, Any]] = client.api.pull(
            repo, tag=tag or "latest", stream=True, decode=True, auth_config=auth
        )
        for item in stream:
            if cancelled():
                _close(stream)
                raise PullCancelled()
            if item.get("error") or item.get("errorDetail"):
                detail = item.get("errorDetail") or {}
                message = str(item.get("error") or (detail.get("message") if isinstance(detail, Mapping) else ""))
                raise PullFailed(describe_failure(image, message, login))
            before = progress.phase
            progress.feed(item)
            if progress.phase != before:
                on_phase(progress.phase)
    except docker.errors.APIError as e:
        raise PullFailed(describe_failure(image, str(e.explanation or e), login)) from e


def check_access(client: docker.DockerClient, image: str, login: RegistryLogin | None) -> None:
    """Ask the registry whether `login` (none: anonymously) may read `image`, without pulling it: the engine's
    /distribution call fetches the manifest every time, where a pull of a digest the node holds asks nobody. Raises
    PullFailed with the registry's answer. An engine without the call (an older Podman) answers 404: then a pull
    must do (the caller pulls)."""
    _check_login_host(image, login)
    auth = {"username": login.username, "password": login.password} if login else {}
    try:
        client.api.inspect_distribution(image, auth_config=auth)  # type: ignore[no-untyped-call]
    except docker.errors.APIError as e:
        # No such route: Docker says {"message": "page not found"}, Podman 4.3 a bare text "Not Found".
        if e.status_code == 404 and str(e.explanation or "").strip().lower() in ("page not found", "not found"):
            raise NotImplementedError("the engine cannot ask a registry without pulling") from e
        raise PullFailed(describe_failure(image, str(e.explanation or e), login)) from e


def _check_login_host(image: str, login: RegistryLogin | None) -> None:
    """The server checked it at submit; the agent too: a login is never sent to another registry than its own."""
    if login is not None and not same_registry(login.host, image):
        raise PullFailed(describe_failure(image, f"the login is for {login.host}, not this registry", login))


def describe_failure(image: str, message: str, login: RegistryLogin | None) -> str:
    """The reason a job shows: the image, the registry, whose login was tried, and what the registry said."""
    host = registry_host(image)
    who = f"as {login.username}" if login else "without a login (no --registry-secret)"
    said = _CONTROL.sub(" ", message.strip()[:400])  # the registry's words, which a tenant's registry chooses
    return f"cannot pull image {image} from {host} {who}: {said}"


def _close(stream: Iterable[Any]) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()
