"""Data staging with real processes: `corral up` (server and a local agent running jobs as their own Unix users),
moto's S3 server as the remote store, a tenant's s3 secret made with the CLI. A job's input is staged from S3 and
from the tenant's shared directory before it is placed (its events say so, in order), the job reads it in
$CORRAL_STAGE_DIR, and its output goes to S3 after it ends; a job that fails still ships its output, and a link a
job plants there to a file outside is not followed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from moto_server import MotoUnavailable, run_moto_server
from realparts import missing_real_part

from .conftest import CORRAL, Corral, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    try:
        with run_moto_server() as endpoint:
            yield endpoint
    except MotoUnavailable as e:
        missing_real_part(f"moto's server (S3): {e}", "make test installs it (pip install -e '.[dev]')")


def test_input_is_staged_from_s3_before_the_job_starts_and_its_output_is_uploaded(
    corral_factory: Any, s3_endpoint: str, tmp_path: Path
) -> None:
    s3 = boto3.client(
        "s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="AKIAE2E", aws_secret_access_key="x"
    )
    s3.create_bucket(Bucket="inputs")
    s3.create_bucket(Bucket="outputs")
    s3.put_object(Bucket="inputs", Key="data/a.txt", Body=b"hello from s3\n")
    s3.put_object(Bucket="inputs", Key="data/sub/b.bin", Body=os.urandom(1 << 20))
    shared = tmp_path / "shared"
    (shared / "default" / "ds").mkdir(parents=True)
    (shared / "default" / "ds" / "labels.csv").write_text("id,label\n1,cat\n")
    for d in (tmp_path, shared, shared / "default", shared / "default" / "ds"):
        os.chmod(d, 0o755)

    c: Corral = corral_factory()
    c.env.update(CORRAL_STAGE_S3_ENDPOINTS=s3_endpoint, CORRAL_STAGE_PATHS=f"{shared}/{{tenant}}")
    c.start()
    made = subprocess.run(
        [CORRAL, "secrets", "create", "s3cred", "--s3", "--access-key-id", "AKIAE2E", "--endpoint", s3_endpoint],
        input="x\n", env=c.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    script = (
        'cd "$CORRAL_STAGE_DIR" && mkdir -p out && cat in/a.txt ds/labels.csv && wc -c < in/sub/b.bin > out/size.txt '
        "&& cp in/a.txt out/copy.txt && id -u > out/uid.txt"
    )
    job = c.submit(
        "--stage-in", "s3://inputs/data/:in", "--stage-in", f"{shared}/default/ds/:ds",
        "--stage-out", "out/:s3://outputs/run1/", "--stage-secret", "s3cred", "--", "sh", "-c", script,
    )  # fmt: skip
    done = wait_for(lambda: (j := c.job(job))["state"] in ("SUCCEEDED", "FAILED") and j, 90, "the job ends")
    assert done["state"] == "SUCCEEDED", (done, c.cli("logs", str(job)).stdout)
    log = c.cli("logs", str(job)).stdout
    assert "hello from s3" in log and "1,cat" in log, log
    kinds = [e["kind"] for e in c.api_events(job)]
    assert kinds.index("staging") < kinds.index("staged") < kinds.index("assigned"), kinds  # before its GPUs

    shipped = wait_for(lambda: (j := c.job(job))["stage_out_state"] in ("done", "failed") and j, 60, "stage-out")
    assert shipped["stage_out_state"] == "done", shipped
    got = {o["Key"]: o for o in s3.list_objects_v2(Bucket="outputs", Prefix="run1/")["Contents"]}
    assert set(got) == {"run1/size.txt", "run1/copy.txt", "run1/uid.txt"}, got
    assert s3.get_object(Bucket="outputs", Key="run1/size.txt")["Body"].read().strip() == b"1048576"
    assert s3.get_object(Bucket="outputs", Key="run1/copy.txt")["Body"].read() == b"hello from s3\n"
    assert int(s3.get_object(Bucket="outputs", Key="run1/uid.txt")["Body"].read()) != 0  # ran as its own user
    shown = c.cli("show", str(job))
    assert "output" in shown.stdout and "done" in shown.stdout, shown.stdout

    # A job that fails still ships its output; a link it plants to a file outside its stage dir is not followed.
    bad = c.submit(
        "--stage-out", "out/:s3://outputs/run2/", "--stage-secret", "s3cred", "--", "sh", "-c",
        'mkdir -p "$CORRAL_STAGE_DIR/out" && echo partial > "$CORRAL_STAGE_DIR/out/p.txt" '
        '&& ln -s /etc/hostname "$CORRAL_STAGE_DIR/out/leak" && exit 3',
    )  # fmt: skip
    failed = wait_for(lambda: (j := c.job(bad))["stage_out_state"] in ("done", "failed") and j, 90, "its stage-out")
    assert failed["state"] == "FAILED" and failed["exit_code"] == 3, failed
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="outputs", Prefix="run2/").get("Contents", [])}
    assert keys == {"run2/p.txt"}, keys


def test_a_multi_node_jobs_input_is_staged_on_each_node_and_rank_0_ships_its_output(
    corral_factory: Any, tmp_path: Path
) -> None:
    """Two real agents (node-a from `corral up`, node-b joined with a token), each with its own stage cache: a
    2-node job's input from the tenant's shared directory is on both nodes before either part starts (both parts
    read it), and its output ships from rank 0's stage dir only."""
    shared = tmp_path / "shared"
    (shared / "default" / "ds").mkdir(parents=True)
    (shared / "default" / "ds" / "shard.txt").write_text("the same shard\n")
    (shared / "default" / "results").mkdir()
    for d in (tmp_path, shared, shared / "default", shared / "default" / "ds"):
        os.chmod(d, 0o755)
    os.chmod(shared / "default" / "results", 0o777)

    c: Corral = corral_factory(gpus="sim:2xH100-80GB", node="node-a")
    c.env.update(CORRAL_STAGE_PATHS=f"{shared}/{{tenant}}")
    c.start()
    c.start_agent("node-b", "sim:2xH100-80GB")
    wait_for(lambda: len(c.cli_json("nodes")) == 2, 30, "node-b registered")
    script = (
        'cd "$CORRAL_STAGE_DIR" && echo "rank $CORRAL_NODE_RANK read: $(cat ds/shard.txt)" '
        '&& mkdir -p out && echo "from rank $CORRAL_NODE_RANK" > out/who.txt'
    )
    job = c.submit(
        "--nodes", "2", "--gpus", "2", "--stage-in", f"{shared}/default/ds/:ds",
        "--stage-out", f"out/:{shared}/default/results/run1/", "--", "sh", "-c", script,
    )  # fmt: skip
    r = c.cli("wait", str(job), "--timeout", "90")
    assert r.returncode == 0, (r.stderr, c.job(job)["reason"], c.cli("show", str(job)).stdout)
    shown = c.job(job)
    assert sorted(p["node"] for p in shown["parts"]) == ["node-a", "node-b"], shown
    for rank in (0, 1):
        out = c.cli("logs", str(job), "--rank", str(rank)).stdout
        assert f"rank {rank} read: the same shard" in out, out
    events = c.api_events(job)
    staged = [e["message"] for e in events if e["kind"] == "staged"]
    assert len(staged) == 2 and {m.split(":")[0] for m in staged} == {"input on node node-a", "input on node node-b"}
    kinds = [e["kind"] for e in events]
    assert max(i for i, k in enumerate(kinds) if k == "staged") < kinds.index("assigned"), kinds
    shipped = wait_for(lambda: (j := c.job(job))["stage_out_state"] in ("done", "failed") and j, 60, "stage-out")
    assert shipped["stage_out_state"] == "done", shipped["stage_out_message"]
    assert (shared / "default" / "results" / "run1" / "who.txt").read_text() == "from rank 0\n"
