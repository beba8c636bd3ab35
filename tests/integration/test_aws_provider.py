"""The `aws` provider against moto's server: real boto3 over HTTP, the same EC2 requests and replies a real AWS gives
(moto's own fidelity aside). Plus the boot script (corral.cloud.userdata), run for real by bash in a sandbox.

Parallel-safe as it is (no xdist_group): each pytest-xdist worker starts its own moto server (the fixture is
per session), and each test uses pools of its own names, so no test sees another's instances.
"""

from __future__ import annotations

import base64
import json
import shlex
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.cloud.base import (
    GONE,
    PENDING,
    RUNNING,
    STOPPING,
    Instance,
    LaunchRequest,
    Provider,
    ProviderError,
)
from corral.cloud.userdata import MAX_USER_DATA_BYTES, TOKEN_PATH, UNIT_PATH, compute_user_data
from corral.core.pools import InstanceType

REGION = "us-east-1"
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
TOKEN = "crj1.7.s3cr3t-Secret_value.0123456789abcdef"
GPU_TYPE = InstanceType(name="g5.xlarge", gpus=1, gpu_model="A10G-24GB", price_per_hour=1.0)
SPOT_TYPE = InstanceType(name="g5.2xlarge", gpus=1, gpu_model="A10G-24GB", price_per_hour=0.4, spot=True)


# ---- fixtures ----------------------------------------------------------------------------------------------------
@pytest.fixture
def ec2(moto_endpoint: str) -> Any:
    """A plain boto3 EC2 client on the same server: what the test checks the provider did with."""
    import boto3

    return boto3.client("ec2", endpoint_url=moto_endpoint, region_name=REGION, **FAKE_CREDENTIALS)


@pytest.fixture(scope="session")
def ami(moto_endpoint: str) -> str:
    """An AMI moto knows (its built-in catalogue)."""
    import boto3

    client = boto3.client("ec2", endpoint_url=moto_endpoint, region_name=REGION, **FAKE_CREDENTIALS)
    return str(client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


@pytest.fixture
def make_provider(moto_endpoint: str, ami: str, aws_env: None) -> Callable[..., Any]:
    """`make_provider(pool=None, **settings)`: an AwsProvider on moto (a fresh pool name unless given)."""
    from corral.cloud.aws import AwsProvider

    def make(pool: str | None = None, **settings: str) -> AwsProvider:
        return AwsProvider(
            pool or new_pool(),
            REGION,
            {"ami": ami, "endpoint_url": moto_endpoint, "install_command": "true", **settings},
        )

    return make


def new_pool() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def request(pool: str, node: str, itype: InstanceType = GPU_TYPE, **kw: Any) -> LaunchRequest:
    args: dict[str, Any] = {"join_url": "https://corral.example:8443", "join_token": TOKEN, **kw}
    return LaunchRequest(pool=pool, node_name=node, instance_type=itype, **args)


def describe(ec2: Any, instance_id: str) -> dict[str, Any]:
    return dict(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0])


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def pool_instances(ec2: Any, pool: str) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "tag:corral-pool", "Values": [pool]}])
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


# ---- launch --------------------------------------------------------------------------------------------------------
def test_launch_starts_the_machine_the_pool_describes(make_provider: Callable[..., Any], ec2: Any, ami: str) -> None:
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnet = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"][0]["SubnetId"]
    sgs = [ec2.create_security_group(GroupName=f"g-{uuid.uuid4().hex[:8]}", Description="t", VpcId=vpc)["GroupId"]]
    sgs.append(ec2.create_security_group(GroupName=f"g-{uuid.uuid4().hex[:8]}", Description="t", VpcId=vpc)["GroupId"])
    provider = make_provider(
        subnet_id=subnet,
        security_group_ids=" , ".join(sgs),
        key_name="ops-key",
        cluster="prod",
        install_command="pip install corral==0.1.0",
    )
    assert isinstance(provider, Provider)

    instance_id = provider.launch(request(provider.pool, "p-node-1", tags={"team": "vision"}))

    raw = describe(ec2, instance_id)
    assert raw["State"]["Name"] in ("pending", "running")
    assert (raw["InstanceType"], raw["ImageId"], raw["SubnetId"], raw["KeyName"]) == (
        "g5.xlarge",
        ami,
        subnet,
        "ops-key",
    )
    assert sorted(g["GroupId"] for g in raw["SecurityGroups"]) == sorted(sgs)
    assert raw.get("InstanceLifecycle") != "spot"
    want = {"corral-cluster": "prod", "corral-pool": provider.pool, "corral-node": "p-node-1", "Name": "p-node-1"}
    assert tags_of(raw) == {**want, "team": "vision"}
    volume_ids = [m["Ebs"]["VolumeId"] for m in raw["BlockDeviceMappings"]]
    assert volume_ids, "the instance has its root volume"
    for volume in ec2.describe_volumes(VolumeIds=volume_ids)["Volumes"]:
        assert want.items() <= tags_of(volume).items()  # a restarted server (or an admin) finds the disks too

    # The boot script EC2 hands the machine: the token only in the 0600 file's here-document, then the agent.
    encoded = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(encoded).decode()
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and "set -euo pipefail" in lines
    assert script.count(TOKEN) == 1
    token_at = lines.index(TOKEN)
    assert lines[token_at - 1].startswith(f"(umask 077 && cat > {TOKEN_PATH} <<'")
    assert "pip install corral==0.1.0" in lines
    assert (
        shlex.join(
            ["agent", "--join", "https://corral.example:8443", "--token-file", TOKEN_PATH, "--node-name", "p-node-1"]
        )
        in script
    )
    assert "systemctl daemon-reload && systemctl enable --now corral-agent.service" in lines
    assert "Restart=always" in lines


def test_launch_is_idempotent_by_node_name(make_provider: Callable[..., Any], ec2: Any) -> None:
    provider = make_provider()
    first = provider.launch(request(provider.pool, "p-node-a"))
    again = provider.launch(request(provider.pool, "p-node-a"))
    other = provider.launch(request(provider.pool, "p-node-b"))

    assert again == first and other != first
    assert sorted(i["InstanceId"] for i in pool_instances(ec2, provider.pool)) == sorted([first, other])

    # Once that machine is gone, the name may be launched again (a new machine).
    provider.terminate(first)
    relaunched = provider.launch(request(provider.pool, "p-node-a"))
    assert relaunched not in (first, other)


def test_spot_type_launches_a_spot_instance(make_provider: Callable[..., Any], ec2: Any) -> None:
    provider = make_provider(spot_max_price="0.55")
    req = request(provider.pool, "p-spot-1", itype=SPOT_TYPE)
    market = provider.compute_run_args(req)["InstanceMarketOptions"]
    assert market == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
            "MaxPrice": "0.55",
        },
    }

    instance_id = provider.launch(req)

    assert describe(ec2, instance_id)["InstanceLifecycle"] == "spot"
    (seen,) = provider.list_instances()
    assert (seen.provider_id, seen.spot, seen.instance_type, seen.interruption_s) == (
        instance_id,
        True,
        "g5.2xlarge",
        None,  # no notice given
    )


def test_spot_notice_is_read_from_the_spot_request(make_provider: Callable[..., Any], ec2: Any, ami: str) -> None:
    """describe_spot_instance_requests is asked for the pool's spot instances; a fulfilled request is no notice.
    (moto cannot mark a request for termination: the notice itself is covered by test_instance_mapping.)"""
    provider = make_provider()
    spot = ec2.request_spot_instances(
        SpotPrice="0.5", LaunchSpecification={"ImageId": ami, "InstanceType": "g5.xlarge"}
    )
    instance_id = spot["SpotInstanceRequests"][0]["InstanceId"]
    tags = {"corral-cluster": "corral", "corral-pool": provider.pool, "corral-node": "p-spot-2"}
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])

    (seen,) = provider.list_instances()

    assert (seen.provider_id, seen.node_name, seen.spot, seen.interruption_s) == (instance_id, "p-spot-2", True, None)


# ---- list ----------------------------------------------------------------------------------------------------------
def test_list_shows_only_this_pools_machines_with_states_mapped(make_provider: Callable[..., Any], ec2: Any) -> None:
    provider = make_provider()
    neighbour = make_provider()  # another pool of the same cluster
    other_cluster = make_provider(pool=provider.pool, cluster="staging")  # the same pool name, another cluster
    running = provider.launch(request(provider.pool, "p-run"))
    stopped = provider.launch(request(provider.pool, "p-stop"))
    ended = provider.launch(request(provider.pool, "p-end"))
    theirs = neighbour.launch(request(neighbour.pool, "n-1"))
    staging = other_cluster.launch(request(provider.pool, "s-1"))
    ec2.stop_instances(InstanceIds=[stopped])
    ec2.terminate_instances(InstanceIds=[ended])

    seen = {i.provider_id: i for i in provider.list_instances()}

    assert set(seen) == {running, stopped, ended}
    assert seen[running] == Instance(running, "p-run", RUNNING, "g5.xlarge", False, None)
    assert (seen[stopped].node_name, seen[stopped].state) == ("p-stop", STOPPING)
    assert (seen[ended].node_name, seen[ended].state) == ("p-end", GONE)
    assert [i.provider_id for i in neighbour.list_instances()] == [theirs]
    assert [i.provider_id for i in other_cluster.list_instances()] == [staging]


def test_list_reads_every_page(make_provider: Callable[..., Any]) -> None:
    provider = make_provider()
    ids = {provider.launch(request(provider.pool, f"p-{n}")) for n in range(7)}
    calls: list[str | None] = []
    events = provider._ec2.meta.events  # ask for pages of 5, and count the pages read
    events.register("provide-client-params.ec2.DescribeInstances", lambda params, **_: params.update(MaxResults=5))
    events.register("after-call.ec2.DescribeInstances", lambda parsed, **_: calls.append(parsed.get("NextToken")))

    assert {i.provider_id for i in provider.list_instances()} == ids
    assert len(calls) == 2 and calls[0] and calls[1] is None


# ---- terminate -----------------------------------------------------------------------------------------------------
def test_terminate_ends_the_machine_and_is_idempotent(make_provider: Callable[..., Any], ec2: Any) -> None:
    provider = make_provider()
    instance_id = provider.launch(request(provider.pool, "p-t1"))

    provider.terminate(instance_id)

    assert describe(ec2, instance_id)["State"]["Name"] in ("shutting-down", "terminated")
    assert [(i.provider_id, i.state) for i in provider.list_instances() if i.state != GONE] == []
    provider.terminate(instance_id)  # again: not an error
    provider.terminate("i-0123456789abcdef0")  # never existed (or long gone): not an error


def test_terminate_refuses_another_pools_machine(make_provider: Callable[..., Any], ec2: Any) -> None:
    provider = make_provider()
    neighbour = make_provider()
    theirs = neighbour.launch(request(neighbour.pool, "n-keep"))

    with pytest.raises(ProviderError, match=f"{theirs} is not a machine of pool"):
        provider.terminate(theirs)

    assert describe(ec2, theirs)["State"]["Name"] in ("pending", "running")


# ---- errors --------------------------------------------------------------------------------------------------------
def test_an_unknown_ami_or_subnet_is_a_provider_error(make_provider: Callable[..., Any], ec2: Any) -> None:
    bad_ami = make_provider(ami="ami-00000000deadbeef")
    with pytest.raises(ProviderError) as e:
        bad_ami.launch(request(bad_ami.pool, "p-x"))
    assert "InvalidAMIID.NotFound" in str(e.value) and "ami-00000000deadbeef" in str(e.value)
    assert "\n" not in str(e.value)

    bad_subnet = make_provider(subnet_id="subnet-0123456789abcdef0")
    with pytest.raises(ProviderError) as e:
        bad_subnet.launch(request(bad_subnet.pool, "p-y"))
    assert "InvalidSubnetID.NotFound" in str(e.value) and "subnet-0123456789abcdef0" in str(e.value)

    assert pool_instances(ec2, bad_ami.pool) == [] and pool_instances(ec2, bad_subnet.pool) == []


def test_no_credentials_is_a_provider_error(make_provider: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    provider = make_provider()
    with pytest.raises(ProviderError, match="aws describe_instances: Unable to locate credentials"):
        provider.launch(request(provider.pool, "p-z"))


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({}, "ami"),
        ({"ami": ""}, "ami"),
        ({"ami": "ubuntu-22.04"}, "ami"),
        ({"ami": "ami-0123456789abcdef0", "subnet": "subnet-0123456789abcdef0"}, "subnet"),  # a typo'd key
        ({"ami": "ami-0123456789abcdef0", "subnet_id": "vpc-0123456789abcdef0"}, "subnet_id"),
        ({"ami": "ami-0123456789abcdef0", "security_group_ids": "sg-0123456789abcdef0,default"}, "security_group_ids"),
        ({"ami": "ami-0123456789abcdef0", "security_group_ids": " , "}, "security_group_ids"),
        ({"ami": "ami-0123456789abcdef0", "iam_instance_profile": "arn:aws:iam::12:role/x"}, "iam_instance_profile"),
        ({"ami": "ami-0123456789abcdef0", "endpoint_url": "ftp://moto:5000"}, "endpoint_url"),
        ({"ami": "ami-0123456789abcdef0", "spot_max_price": "cheap"}, "spot_max_price"),
        ({"ami": "ami-0123456789abcdef0", "spot_max_price": "-1"}, "spot_max_price"),
        ({"ami": "ami-0123456789abcdef0", "cluster": "a b"}, "cluster"),
        ({"ami": "ami-0123456789abcdef0", "install_command": "  "}, "install_command"),
    ],
)
def test_bad_settings_name_the_key(settings: dict[str, str], key: str) -> None:
    from corral.cloud.aws import AwsProvider, check_aws_settings

    with pytest.raises(ProviderError, match=rf"^settings\.{key}: "):
        check_aws_settings(settings)
    with pytest.raises(ProviderError, match=rf"^settings\.{key}: "):
        AwsProvider("p", REGION, settings)


def test_good_settings_pass() -> None:
    from corral.cloud.aws import check_aws_settings

    check_aws_settings(
        {
            "ami": "ami-0123456789abcdef0",
            "subnet_id": "subnet-0123456789abcdef0",
            "security_group_ids": "sg-0123456789abcdef0, sg-89abcdef",
            "key_name": "ops key",
            "iam_instance_profile": "arn:aws:iam::123456789012:instance-profile/corral-node",
            "endpoint_url": "https://ec2.internal.example",
            "install_command": "pip install corral==0.1.0",
            "spot_max_price": "0.50",
            "cluster": "prod",
        }
    )
    check_aws_settings({"ami": "ami-12c6146b", "iam_instance_profile": "corral-node"})


def test_the_module_imports_without_boto3_and_says_how_to_get_it() -> None:
    code = (
        "import sys; sys.modules['boto3'] = None; sys.modules['botocore'] = None\n"
        "from corral.cloud.aws import AwsProvider\n"
        "from corral.cloud.base import ProviderError\n"
        "try:\n    AwsProvider('p', 'us-east-1', {'ami': 'ami-0123456789abcdef0'})\n"
        "except ProviderError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "the aws provider needs boto3: pip install 'corral[aws]'"


def test_instance_mapping() -> None:
    from corral.cloud.aws import compute_instance

    def raw(state: str, spot: bool = False) -> dict[str, Any]:
        tags = [{"Key": "corral-node", "Value": "n1"}, {"Key": "Name", "Value": "n1"}]
        extra = {"InstanceLifecycle": "spot"} if spot else {}
        return {"InstanceId": "i-1", "InstanceType": "p4d.24xlarge", "State": {"Name": state}, "Tags": tags, **extra}

    table = {
        "pending": PENDING,
        "running": RUNNING,
        "shutting-down": STOPPING,
        "stopping": STOPPING,
        "stopped": STOPPING,
        "terminated": GONE,
    }
    for ec2_state, state in table.items():
        assert compute_instance(raw(ec2_state)) == Instance("i-1", "n1", state, "p4d.24xlarge", False, None)
    assert compute_instance(raw("running", spot=True), spot_notice=True).interruption_s == 120.0
    assert compute_instance(raw("running", spot=True)).interruption_s is None
    assert compute_instance(raw("running"), spot_notice=True).interruption_s is None  # on-demand: no notice
    assert compute_instance({"InstanceId": "i-2", "State": {"Name": "running"}}).node_name == ""


# ---- the boot script (pure; run by bash in a sandbox) --------------------------------------------------------------
HOSTILE_URL = 'https://x.example/\'; touch "$CANARY" #'
HOSTILE_NAME = 'n$(touch "$CANARY")`touch "$CANARY"`\nCORRAL_JOIN_TOKEN_END\ntouch "$CANARY"'


def run_boot_script(tmp_path: Path, req: LaunchRequest) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the boot script with its absolute paths moved under tmp_path, a fake `corral` (records its argv as JSON)
    installed by the install command, and a fake systemctl (records its calls): what the machine would do."""
    root = tmp_path / "root"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f'#!/bin/bash\necho "$@" >> {shlex.quote(str(tmp_path / "systemctl.log"))}\n')
    systemctl.chmod(0o755)
    fake_corral = f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n"
    install = (
        f"mkdir -p {shlex.quote(str(tmp_path / 'venv'))} && "
        f"printf '%s' {shlex.quote(fake_corral)} > {shlex.quote(str(tmp_path / 'venv' / 'corral'))} && "
        f"chmod +x {shlex.quote(str(tmp_path / 'venv' / 'corral'))} && "
        f"export PATH={shlex.quote(str(tmp_path / 'venv'))}:$PATH"
    )
    script = compute_user_data(req, install).replace("/etc/", f"{root}/etc/")
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CANARY": str(tmp_path / "canary"), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    return done, root


def test_boot_script_writes_the_token_file_and_starts_the_agent(tmp_path: Path) -> None:
    done, root = run_boot_script(tmp_path, request("gpu", "gpu-abc12"))

    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr  # never echoed
    token_file = root / TOKEN_PATH.lstrip("/")
    assert token_file.read_text() == TOKEN + "\n"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    unit = (root / UNIT_PATH.lstrip("/")).read_text()
    assert "Restart=always" in unit and f"ExecStart={root}/etc/corral/run-agent" in unit
    assert (tmp_path / "systemctl.log").read_text().splitlines() == [
        "daemon-reload",
        "enable --now corral-agent.service",
    ]
    run_agent = root / "etc" / "corral" / "run-agent"
    argv = json.loads(subprocess.run([str(run_agent)], capture_output=True, text=True, check=True).stdout)
    token_path = f"{root}{TOKEN_PATH}"  # /etc/corral/join-token on the machine
    assert argv == ["agent", "--join", "https://corral.example:8443", "--token-file", token_path] + [
        "--node-name",
        "gpu-abc12",
    ]


def test_boot_script_values_cannot_break_out_of_their_quotes(tmp_path: Path) -> None:
    req = request("gpu", HOSTILE_NAME, join_url=HOSTILE_URL)
    done, root = run_boot_script(tmp_path, req)

    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "canary").exists(), "a hostile value ran as a command"
    argv = json.loads(subprocess.run([str(root / "etc/corral/run-agent")], capture_output=True, text=True).stdout)
    # Each value reaches the agent exactly as given (the boot script itself runs nothing of it).
    assert argv == ["agent", "--join", HOSTILE_URL, "--token-file", f"{root}{TOKEN_PATH}", "--node-name", HOSTILE_NAME]
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("token", ["", "two\nlines", "CORRAL_JOIN_TOKEN_END", "nul\0byte"])
def test_boot_script_refuses_a_token_that_is_not_one_line(token: str) -> None:
    with pytest.raises(ProviderError, match="join token"):
        compute_user_data(request("gpu", "n1", join_token=token), "true")


def test_boot_script_over_ec2s_limit_is_refused() -> None:
    fits = "true # " + "x" * 8000
    assert len(compute_user_data(request("gpu", "n1"), fits).encode()) <= MAX_USER_DATA_BYTES
    with pytest.raises(ProviderError, match="16384-byte user-data limit"):
        compute_user_data(request("gpu", "n1"), "true # " + "x" * MAX_USER_DATA_BYTES)
