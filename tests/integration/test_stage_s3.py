"""The stage engine against moto's S3 over real HTTP: objects and prefixes staged in through the node's cache (an
unchanged object is never downloaded twice), errors named, and a stage dir uploaded without the links a job
planted in it."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent.staging import StageEngine
from corral.agent.staging import s3 as staging_s3
from corral.api.staging import S3Login, StageItemWire, StageOrder, StageReport

boto3 = pytest.importorskip("boto3")
DEADLINE_S = 20.0
SECRET = "s3cr3t-never-shown"


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"stage-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[StageEngine]:
    e = StageEngine(tmp_path / "cache", tmp_path / "stage", 1 << 30, shared_dirs=False)
    yield e
    e.close()


@pytest.fixture
def gets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the engine GETs (a botocore event hook on every client it makes)."""
    seen: list[str] = []
    real = staging_s3.make_s3_client

    def counted(order: StageOrder) -> Any:
        client = real(order)
        client.meta.events.register("before-call.s3.GetObject", lambda params, **_: seen.append(params["url_path"]))
        return client

    monkeypatch.setattr(staging_s3, "make_s3_client", counted)
    return seen


def order(endpoint: str, job_id: int, *items: tuple[str, str]) -> StageOrder:
    login = S3Login(access_key_id="AKIDTEST", secret_access_key=SECRET, endpoint=endpoint)
    return StageOrder(job_id=job_id, items=[StageItemWire(source=s, target=t) for s, t in items], s3=login)


def wait(engine: StageEngine, job_id: int, outward: bool = False) -> StageReport:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        report = engine.reports()[1 if outward else 0].get(str(job_id))
        if report is not None and report.state != "running":
            assert SECRET not in report.message
            return report
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} still staging: {engine.reports()}")


def stage_in(engine: StageEngine, o: StageOrder) -> StageReport:
    engine.set_orders([o], [])
    return wait(engine, o.job_id)


def test_s3_object_and_prefix_staged_in(moto_endpoint: str, s3: Any, bucket: str, engine: StageEngine) -> None:
    s3.put_object(Bucket=bucket, Key="model/weights.bin", Body=b"w" * 5000)
    s3.put_object(Bucket=bucket, Key="data/a.txt", Body=b"a")
    s3.put_object(Bucket=bucket, Key="data/sub/b.txt", Body=b"bb")
    s3.put_object(Bucket=bucket, Key="data/folder/", Body=b"")  # a console's folder marker: not a file
    o = order(
        moto_endpoint,
        1,
        (f"s3://{bucket}/model/weights.bin", "m/"),
        (f"s3://{bucket}/model/weights.bin", "renamed.bin"),
        (f"s3://{bucket}/data/", "d"),
    )
    report = stage_in(engine, o)
    assert (report.state, report.files, report.done_bytes) == ("done", 4, 10003), report.message
    top = engine.materialize(1, None, staged_in=True)
    assert (top / "m" / "weights.bin").read_bytes() == b"w" * 5000
    assert (top / "renamed.bin").read_bytes() == b"w" * 5000
    assert (top / "d" / "a.txt").read_bytes() == b"a"
    assert (top / "d" / "sub" / "b.txt").read_bytes() == b"bb"
    assert sorted(p.name for p in (top / "d").iterdir()) == ["a.txt", "sub"]


def test_s3_missing_object_empty_prefix_and_missing_bucket_are_named(
    moto_endpoint: str, bucket: str, engine: StageEngine
) -> None:
    cases = {
        2: (f"s3://{bucket}/no/such.key", f"no object s3://{bucket}/no/such.key"),
        3: (f"s3://{bucket}/empty/", f"nothing under s3://{bucket}/empty/"),
        4: ("s3://corral-no-such-bucket/x/", "no bucket s3://corral-no-such-bucket/x/"),
    }
    engine.set_orders([order(moto_endpoint, j, (src, "")) for j, (src, _m) in cases.items()], [])
    for job, (_src, message) in cases.items():
        report = wait(engine, job)
        assert (report.state, report.message) == ("failed", message)


def test_s3_unchanged_object_is_never_downloaded_twice_and_new_content_is(
    moto_endpoint: str, s3: Any, bucket: str, engine: StageEngine, gets: list[str]
) -> None:
    s3.put_object(Bucket=bucket, Key="p/keep.bin", Body=b"k" * 100)
    s3.put_object(Bucket=bucket, Key="p/change.bin", Body=b"v1")
    assert stage_in(engine, order(moto_endpoint, 5, (f"s3://{bucket}/p/", ""))).state == "done"
    assert len(gets) == 2
    report = stage_in(engine, order(moto_endpoint, 6, (f"s3://{bucket}/p/", "")))
    assert report.done_bytes == 102 and len(gets) == 2  # listed with its own credentials, fetched never
    s3.put_object(Bucket=bucket, Key="p/change.bin", Body=b"v2 new")
    assert stage_in(engine, order(moto_endpoint, 7, (f"s3://{bucket}/p/", ""))).state == "done"
    assert len(gets) == 3 and gets[-1].endswith("change.bin")
    top = engine.materialize(7, None, staged_in=True)
    assert (top / "change.bin").read_bytes() == b"v2 new"
    assert (top / "keep.bin").read_bytes() == b"k" * 100


def deny_reads_to(access_key_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that may list a bucket but not read its objects (S3's s3:ListBucket without s3:GetObject): the
    engine's clients made with `access_key_id` get 403 AccessDenied for every HEAD and GET, as S3 answers them."""
    real = staging_s3.make_s3_client

    def denied(params: Any, **_: Any) -> Any:
        http = type("Denied", (), {"status_code": 403, "headers": {}})()
        return http, {
            "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    def made(order: StageOrder) -> Any:
        client = real(order)
        if order.s3 is not None and order.s3.access_key_id == access_key_id:
            for op in ("HeadObject", "GetObject"):
                client.meta.events.register(f"before-call.s3.{op}", denied)
        return client

    monkeypatch.setattr(staging_s3, "make_s3_client", made)


def test_s3_cached_object_is_not_served_to_a_job_that_may_list_but_not_read_it(
    moto_endpoint: str, s3: Any, bucket: str, engine: StageEngine, gets: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job's credentials read the objects under a prefix into the node's cache; another job whose credentials
    may only list them gets no copy from the cache (access denied, naming the object); a third that may read them
    is served from the cache after a HEAD with its own credentials, downloading nothing."""
    s3.put_object(Bucket=bucket, Key="secret/weights.bin", Body=b"only for readers")
    assert stage_in(engine, order(moto_endpoint, 21, (f"s3://{bucket}/secret/", ""))).state == "done"
    assert len(gets) == 1
    deny_reads_to("AKIDLISTONLY", monkeypatch)
    lister = order(moto_endpoint, 22, (f"s3://{bucket}/secret/", ""))
    lister.s3.access_key_id = "AKIDLISTONLY"  # type: ignore[union-attr]
    report = stage_in(engine, lister)
    assert (report.state, report.message) == ("failed", f"access denied to s3://{bucket}/secret/weights.bin")
    assert stage_in(engine, order(moto_endpoint, 23, (f"s3://{bucket}/secret/", ""))).state == "done"
    assert len(gets) == 1  # served from the cache
    assert (engine.materialize(23, None, staged_in=True) / "weights.bin").read_bytes() == b"only for readers"


def test_s3_key_escaping_the_stage_dir_is_refused(
    moto_endpoint: str, s3: Any, bucket: str, engine: StageEngine
) -> None:
    s3.put_object(Bucket=bucket, Key="in/ok.txt", Body=b"ok")
    s3.put_object(Bucket=bucket, Key="in/x/../../../escape", Body=b"evil")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="in/")["Contents"]]
    if "in/x/../../../escape" not in keys:
        pytest.skip(f"the S3 server normalised the key: {keys}")
    report = stage_in(engine, order(moto_endpoint, 8, (f"s3://{bucket}/in/", "")))
    assert report.state == "failed" and "would leave the stage dir" in report.message
    assert not (engine.stage_root.parent / "escape").exists()


def test_s3_stage_out_uploads_a_dir_but_no_planted_link(
    moto_endpoint: str, s3: Any, bucket: str, engine: StageEngine, tmp_path: Path
) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:hash")
    top = engine.materialize(9, None, staged_in=False)
    (top / "out" / "sub").mkdir(parents=True)
    (top / "out" / "r.txt").write_text("result")
    (top / "out" / "sub" / "m.bin").write_bytes(b"m" * 3000)
    (top / "out" / "shadow").symlink_to(secret)
    os.symlink(tmp_path, top / "out" / "all")
    (top / "log.txt").write_text("log")
    o = order(moto_endpoint, 9, ("out/", f"s3://{bucket}/run9/"), ("log.txt", f"s3://{bucket}/logs/9.txt"))
    engine.set_orders([], [o])
    report = wait(engine, 9, outward=True)
    assert report.state == "done", report.message
    assert report.message.startswith(f"uploaded 3 files, 2.9 KiB to s3://{bucket}/run9/, s3://{bucket}/logs/9.txt")
    assert "skipped 2 links" in report.message
    keys = sorted(obj["Key"] for obj in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["logs/9.txt", "run9/r.txt", "run9/sub/m.bin"]
    assert s3.get_object(Bucket=bucket, Key="run9/sub/m.bin")["Body"].read() == b"m" * 3000
    assert not top.exists()


def test_s3_upload_to_a_missing_bucket_fails_naming_it(moto_endpoint: str, engine: StageEngine) -> None:
    top = engine.materialize(10, None, staged_in=False)
    (top / "f").write_text("x")
    engine.set_orders([], [order(moto_endpoint, 10, ("f", "s3://corral-absent-bucket/out/"))])
    report = wait(engine, 10, outward=True)
    assert report.state == "failed" and "no bucket s3://corral-absent-bucket/out/f" in report.message
