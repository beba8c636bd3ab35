"""The agent's stage engine over plain local files (tmp dirs as the allowed shared storage): stage-in into the
content-addressed cache, materialize, stage-out, cancel, restart, eviction, and the symlink attacks of a hostile
job or tenant."""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.agent.staging import StageEngine, StageFailed, StageMissing, call_s3, compute_clashes, compute_parts
from corral.agent.staging import files as staging_files
from corral.agent.staging import inputs as staging_inputs
from corral.agent.staging import s3 as staging_s3
from corral.api.staging import SharedRootWire, StageItemWire, StageOrder, StageReport
from corral.core.unix_identity import JobIdentity

IS_ROOT = os.geteuid() == 0
DEADLINE_S = 5.0


class Node:
    """A stage engine over `tmp`, with a shared root `shared/` and a writable output root `results/`."""

    def __init__(self, tmp: Path, cache_max_bytes: int = 1 << 30) -> None:
        self.tmp = tmp
        self.shared = tmp / "shared"
        self.results = tmp / "results"
        self.shared.mkdir(exist_ok=True)
        self.results.mkdir(exist_ok=True)
        self.results.chmod(0o1777)  # the jobs' users may write here, as on a shared scratch dir
        self.engine = self.open(cache_max_bytes)

    def open(self, cache_max_bytes: int = 1 << 30) -> StageEngine:
        return StageEngine(self.tmp / "cache", self.tmp / "jobs" / "stage", cache_max_bytes, shared_dirs=True)

    def order(self, job_id: int, *items: tuple[str, str], uid: int | None = None) -> StageOrder:
        roots = [SharedRootWire(path=str(self.shared), writable=False), SharedRootWire(path=str(self.results))]
        wires = [StageItemWire(source=s, target=t) for s, t in items]
        return StageOrder(job_id=job_id, items=wires, roots=roots, uid=uid, gid=uid)

    def stage_dir(self, job_id: int) -> Path:
        return self.tmp / "jobs" / "stage" / str(job_id)


def wait_report(engine: StageEngine, job_id: int, outward: bool = False) -> StageReport:
    """The order's report once it is done or failed (polled with a deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        report = engine.reports()[1 if outward else 0].get(str(job_id))
        if report is not None and report.state != "running":
            return report
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} still staging: {engine.reports()}")


def stage_in(node: Node, *orders: StageOrder) -> dict[int, StageReport]:
    node.engine.set_orders(list(orders), [])
    return {o.job_id: wait_report(node.engine, o.job_id) for o in orders}


def stage_out(node: Node, order: StageOrder) -> StageReport:
    node.engine.set_orders([], [order])
    return wait_report(node.engine, order.job_id, outward=True)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.engine.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the source files the engine reads (every shared-storage read of a stage-in goes through read_fd)."""
    calls: list[int] = []
    real = staging_inputs.read_fd

    def counted(fd: int, cancel: object) -> Iterator[bytes]:
        calls.append(fd)
        return real(fd, cancel)  # type: ignore[arg-type]

    monkeypatch.setattr(staging_inputs, "read_fd", counted)
    return calls


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def cache_objects(node: Node) -> list[Path]:
    return sorted((node.tmp / "cache" / "objects").iterdir())


# ---- pure parts --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("", ()),
        ("a", ("a",)),
        ("a/b/", ("a", "b")),
        ("../x", None),
        ("a/../../x", None),
        ("/etc/passwd", None),
        ("a//b", None),
        ("./a", None),
    ],
)
def test_stage_relative_parts_refuse_what_could_escape(path: str, parts: tuple[str, ...] | None) -> None:
    assert compute_parts(path) == parts


def test_stage_layout_clash_of_file_and_directory_is_named() -> None:
    assert compute_clashes(["a", "a/b"]) == "a is both a file and the directory of a/b"
    assert compute_clashes(["a/b", "a/c"]) is None


# ---- stage in, materialize ---------------------------------------------------------------------------------------
def test_shared_dir_staged_in_is_laid_out_read_only_in_a_private_stage_dir(node: Node) -> None:
    write(node.shared / "set" / "a.txt", "alpha")
    write(node.shared / "set" / "sub" / "b.bin", b"\x00" * 3000)
    write(node.shared / "one.cfg", "cfg")
    order = node.order(1, (f"{node.shared}/set/", "data"), (f"{node.shared}/one.cfg", "conf/"))
    report = stage_in(node, order)[1]
    assert (report.state, report.files, report.done_bytes, report.total_bytes) == ("done", 3, 3008, 3008)
    assert report.message == "staged 3 files, 2.9 KiB"
    assert stat.S_IMODE((node.tmp / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE((node.tmp / "jobs" / "stage").stat().st_mode) == 0o711

    top = node.engine.materialize(1, None, staged_in=True)
    assert top == node.stage_dir(1)
    assert (top / "data" / "a.txt").read_text() == "alpha"
    assert (top / "data" / "sub" / "b.bin").read_bytes() == b"\x00" * 3000
    assert (top / "conf" / "one.cfg").read_text() == "cfg"
    assert stat.S_IMODE(top.stat().st_mode) == 0o700
    st = (top / "data" / "a.txt").stat()
    if IS_ROOT:  # a hard link to the root-owned cache object: readable, never writable by the job
        assert (st.st_nlink, st.st_uid, stat.S_IMODE(st.st_mode)) == (2, 0, 0o444)
    else:
        assert (st.st_nlink, stat.S_IMODE(st.st_mode)) == (1, 0o644)


@pytest.mark.skipif(not IS_ROOT, reason="chown to another identity needs root")
def test_materialize_gives_every_directory_to_the_job_identity(node: Node) -> None:
    write(node.shared / "d" / "x" / "f", "1")
    stage_in(node, node.order(2, (f"{node.shared}/d", "in")))
    who = JobIdentity(uid=54321, gid=54322, user="u")
    top = node.engine.materialize(2, who, staged_in=True)
    for d in (top, top / "in", top / "in" / "x"):
        assert (d.stat().st_uid, d.stat().st_gid) == (54321, 54322)
    assert (top / "in" / "x" / "f").stat().st_uid == 0


def test_materialize_copies_when_the_agent_is_not_root(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    write(node.shared / "f", "content")
    stage_in(node, node.order(3, (str(node.shared / "f"), "")))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    top = node.engine.materialize(3, None, staged_in=True)
    st = (top / "f").stat()
    assert (st.st_nlink, stat.S_IMODE(st.st_mode)) == (1, 0o644)
    (top / "f").write_text("job changed its copy")
    assert [p.read_text() for p in cache_objects(node)] == ["content"]


def test_materialize_starts_fresh_and_refuses_a_lost_manifest(node: Node) -> None:
    outside = write(node.tmp / "outside" / "keep", "keep")
    node.stage_dir(4).parent.mkdir(parents=True, exist_ok=True)
    node.stage_dir(4).symlink_to(outside.parent)  # a leftover link where the dir goes: removed, not followed
    top = node.engine.materialize(4, None, staged_in=False)
    assert top.is_dir() and not top.is_symlink() and list(top.iterdir()) == []
    assert outside.read_text() == "keep"
    write(top / "old", "from a previous attempt")
    assert list(node.engine.materialize(4, None, staged_in=False).iterdir()) == []
    with pytest.raises(StageMissing, match="staged input of job 4 is not on this node"):
        node.engine.materialize(4, None, staged_in=True)


def test_discard_removes_the_stage_dir_and_manifest(node: Node) -> None:
    write(node.shared / "f", "x")
    stage_in(node, node.order(5, (str(node.shared / "f"), "")))
    node.engine.materialize(5, None, staged_in=True)
    node.engine.discard(5)
    assert not node.stage_dir(5).exists()
    assert not (node.tmp / "cache" / "manifests" / "5.json").exists()


# ---- the cache ---------------------------------------------------------------------------------------------------
def test_second_job_of_same_file_is_a_cache_hit_and_same_content_shares_one_object(
    node: Node, reads: list[int]
) -> None:
    write(node.shared / "a", "same bytes")
    write(node.shared / "b", "same bytes")
    stage_in(node, node.order(10, (str(node.shared / "a"), "")))
    assert len(reads) == 1
    report = stage_in(node, node.order(11, (str(node.shared / "a"), "x")))[11]
    assert len(reads) == 1 and report.done_bytes == 10  # counted at once, read never
    stage_in(node, node.order(12, (str(node.shared / "b"), "")))
    assert len(reads) == 2 and len(cache_objects(node)) == 1


def test_changed_shared_file_is_read_again(node: Node, reads: list[int]) -> None:
    src = write(node.shared / "a", "v1")
    stage_in(node, node.order(13, (str(src), "")))
    write(src, "v2 longer")
    stage_in(node, node.order(14, (str(src), "")))
    assert len(reads) == 2
    assert (node.engine.materialize(14, None, staged_in=True) / "a").read_text() == "v2 longer"


def test_restarted_engine_reports_a_listed_stage_in_done_without_copying(node: Node, reads: list[int]) -> None:
    write(node.shared / "a", "data")
    order = node.order(15, (str(node.shared / "a"), ""))
    stage_in(node, order)
    node.engine.close()
    node.engine = node.open()
    node.engine.set_orders([order], [])
    assert node.engine.reports()[0]["15"].state == "done"  # at once, from the manifest
    assert len(reads) == 1
    assert (node.engine.materialize(15, None, staged_in=True) / "a").read_text() == "data"


def test_eviction_drops_least_recently_used_unpinned_objects(tmp_path: Path) -> None:
    node = Node(tmp_path, cache_max_bytes=150)
    try:
        for name in ("a-old", "b-linked", "c-listed"):
            write(node.shared / name, name[0] * 100)
        stage_in(node, node.order(20, (str(node.shared / "a-old"), "")))
        node.engine.discard(20)  # the job ran and ended: its input may go
        stage_in(node, node.order(21, (str(node.shared / "b-linked"), "")))
        node.engine.materialize(21, None, staged_in=True)  # hard-linked into the job dir when root
        node.engine.set_orders([], [])
        stage_in(node, node.order(22, (str(node.shared / "c-listed"), "")))  # 300 bytes > 150
        left = {p.read_text()[0] for p in cache_objects(node)}
        # the oldest goes; the job dir's hard link keeps b (a copy when not root: then b goes too); c's order is
        # listed: it stays although the cache is still over its limit
        assert left == ({"b", "c"} if IS_ROOT else {"c"})
        report = stage_in(node, node.order(23, (str(node.shared / "a-old"), "")))[23]
        assert report.state == "done"  # evicted: read again
    finally:
        node.engine.close()


def test_a_staged_job_keeps_its_input_in_the_cache_until_it_starts(tmp_path: Path) -> None:
    node = Node(tmp_path, cache_max_bytes=150)
    try:
        write(node.shared / "victim", "v" * 100)
        write(node.shared / "flood", "f" * 400)
        stage_in(node, node.order(30, (str(node.shared / "victim"), "")))
        node.engine.set_orders([], [])  # staged: the server no longer lists it; it waits for its GPUs
        stage_in(node, node.order(31, (str(node.shared / "flood"), "")))  # another tenant fills the cache
        node.engine.set_orders([], [])
        node.engine.discard(31)
        stage_in(node, node.order(32, (str(node.shared / "flood"), "x")))  # evicts what it may
        top = node.engine.materialize(30, None, staged_in=True)
        assert (top / "victim").read_text() == "v" * 100
    finally:
        node.engine.close()


def test_stage_in_larger_than_free_disk_fails_before_copying(
    node: Node, monkeypatch: pytest.MonkeyPatch, reads: list[int]
) -> None:
    write(node.shared / "big", b"x" * 4096)
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(1, 1, 100))  # type: ignore[attr-defined]
    report = stage_in(node, node.order(23, (str(node.shared / "big"), "")))[23]
    assert report.state == "failed" and report.message.startswith("needs 0.0 GiB, 0.0 GiB free on this node")
    assert reads == []


# ---- cancel ------------------------------------------------------------------------------------------------------
def test_withdrawn_order_stops_and_leaves_no_partial_download(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    write(node.shared / "slow", b"z" * (64 * 1024))
    monkeypatch.setattr(staging_files, "CHUNK_BYTES", 1024)
    real: Callable[..., Iterator[bytes]] = staging_inputs.read_fd

    def slow(fd: int, cancel: object) -> Iterator[bytes]:
        for chunk in real(fd, cancel):
            time.sleep(0.01)
            yield chunk

    monkeypatch.setattr(staging_inputs, "read_fd", slow)
    node.engine.set_orders([node.order(30, (str(node.shared / "slow"), ""))], [])
    deadline = time.monotonic() + DEADLINE_S
    while node.engine.reports()[0]["30"].done_bytes == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    node.engine.set_orders([], [])
    assert node.engine.reports() == ({}, {})
    tmp = node.tmp / "cache" / "tmp"
    while any(tmp.iterdir()):
        assert time.monotonic() < deadline, "the partial download stayed"
        time.sleep(0.01)
    time.sleep(0.05)
    assert cache_objects(node) == [] and not (node.tmp / "cache" / "manifests" / "30.json").exists()


# ---- stage out ---------------------------------------------------------------------------------------------------
def test_stage_out_copies_a_dir_to_shared_storage_once_and_removes_the_stage_dir(node: Node) -> None:
    top = node.engine.materialize(40, None, staged_in=False)
    write(top / "out" / "r.txt", "result")
    write(top / "out" / "deep" / "m.bin", b"1" * 2048)
    order = node.order(40, ("out/", f"{node.results}/run40/"), uid=54321 if IS_ROOT else None)
    report = stage_out(node, order)
    assert report.state == "done", report.message
    assert report.message == f"uploaded 2 files, 2.0 KiB to {node.results}/run40/"
    assert (node.results / "run40" / "r.txt").read_text() == "result"
    assert (node.results / "run40" / "deep" / "m.bin").read_bytes() == b"1" * 2048
    if IS_ROOT:
        assert (node.results / "run40" / "deep").stat().st_uid == 54321
        assert (node.results / "run40" / "r.txt").stat().st_uid == 54321
    assert not top.exists()
    assert [p.name for p in (node.results / "run40").iterdir() if p.name.startswith(".")] == []

    (node.results / "run40" / "r.txt").unlink()
    node.engine.close()
    node.engine = node.open()
    node.engine.set_orders([], [order])
    assert node.engine.reports()[1]["40"] == report  # the stored result, not a second upload
    assert not (node.results / "run40" / "r.txt").exists()
    node.engine.set_orders([], [])
    assert not (node.tmp / "cache" / "out" / "40.json").exists()


def test_stage_out_single_file_and_a_missing_item(node: Node) -> None:
    top = node.engine.materialize(41, None, staged_in=False)
    write(top / "model.pt", "weights")
    order = node.order(41, ("model.pt", f"{node.results}/final.pt"), ("nope/", f"{node.results}/x/"))
    report = stage_out(node, order)
    assert report.state == "failed"
    assert "nope/: no such file or directory in the stage dir" in report.message
    assert f"uploaded 1 file, 7 bytes to {node.results}/final.pt" in report.message
    assert (node.results / "final.pt").read_text() == "weights"


def test_stage_out_to_a_read_only_root_is_refused(node: Node) -> None:
    top = node.engine.materialize(42, None, staged_in=False)
    write(top / "f", "x")
    report = stage_out(node, node.order(42, ("f", f"{node.shared}/f")))
    assert report.state == "failed" and "outside the writable shared storage" in report.message
    assert not (node.shared / "f").exists()


def test_stage_out_under_a_root_that_does_not_exist_says_so(node: Node) -> None:
    top = node.engine.materialize(43, None, staged_in=False)
    write(top / "f", "x")
    node.results.rmdir()  # the tenant's dir an admin has not made on this storage yet
    report = stage_out(node, node.order(43, ("f", f"{node.results}/run/f")))
    assert report.state == "failed" and f"{node.results} (the shared storage" in report.message, report.message
    assert "does not exist on this node" in report.message and not node.results.exists()


@pytest.mark.skipif(not IS_ROOT, reason="needs root: the agent writes for another user")
def test_stage_out_writes_only_where_the_jobs_user_could_and_replaces_none_of_anothers_files(node: Node) -> None:
    top = node.engine.materialize(44, None, staged_in=False)
    write(top / "f", "mine")
    closed = node.results / "closed"
    closed.mkdir()
    closed.chmod(0o755)  # root's: the job's user may not write in it
    report = stage_out(node, node.order(44, ("f", f"{closed}/f"), uid=54321))
    assert report.state == "failed" and "may not write" in report.message, report.message
    assert not (closed / "f").exists()
    theirs = node.results / "theirs.pt"
    theirs.write_text("another user's")
    os.chown(theirs, 54322, 54322)
    top = node.engine.materialize(45, None, staged_in=False)
    write(top / "f", "mine")
    report = stage_out(node, node.order(45, ("f", str(theirs)), uid=54321))
    assert report.state == "failed" and "belongs to another user" in report.message, report.message
    assert theirs.read_text() == "another user's"


# ---- hostile jobs and tenants ------------------------------------------------------------------------------------
def test_stage_out_never_follows_links_a_job_planted(node: Node) -> None:
    secret = write(node.tmp / "etc" / "shadow", "root:secret")
    write(node.tmp / "etc" / "dir" / "key", "private key")
    top = node.engine.materialize(50, None, staged_in=False)
    write(top / "out" / "ok.txt", "fine")
    (top / "out" / "shadow").symlink_to(secret)
    (top / "out" / "etc").symlink_to(secret.parent / "dir")
    report = stage_out(node, node.order(50, ("out", f"{node.results}/o50/")))
    assert report.state == "done", report.message
    assert "skipped 2 links" in report.message and "shadow" in report.message
    assert sorted(p.name for p in (node.results / "o50").iterdir()) == ["ok.txt"]


def test_stage_out_of_a_symlinked_source_dir_is_refused(node: Node) -> None:
    top = node.engine.materialize(51, None, staged_in=False)
    (top / "out").symlink_to(node.tmp / "etc")
    write(node.tmp / "etc" / "passwd", "x")
    report = stage_out(node, node.order(51, ("out/", f"{node.results}/o51/")))
    assert report.state == "failed" and "symlink: not uploaded" in report.message
    assert not (node.results / "o51").exists()


def test_stage_out_never_writes_through_a_link_at_the_destination(node: Node) -> None:
    elsewhere = node.tmp / "elsewhere"
    elsewhere.mkdir()
    (node.results / "trap").symlink_to(elsewhere)  # a tenant planted it on the shared storage
    top = node.engine.materialize(52, None, staged_in=False)
    write(top / "f", "x")
    report = stage_out(node, node.order(52, ("f", f"{node.results}/trap/f")))
    assert report.state == "failed"
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(not IS_ROOT, reason="a hard link to a file the job may not read needs root to make")
def test_stage_out_skips_a_hard_link_to_a_file_the_job_cannot_read(node: Node) -> None:
    secret = write(node.tmp / "cache" / "secret", "root only")
    os.chmod(secret, 0o600)
    top = node.engine.materialize(53, None, staged_in=False)
    os.link(secret, top / "stolen")
    write(top / "mine", "ok")
    os.chown(top / "mine", 54321, 54321)
    report = stage_out(node, node.order(53, ("", f"{node.results}/o53/"), uid=54321))
    assert sorted(p.name for p in (node.results / "o53").iterdir()) == ["mine"]
    assert "stolen" in report.message


def test_shared_source_link_escaping_its_root_is_refused(node: Node, reads: list[int]) -> None:
    outside = write(node.tmp / "private" / "data", "not yours")
    (node.shared / "link").symlink_to(outside)
    (node.shared / "linkdir").symlink_to(outside.parent)
    reports = stage_in(
        node, node.order(60, (str(node.shared / "link"), "")), node.order(61, (f"{node.shared}/linkdir/", ""))
    )
    for job in (60, 61):
        assert reports[job].state == "failed"
        assert "resolves outside the allowed shared storage" in reports[job].message
    assert reads == []


def test_links_inside_a_shared_source_dir_are_skipped(node: Node) -> None:
    outside = write(node.tmp / "private" / "data", "not yours")
    write(node.shared / "set" / "real", "yes")
    (node.shared / "set" / "leak").symlink_to(outside)
    (node.shared / "set" / "leakdir").symlink_to(outside.parent)
    assert stage_in(node, node.order(62, (f"{node.shared}/set/", "")))[62].files == 1
    top = node.engine.materialize(62, None, staged_in=True)
    assert sorted(p.name for p in top.iterdir()) == ["real"]


def test_stage_in_target_escaping_the_stage_dir_is_refused_again(node: Node) -> None:
    write(node.shared / "f", "x")
    order = node.order(63, (str(node.shared / "f"), "ok"))
    order.items[0].target = "../../escape"  # past the server's check: the engine does not trust it
    report = stage_in(node, order)[63]
    assert report.state == "failed" and "would leave the stage dir" in report.message


def test_s3_item_without_credentials_fails_plainly(node: Node) -> None:
    report = stage_in(node, node.order(64, ("s3://bucket/key", "")))[64]
    assert (report.state, report.message) == ("failed", "no S3 credentials: give --stage-secret")


def test_transient_s3_errors_are_retried_three_times(monkeypatch: pytest.MonkeyPatch) -> None:
    exceptions = pytest.importorskip("botocore.exceptions")
    monkeypatch.setattr(staging_s3, "RETRY_BACKOFF_S", 0.0)
    slow_down = {"Error": {"Code": "SlowDown", "Message": "busy"}, "ResponseMetadata": {"HTTPStatusCode": 503}}
    calls: list[int] = []

    def flaky(fail: int) -> Callable[[], str]:
        def call() -> str:
            calls.append(1)
            if len(calls) <= fail:
                raise exceptions.ClientError(slow_down, "GetObject")
            return "ok"

        return call

    assert call_s3(flaky(3), "s3://b/k", threading.Event()) == "ok" and len(calls) == 4
    calls.clear()
    with pytest.raises(StageFailed, match="s3://b/k: SlowDown busy"):
        call_s3(flaky(4), "s3://b/k", threading.Event())
    assert len(calls) == 4
    denied = {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}
    calls.clear()

    def refused() -> str:
        calls.append(1)
        raise exceptions.ClientError(denied, "HeadObject")

    with pytest.raises(StageFailed, match="^access denied to s3://b/k$"):
        call_s3(refused, "s3://b/k", threading.Event())
    assert len(calls) == 1
