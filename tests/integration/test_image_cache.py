"""ImageCache on the real Docker Engine (no mocks): least-recently-used eviction beyond the limit, never an image a
container uses nor one Corral did not pull, an index that survives a new ImageCache (an agent restarted), and the
list of cached images a node reports. The images are tiny and made here (`docker import` of a tar, or a build on
the local test image), named uniquely per run, and removed afterwards."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException, ImageNotFound
from requests.exceptions import RequestException

from container_engine import TEST_IMAGE, require_engine
from corral.executors.image_cache import INDEX_FILE, ImageCache

# One test at a time on the container engine (its images, containers and node names are the machine's): docs/testing.md
pytestmark = pytest.mark.xdist_group("container-engine")
RUN = uuid.uuid4().hex[:10]
PREFIX = f"corral-test/cache-{RUN}"
LABEL = "io.corral.test-image-cache"


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    client = require_engine()
    yield client
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={RUN}"}):
        c.remove(force=True)
    for img in client.images.list(name=PREFIX + "*"):
        for tag in img.tags:
            if tag.removeprefix("docker.io/").startswith(PREFIX):  # Podman names it in full
                try:
                    client.images.remove(tag, force=True)
                except ImageNotFound:
                    pass
    client.close()


@pytest.fixture
def make_image(engine: docker.DockerClient) -> Callable[..., str]:
    """A new image of `size` random bytes (distinct per call): `docker import`, or built FROM the test image (it
    has `sleep`) when `runnable`."""

    def make(name: str, size: int = 50_000, runnable: bool = False) -> str:
        ref = f"{PREFIX}-{name}:1"
        if runnable:
            context = _tar(
                {"Dockerfile": f"FROM {TEST_IMAGE}\nCOPY payload /payload\n".encode(), "payload": os.urandom(size)}
            )
            engine.images.build(fileobj=io.BytesIO(context), custom_context=True, tag=ref, rm=True)
        else:
            # repo:tag in one (Podman 4.3's compatible import ignores a separate tag: it names the image :latest)
            engine.api.import_image_from_data(_tar({"payload": os.urandom(size)}), repository=ref)
        return ref

    return make


def _size(engine: docker.DockerClient, ref: str) -> int:
    size = engine.images.get(ref).attrs["Size"]
    assert isinstance(size, int)
    return size


def _exists(engine: docker.DockerClient, ref: str) -> bool:
    try:
        engine.images.get(ref)
    except ImageNotFound:
        return False
    return True


def test_least_recently_used_goes_first_and_the_index_survives_a_restart(
    engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path
) -> None:
    a, b, c = make_image("a"), make_image("b"), make_image("c")
    state = tmp_path / "images"
    cache = ImageCache(engine, state, None)
    for ref in (a, b, c):
        cache.record_pull(ref, private=False)
    cache.touch(a)  # used again: b is now the least recently used, then c, then a
    assert cache.evict() == []  # no limit: nothing goes
    assert cache.cached()[:3] == [a, c, b]

    # A new instance (an agent restarted) reads the same index; the limit leaves room for two of the three.
    cache = ImageCache(engine, state, _size(engine, a) + _size(engine, c))
    assert cache.evict() == [b]
    assert not _exists(engine, b) and _exists(engine, a) and _exists(engine, c)
    assert cache.evict() == []  # within the limit now

    cache = ImageCache(engine, state, _size(engine, a))
    assert cache.evict() == [c]
    assert cache.cached() == [a]
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    index = json.loads((state / INDEX_FILE).read_text())
    assert set(index) == {a} and index[a]["id"] == engine.images.get(a).id and index[a]["size"] == _size(engine, a)


def test_an_image_a_container_uses_is_never_evicted(
    engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path
) -> None:
    used, other = make_image("used", runnable=True), make_image("other")
    cache = ImageCache(engine, tmp_path / "images", 1, in_flight_s=0)  # one byte: everything is over
    cache.record_pull(used, private=False)  # the least recently used...
    cache.record_pull(other, private=False)
    container = engine.containers.run(used, ["sleep", "300"], detach=True, labels={LABEL: RUN})
    assert cache.evict() == [other]  # ...but a running container uses it: kept, over the limit
    assert _exists(engine, used)
    container.stop(timeout=0)
    assert cache.evict() == []  # a stopped container still uses it (the engine would refuse too)
    assert _exists(engine, used)
    container.remove()
    assert cache.evict() == [used]
    assert not _exists(engine, used)


def test_an_image_just_pulled_is_kept_until_its_container_has_come_and_gone(
    engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path
) -> None:
    """Eviction may run right after a pull (the executor runs it off the launch path): the new image, over the limit
    on its own, waits for its container; once a pass has seen that container, the image goes when it is unused."""
    new = make_image("new", runnable=True)
    cache = ImageCache(engine, tmp_path / "images", 1)
    cache.record_pull(new, private=False)
    assert cache.evict() == []  # in flight: its container does not exist yet
    container = engine.containers.run(new, ["sleep", "300"], detach=True, labels={LABEL: RUN})
    assert cache.evict() == []  # in use
    container.remove(force=True)
    assert cache.evict() == [new]


def test_an_image_corral_did_not_pull_is_never_removed(
    engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path
) -> None:
    operators, pulled = make_image("operators"), make_image("pulled")
    cache = ImageCache(engine, tmp_path / "images", 1, in_flight_s=0)
    cache.touch(operators)  # a job ran the operator's image: listed, the least recently used, never Corral's to remove
    cache.record_pull(pulled, private=False)
    assert cache.cached() == [pulled, operators]
    assert cache.evict() == [pulled]
    assert cache.evict() == []
    assert _exists(engine, operators) and cache.cached() == [operators]


def test_private_images_and_images_gone_by_hand(
    engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path
) -> None:
    private, public = make_image("private"), make_image("public")
    cache = ImageCache(engine, tmp_path / "images", None)
    cache.record_pull(private, private=True)
    cache.record_pull(public, private=False)
    assert cache.has(private) and not cache.has(f"{PREFIX}-never:1")
    cache = ImageCache(engine, tmp_path / "images", None)
    assert cache.is_private(private) and not cache.is_private(public) and not cache.is_private(TEST_IMAGE)
    assert cache.cached() == [public]  # a private image is never reported (placement must not reveal where it is)
    engine.images.remove(public)  # an operator removed it by hand
    assert cache.cached() == []
    assert cache.evict() == []  # drops its entry
    assert set(json.loads((tmp_path / "images" / INDEX_FILE).read_text())) == {private}
    cache.touch(public)  # gone from the engine: not added back
    assert cache.cached() == []


def test_engine_errors_never_raise_out_of_touch_evict_and_cached(tmp_path: Path) -> None:
    """An engine that does not answer: touch, evict and cached log and carry on (has may raise: it cannot tell)."""
    broken = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41")
    cache = ImageCache(broken, tmp_path / "images", 1)
    cache.touch("anything:1")
    cache.record_pull("anything:1", private=False)
    assert cache.evict() == []
    assert cache.cached() == []
    with pytest.raises((DockerException, RequestException)):
        cache.has("anything:1")


def test_launch_threads_at_once(engine: docker.DockerClient, make_image: Callable[..., str], tmp_path: Path) -> None:
    """Several launch threads record, touch and evict at once: every pull ends up in the index file, whole."""
    refs = [make_image(f"t{i}", size=1000) for i in range(6)]
    cache = ImageCache(engine, tmp_path / "images", None)

    def launch(ref: str) -> None:
        cache.record_pull(ref, private=False)
        cache.touch(ref)
        cache.evict()

    threads = [threading.Thread(target=launch, args=(ref,)) for ref in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert set(json.loads((tmp_path / "images" / INDEX_FILE).read_text())) == set(refs)
    assert set(cache.cached()) == set(refs)
