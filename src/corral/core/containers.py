"""A job's container: image, host mounts, shared memory, user and web port (pure: parsing and the mount policy).

A job with a `ContainerSpec` runs in a container of its image on a node whose agent has the docker runtime;
without one it runs as a plain process. Host paths mount only under the prefixes an admin allows
(CORRAL_ALLOWED_MOUNTS): checked at submit on the path as written, and again by the agent on the path with its
symbolic links resolved (a link inside an allowed directory must not lead out of it).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.errors import ValidationError

RUNTIME_PROCESS = "process"
RUNTIME_DOCKER = "docker"
MAX_IMAGE_CHARS = 255
MAX_MOUNTS = 16
MAX_SHM_MIB = 1 << 20  # 1 TiB
DEFAULT_SHM_MIB = (
    1024  # a data loader's worker processes share batches through /dev/shm (Docker's 64 MiB is not enough)
)
# image references as Docker spells them: [registry[:port]/]path[:tag][@sha256:digest]
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]{1,2}[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]{1,2}[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_IMAGE_ID = re.compile(r"^(sha256:)?[0-9a-f]{1,64}$")
_USER = re.compile(r"^[0-9]{1,10}(?::[0-9]{1,10})?$")
_SIZE = re.compile(r"^([0-9]{1,9})([kmgt]?)(?:i?b)?$", re.IGNORECASE)
_SIZE_MIB = {"k": 1 / 1024, "": 1 / (1 << 20), "m": 1, "g": 1024, "t": 1 << 20}


@dataclass(frozen=True, slots=True)
class Mount:
    source: str  # a host path (absolute, normalised)
    target: str  # where the container sees it (absolute)
    read_only: bool = False

    def __str__(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    image: str
    mounts: tuple[Mount, ...] = ()
    shm_size_mib: int | None = None  # None: DEFAULT_SHM_MIB, or a quarter of the job's memory when that is less
    user: str | None = None  # "UID[:GID]" inside the container; None: the job's own Unix identity
    registry_secret: str | None = None  # a tenant secret of kind registry: the login its pull uses
    port: int | None = None  # the port its web UI listens on inside the container; None: the node port Corral assigns


def check_container_port(port: int) -> int:
    """A TCP port (1..65535) the container's app listens on, or ValidationError naming `container_port`."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValidationError("container_port", f"{port!r}: give a TCP port from 1 to 65535")
    return port


def check_image(image: str) -> str:
    """The image reference, or ValidationError naming `image`. Never an image id (`sha256:...`, or hex that an engine
    reads as an id's prefix): an id names whatever image a node holds, another tenant's private one included."""
    if not image or len(image) > MAX_IMAGE_CHARS or not _IMAGE.fullmatch(image):
        raise ValidationError("image", f"{image!r} is not an image reference (e.g. pytorch/pytorch:2.4, reg:5000/a/b)")
    if _IMAGE_ID.fullmatch(image):
        raise ValidationError("image", f"{image!r} looks like an image id: name the image (repository[:tag][@digest])")
    return image


def registry_host(image: str) -> str:
    """The registry an image reference is pulled from, as Docker reads it: the first path component when it
    looks like a host (has a '.' or a ':', or is `localhost`), else Docker Hub (`docker.io`)."""
    first, sep, _ = image.partition("/")
    # Docker's splitDockerDomain: a first component with a '.', a ':', an upper-case letter, or `localhost` is a host
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first.lower()
    return "docker.io"


def same_registry(secret_host: str, image: str) -> bool:
    """A registry secret's host serves the image (Docker Hub answers to several names)."""
    hub = {"docker.io", "index.docker.io", "registry-1.docker.io"}
    host, wanted = (
        secret_host.strip().lower().removeprefix("https://").removeprefix("http://").rstrip("/"),
        registry_host(image),
    )
    return host == wanted or (host in hub and wanted in hub)


def check_user(user: str) -> str:
    """ "UID[:GID]" with numbers only (names would be resolved inside the image, where /etc/passwd is the image's)."""
    if not _USER.fullmatch(user):
        raise ValidationError("container_user", f"{user!r}: give a numeric UID or UID:GID")
    if 0 in (int(x) for x in user.split(":")):  # as for process jobs: a job never runs as root
        raise ValidationError("container_user", f"{user!r}: a job never runs as uid or gid 0")
    return user


def parse_mount(text: str) -> Mount:
    """SRC:DST[:ro|rw] with absolute paths and no `..`; ValidationError naming `mounts`."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValidationError("mounts", f"{text!r}: write SRC:DST or SRC:DST:ro with absolute paths")
    for path in parts[:2]:
        if not path.startswith("/") or ".." in path.split("/") or "\x00" in path or "," in path:
            raise ValidationError("mounts", f"{text!r}: {path!r} must be an absolute path without '..' or ','")
    target = posixpath.normpath(parts[1])
    if target == "/" or target.split("/")[1] in ("proc", "sys", "dev"):
        raise ValidationError("mounts", f"{text!r}: cannot mount over {target}")
    return Mount(posixpath.normpath(parts[0]), target, len(parts) == 3 and parts[2] == "ro")


def parse_size_mib(text: str) -> int:
    """Docker's size spelling (512m, 2g, 1073741824b, 1GiB) in MiB, rounded up; ValidationError naming `shm_size`."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValidationError("shm_size_mib", f"{text!r}: give a size like 512m or 2g")
    mib = int(m.group(1)) * _SIZE_MIB[m.group(2).lower()]
    return max(math.ceil(mib), 1)


def check_allowed_mounts_setting(value: str) -> str:
    """CORRAL_ALLOWED_MOUNTS as a settings validator (server and agent): the value, or ValueError with the problem."""
    try:
        parse_allowed_mounts(value)
    except ValidationError as e:
        raise ValueError(e.problem) from e
    return value


def parse_allowed_mounts(text: str) -> tuple[str, ...]:
    """CORRAL_ALLOWED_MOUNTS: comma-separated absolute directory prefixes (empty: no host mounts at all)."""
    prefixes = tuple(posixpath.normpath(p.strip()) for p in text.split(",") if p.strip())
    for p in prefixes:
        if not p.startswith("/"):
            raise ValidationError("allowed_mounts", f"{p!r} is not an absolute path")
    return prefixes


def is_under(path: str, prefixes: Sequence[str]) -> bool:
    """`path` is one of `prefixes` or inside one (a path-component match: /data is not under /dat)."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def check_mounts_allowed(mounts: Sequence[Mount], prefixes: Sequence[str]) -> None:
    """Every mount's source lies under an allowed prefix, else ValidationError naming `mounts` (at submit)."""
    for m in mounts:
        if not prefixes:
            raise ValidationError("mounts", f"{m.source}: this cluster allows no host mounts (CORRAL_ALLOWED_MOUNTS)")
        if not is_under(m.source, prefixes):
            raise ValidationError(
                "mounts", f"{m.source} is not under a directory this cluster allows to mount: {', '.join(prefixes)}"
            )


def compute_shm_mib(spec: ContainerSpec, memory_mib: int) -> int:
    """The job's /dev/shm: what it asked for, else 1 GiB, or a quarter of its memory limit when that is less."""
    if spec.shm_size_mib is not None:
        return spec.shm_size_mib
    return min(DEFAULT_SHM_MIB, max(memory_mib // 4, 64)) if memory_mib else DEFAULT_SHM_MIB


def container_to_dict(spec: ContainerSpec) -> dict[str, object]:
    """The stored and wire shape (JSON); `port` only when given (the shape of jobs without one is unchanged)."""
    shape: dict[str, object] = {
        "image": spec.image,
        "mounts": [str(m) for m in spec.mounts],
        "shm_size_mib": spec.shm_size_mib,
        "user": spec.user,
        "registry_secret": spec.registry_secret,
    }
    if spec.port is not None:
        shape["port"] = spec.port
    return shape


def container_from_dict(data: dict[str, object] | None) -> ContainerSpec | None:
    if not data:
        return None
    mounts = data.get("mounts") or []
    shm = data.get("shm_size_mib")
    user = data.get("user")
    secret = data.get("registry_secret")
    port = data.get("port")
    return ContainerSpec(
        image=str(data["image"]),
        mounts=tuple(parse_mount(str(m)) for m in mounts) if isinstance(mounts, list) else (),
        shm_size_mib=int(shm) if isinstance(shm, int) else None,
        user=str(user) if user else None,
        registry_secret=str(secret) if secret else None,
        port=check_container_port(port) if isinstance(port, int) else None,
    )
