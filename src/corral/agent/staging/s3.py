"""S3 as a source and a target of staging, through boto3 (imported lazily: it is an extra). A client is made per
order with that order's credentials only, passed explicitly and never named in a message; botocore's own retries are
off and `call_s3` retries transient errors (connection, 5xx) with a short backoff, turning any other S3 error into
a StageFailed that names the object. Listing an object or a prefix gives the InputFiles to stage in (each read
pinned to the ETag it was listed with); an upload streams a stage-dir file, counting its bytes as it goes.
"""

from __future__ import annotations

import importlib
import json
import os
import posixpath
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from corral.agent.staging.files import CHUNK_BYTES
from corral.agent.staging.orders import (
    InputFile,
    OutputFile,
    Progress,
    StageCancelled,
    StageFailed,
    StageTask,
    compute_parts,
)
from corral.api.staging import StageOrder
from corral.core.errors import CorralError
from corral.core.staging import split_s3

T = TypeVar("T")

RETRIES = 3  # transient S3 errors (connection, 5xx): retried this many times
RETRY_BACKOFF_S = 0.3
NO_BOTO3 = "boto3 is not installed on this node (pip install corral[aws])"


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


def list_s3_input(source: str, target: str, target_parts: tuple[str, ...], task: StageTask) -> list[InputFile]:
    """The objects an S3 item names (one key, or every object under a prefix) as files of the stage dir."""
    try:
        bucket, key = split_s3(source)
    except CorralError as e:
        raise StageFailed(e.message) from None
    client = make_s3_client(task.order)
    endpoint = task.order.s3.endpoint if task.order.s3 is not None else None
    found: list[tuple[str, tuple[str, ...], int, str]] = []  # key, path parts, size, etag
    headed = False  # a single key is read (HEAD needs s3:GetObject) as it is listed; a prefix's objects are not
    if key and not key.endswith("/"):
        head = call_s3(lambda: client.head_object(Bucket=bucket, Key=key), source, task.cancel)
        name = posixpath.basename(key)
        parts = (*target_parts, name) if not target or target.endswith("/") else target_parts
        if compute_parts(name) is None or not parts:
            raise StageFailed(f"the key of {source} would leave the stage dir")
        found.append((key, parts, int(head["ContentLength"]), str(head.get("ETag", ""))))
        headed = True
    else:
        for obj in call_s3(lambda: list_prefix(client, bucket, key), source, task.cancel):
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

    def may_read(k: str, etag: str) -> Callable[[], object]:
        match = {"IfMatch": etag} if etag else {}
        return lambda: client.head_object(Bucket=bucket, Key=k, **match)

    return [
        InputFile(
            "/".join(parts),
            size,
            json.dumps(["s3", endpoint or "", bucket, k, etag, size]),
            reader(k, etag),
            f"s3://{bucket}/{k}",
            None if headed else may_read(k, etag),
        )
        for k, parts, size, etag in found
    ]


def list_prefix(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        objects.extend(o for o in page.get("Contents", []) if not o["Key"].endswith("/"))
    return objects


def upload_s3(
    fd: int, f: OutputFile, target: str, is_dir: bool, name: str, task: StageTask, progress: Progress
) -> None:
    """One open stage-dir file to its S3 target (under a prefix when the item is a dir); closes `fd`."""
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
                progress(n)

            reader = CountingReader(os.dup(fd), count, task.cancel)
            try:
                client.upload_fileobj(reader, bucket, key, Config=config)
            except BaseException:
                progress(-sent)
                raise
            finally:
                reader.close()

        call_s3(send, where, task.cancel)
    except ImportError:
        raise StageFailed(NO_BOTO3) from None
    finally:
        os.close(fd)
